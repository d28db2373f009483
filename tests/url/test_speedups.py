"""The compiled fast path answers exactly what its pure-Python reference answers.

``urlsieve._speedups.fast_canonical`` replaces the ``_FAST`` regular
expression on the canonicaliser's hottest call; ``fast_canonical_py`` (the
regex) stays as the reference. Every string here goes through both.
"""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
import sysconfig
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from tests.needs import missing
from tests.url.test_properties import URLISH
from urlsieve import Filter, canonicalize
from urlsieve.url import parse
from urlsieve.url.parse import _FAST, _parse_slow, fast_canonical_py
from urlsieve.url.profile import FILTER


def _can_build() -> bool:
    """A C compiler and Python's headers: what setuptools needs to build the extension."""
    include = Path(sysconfig.get_paths()["include"]) / "Python.h"
    compiler = (sysconfig.get_config_var("CC") or "cc").split()[0]
    return include.exists() and shutil.which(compiler) is not None


def _speedups_sources() -> list[Path]:
    """The extension's C units, as setup.py lists them (SPEEDUPS_SOURCES, read without
    running setup.py)."""
    root = Path(parse.__file__).parents[3]
    if not (root / "setup.py").is_file():
        pytest.skip("not a source checkout: no setup.py to read the C units from")
    tree = ast.parse((root / "setup.py").read_text(encoding="utf-8"))
    for node in tree.body:
        names = [getattr(t, "id", None) for t in getattr(node, "targets", [])]
        if isinstance(node, ast.Assign) and names == ["SPEEDUPS_SOURCES"]:
            return [root / name for name in ast.literal_eval(node.value)]
    raise AssertionError("setup.py has no SPEEDUPS_SOURCES list")


def test_setup_builds_every_c_unit_of_the_extension() -> None:
    """Every .c file beside the package is one of the extension's units (none forgotten in
    setup.py's list, none listed that is gone), and _speedups.c, whose table of contents
    names each unit, comes first."""
    sources = _speedups_sources()
    here = Path(parse.__file__).parents[1]
    assert sources[0].name == "_speedups.c"
    assert sorted(p.resolve() for p in sources) == sorted(p.resolve() for p in here.glob("*.c"))
    table = sources[0].read_text(encoding="utf-8").split("*/", 1)[0]
    for unit in sources[1:]:
        assert f" {unit.name} " in table, f"{unit.name} is missing from _speedups.c's contents"


def test_the_accelerator_is_in_use_wherever_it_can_be_built() -> None:
    if os.environ.get("URLSIEVE_PURE_PYTHON"):
        assert not parse.ACCELERATED
    elif _can_build():
        # A compiler and Python's headers are here: `pip install` must have built it.
        assert parse.ACCELERATED, "urlsieve._speedups is missing: reinstall with pip install -e ."
    # Without a compiler either answer is possible (a wheel built elsewhere may carry it).


SCANS = ["bytes", "sse2", "avx512"]


def _scans() -> list[str]:
    """The scans this CPU can run, up to the one in use by default (the widest)."""
    try:
        from urlsieve import _speedups
    except ImportError:
        return ["bytes"]  # the fixture skips
    return SCANS[: SCANS.index(_speedups.scan_mode()) + 1]


@pytest.fixture(scope="module", params=_scans())
def compiled(request: pytest.FixtureRequest) -> Iterator[Callable[[str, bool], str | None]]:
    """``fast_canonical`` with each scan: the per-byte definition alone, and each vector
    pass in front of it (the vector passes leave what they cannot decide to it)."""
    mod = pytest.importorskip("urlsieve._speedups", reason="built without a C compiler")
    previous = mod.scan_mode(request.param)
    fn: Callable[[str, bool], str | None] = mod.fast_canonical
    yield fn
    mod.scan_mode(previous)


def test_the_widest_scan_is_the_default_and_a_missing_one_is_refused() -> None:
    mod = pytest.importorskip("urlsieve._speedups", reason="built without a C compiler")
    best = mod.scan_mode()
    flags = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    if sys.platform == "linux" and os.uname().machine == "x86_64":
        assert best == ("avx512" if " avx512bw" in flags and " bmi2" in flags else "sse2")
    with pytest.raises(ValueError, match="not one of this CPU's scans"):
        mod.scan_mode("avx1024")
    with pytest.raises(ValueError, match="not one of this CPU's scans"):
        mod.scan_mode(b"sse2")
    assert mod.scan_mode("bytes") == best
    assert mod.scan_mode(best) == "bytes"
    assert mod.scan_mode() == best


def _same(fn: Callable[[str, bool], str | None], text: str) -> None:
    for allow_query in (True, False):
        assert fn(text, allow_query) == fast_canonical_py(text, allow_query), (text, allow_query)


# Canonical strings straight from the reference grammar (the accepting side) ...
CANONICAL = st.from_regex(_FAST, fullmatch=True)


# ... and small edits of them (the boundary: one character off).
@st.composite
def near_canonical(draw: st.DrawFn) -> str:
    text = draw(CANONICAL)
    at = draw(st.integers(0, len(text)))
    edit = draw(st.sampled_from(["insert", "delete", "replace", "strip_scheme"]))
    char = draw(
        st.sampled_from([*'/.?%#:@\\ A9a_-"=*|^', "%25", "%2F", "%7F", "%7e", "ü", "\x00", ".."])
    )
    if edit == "insert":
        return text[:at] + char + text[at:]
    if edit == "delete":
        return text[:at] + text[at + 1 :]
    if edit == "replace":
        return text[:at] + char + text[at + 1 :]
    return text.partition("://")[2]


EDGES = [
    "",
    "http://",
    "http://a",
    "a",
    "a.com",
    "a.com/",
    "a.com?x",
    "http://a.com?x=1",
    "http://a.com/?",
    "http://1.2.3.4/",
    "http://1.2.3.4",
    "1.2.3.4",
    "http://01.2.3.4/",
    "http://1.2.3/",
    "http://1.2.3.4.5/",
    "http://256.1.1.1/",
    "http://255.255.255.255/",
    "http://1.2.3.4a/",
    "http://1234.1.1.1/",
    "http://a.1/",
    "http://a.b1/",
    "http://a..b/",
    "http://.a/",
    "http://a./",
    "http://_a-.b_/",
    "http://a.com//",
    "http://a.com/./",
    "http://a.com/.a",
    "http://a.com/a.",
    "http://a.com/a/",
    "http://a.com/a//b",
    "http://a.com/a/?b",
    "http://a.com/%25",
    "http://a.com/%2541",
    "http://a.com/%25g1",
    "http://a.com/%254",
    "http://a.com/%25aa",
    "http://a.com/%2F",
    "http://a.com/%20",
    "http://a.com/%23",
    "http://a.com/%7F",
    "http://a.com/%7E",
    "http://a.com/%80%FF",
    "http://a.com/%ff",
    "http://a.com/%0",
    "http://a.com/%",
    "http://a.com/%2E",
    "http://a.com/?%",
    "http://a.com/?%25",
    "http://a.com/??//..#",
    "http://a.com/?a b",
    "https://a.com/",
    "httpss://a.com/",
    "ftp://a.com/",
    "ws://a.com/",
    "wss://a.com/",
    "HTTP://a.com/",
    "http:/a.com/",
    "a.com/b://c",
    "a.com:80/",
    "user@a.com/",
    "http://a.com/\\",
    "http://a.com/ü",
    "http://ä.com/",
    "http://a.com/a\x00",
    "http://a.com/~a!$&'()*+,;=:@[]^_`{|}",
    # hosts with the printable code points a canonical host may hold besides [a-z0-9_.-]
    'https://"www.a.com/x',
    '"www.a.com/x',
    "http://a!$&'()*+,;=`{}~b.com/",
    "http://*.a.com/",
    'http://a.b"/',
    'http://a."b/',
    'http://".a/',
    'http://"/',
    "http://a=b.1/",
    "http://a|b.com/",
    "http://a^b.com/",
    "http://a<b.com/",
    'HTTP://"A.COM/',
    'http://"' + "a" * 70 + ".com/",
    # segments starting with "." that are not "." or ".."
    "http://a.com/.f",
    "http://a.com/.well-known/x",
    "http://a.com/...",
    "http://a.com/..f/.../x",
    "http://a.com/x/..",
    "http://a.com/x/../",
    "http://a.com/x/.?q",
    "http://a.com/x/..?q",
    "http://a.com/.%20",
]


@pytest.mark.parametrize("text", EDGES)
def test_edge_cases_agree(compiled: Callable[[str, bool], str | None], text: str) -> None:
    _same(compiled, text)


@given(CANONICAL)
def test_canonical_strings_agree(compiled: Callable[[str, bool], str | None], text: str) -> None:
    _same(compiled, text)
    assert compiled(text, True) is not None


@given(near_canonical())
@example("http://a.com/%25%32")
def test_near_canonical_strings_agree(
    compiled: Callable[[str, bool], str | None], text: str
) -> None:
    _same(compiled, text)


# The compiled scan reads 64 bytes at a time (16 per vector): what matters sits across
# those boundaries — a host ending at byte 64, a "//", "/." or "?" split by one, a bad
# byte just past one, a host longer than 64 bytes (left to the per-byte scan).
@st.composite
def across_blocks(draw: st.DrawFn) -> str:
    scheme = draw(st.sampled_from(["http://", "https://", ""]))
    label = st.text("abcz09_-", min_size=1, max_size=70) | st.text('abz0_-"=*', min_size=1)
    host = (
        ".".join(draw(st.lists(label, min_size=1, max_size=4)))
        + "."
        + draw(st.sampled_from(["com", "a", "x9"]))
    )
    segments = draw(st.lists(st.text("ab.%2F~!", min_size=0, max_size=40), max_size=6))
    text = scheme + host + "".join("/" + seg for seg in segments)
    if draw(st.booleans()):
        text += "?" + draw(st.text("a=&/?.\\%#", max_size=80))
    # one edit at a block boundary of the part after the scheme (or anywhere)
    block = len(scheme) + 16 * draw(st.integers(1, 8)) + draw(st.integers(-2, 1))
    at = min(max(block, 0), len(text))
    char = draw(
        st.sampled_from(
            ["", "/", ".", "?", "%", "#", " ", "\\", "A", "\x80", "ü", "//", "/.", "/..", '"', "|"]
        )
    )
    return text[:at] + char + text[at + (1 if draw(st.booleans()) else 0) :]


@given(across_blocks())
@example("http://" + "a" * 60 + ".com/x")
@example("http://" + "a" * 57 + ".com//x")
@example("http://" + "a" * 56 + ".com/.x")
@example("http://" + "a" * 59 + ".com//x")  # "/" at byte 63 of the host's block, "/" at 64
@example("http://" + "a" * 59 + ".com/.x")
@example("http://" + "a" * 59 + ".com/x" + "/b" * 40 + "//c")
@example("a" * 63 + "b")
def test_strings_across_the_scan_blocks_agree(
    compiled: Callable[[str, bool], str | None], text: str
) -> None:
    _same(compiled, text)


@given(st.one_of(st.text(), URLISH))
def test_arbitrary_strings_agree(compiled: Callable[[str, bool], str | None], text: str) -> None:
    _same(compiled, text)


@given(st.one_of(near_canonical(), URLISH))
def test_what_the_compiled_path_accepts_is_a_fixpoint_of_the_full_pipeline(
    compiled: Callable[[str, bool], str | None], text: str
) -> None:
    result = compiled(text, True)
    if result is not None:
        assert _parse_slow(text, FILTER).canonical == result
        assert _parse_slow(result, FILTER).canonical == result


def test_an_unchanged_url_is_returned_as_the_same_object(
    compiled: Callable[[str, bool], str | None],
) -> None:
    url = "http://example.com/a/b?c=d"
    assert compiled(url, True) is url


@pytest.mark.parametrize(
    ("args", "message"),
    [((b"http://a.com/", True), "must be str, not bytes"), (("http://a.com/",), "2 arguments")],
)
def test_misuse_is_a_type_error(
    compiled: Callable[..., str | None], args: tuple[object, ...], message: str
) -> None:
    with pytest.raises(TypeError, match=message):
        compiled(*args)


_BUILT_RUN = r"""
import importlib.util, json, sys
spec = importlib.util.spec_from_file_location("urlsieve._speedups", sys.argv[1])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)  # an unresolved symbol fails here, at load
sys.modules["urlsieve._speedups"] = module
import xxhash
from urlsieve import Filter, canonicalize
from urlsieve._accel import report
from urlsieve.url import parse
state = report()
assert state.full and parse.ACCELERATED, state.lines()
assert state.where == sys.argv[1], state.where
data = bytes(range(256)) * 20
for n in (0, 1, 3, 4, 8, 9, 16, 17, 128, 129, 240, 241, 1024, 1025, 2048, 4096, 5000):
    assert module.xxh3_64(data[:n]) == xxhash.xxh3_64_intdigest(data[:n]), n
    assert module.xxh3_128(data[:n]) == xxhash.xxh3_128_intdigest(data[:n]), n
urls = json.loads(sys.argv[2])
flt = Filter.from_lists([sys.argv[3]], [sys.argv[3] + "/allowed"])
print(json.dumps([[canonicalize(u), flt.check(u).action] for u in urls]))
"""


@pytest.mark.parametrize(
    "defines",
    [[], ["-DURLSIEVE_XXH3_PORTABLE"]],
    ids=["default", "portable-xxh3"],
)
def test_the_extension_builds_from_its_own_sources_with_every_path(
    tmp_path: Path, defines: list[str]
) -> None:
    """The extension needs a C compiler and Python's headers, nothing else: compiled from
    its own units (setup.py's list; no -I but Python's, warnings as errors) it loads with
    every compiled path, hashes as the xxhash package does and answers as the reference,
    and exports nothing but its init function. The portable variant is the XXH3 a target
    without SSE2 or a 128-bit integer type builds."""
    if not _can_build():
        missing("no C compiler or Python headers: the extension cannot be built")
    sources = [str(p) for p in _speedups_sources()]
    so = tmp_path / "_speedups_own.so"
    compiler = (sysconfig.get_config_var("CC") or "cc").split()
    include = sysconfig.get_paths()["include"]
    build = [*compiler, "-O1", "-Wall", "-Werror", "-fPIC", "-shared", f"-I{include}", *defines]
    command = [*build, *sources, "-o", str(so)]
    done = subprocess.run(command, check=False, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    nm = shutil.which("nm")
    if nm is not None and sys.platform.startswith("linux"):  # the units' shared functions
        # stay inside the shared object (hidden by _speedups.h)
        listed = subprocess.run(
            [nm, "-D", "--defined-only", str(so)], check=True, capture_output=True, text=True
        )
        exported = {line.split()[-1] for line in listed.stdout.splitlines() if line.strip()}
        assert exported == {"PyInit__speedups"}, sorted(exported)
    lists = Path(parse.__file__).parents[1] / "data" / "sample-lists"
    urls = [
        "http://ads.example.com/x",
        "HTTP://WWW.Example.COM:80/a/../b?q=1#f",
        "http://sub.doubleclick.net/pixel.gif",
        "https://bücher.example/",
        "http://10.0.0.1/admin/",
    ]
    flt = Filter.from_lists([lists], [lists / "allowed"])
    expected = [[canonicalize(u), flt.check(u).action] for u in urls]
    run = [sys.executable, "-c", _BUILT_RUN, str(so), json.dumps(urls), str(lists)]
    done = subprocess.run(run, check=False, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == expected


def test_a_rebuild_never_reuses_an_extension_left_in_build(tmp_path: Path) -> None:
    """setup.py compiles the extension on every build: one left in build/ by an earlier
    build (other flags, other sources) is never taken as up to date."""
    if not _can_build():
        missing("no C compiler or Python headers: the extension cannot be built")
    root = Path(parse.__file__).parents[3]
    if not (root / "setup.py").is_file():
        pytest.skip("not a source checkout: no setup.py to build with")
    for name in ("setup.py", "pyproject.toml", "README.md"):
        shutil.copy(root / name, tmp_path / name)
    shutil.copytree(
        root / "src" / "urlsieve",
        tmp_path / "src" / "urlsieve",
        ignore=shutil.ignore_patterns("*.so", "__pycache__"),
    )
    env = {**os.environ, "CFLAGS": "-O0"}
    build = [sys.executable, "setup.py", "build_ext", "--build-lib", "out", "--build-temp", "tmp"]
    outputs = []
    for _ in range(2):
        done = subprocess.run(
            build, cwd=tmp_path, env=env, capture_output=True, text=True, check=False, timeout=300
        )
        assert done.returncode == 0, done.stderr
        outputs.append(done.stdout + done.stderr)
    assert "up-to-date" not in outputs[1]
    assert "building 'urlsieve._speedups' extension" in outputs[1]
    assert list((tmp_path / "out" / "urlsieve").glob("_speedups*.so"))
