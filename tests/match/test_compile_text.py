"""The compiled list reader (``compile_lines`` through ``SnapshotBuilder.add_text``) and table
layout (``table_place``) held equal to their references: the line-by-line reader into
``SnapshotBuilder.add`` and the vectorised ``_table_rounds``. Equal means the same image,
byte for byte, and the same report for every file, on any bytes."""

from __future__ import annotations

import mmap
import random
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.needs import missing
from urlsieve._accel import speedups
from urlsieve.match.snapshot import SnapshotBuilder, SnapshotMatcher
from urlsieve.match.snapshot import build as snapshot
from urlsieve.match.snapshot.build import _table, _table_rounds
from urlsieve.match.snapshot.format import _SLOT, _slots
from urlsieve.rules import load_lists
from urlsieve.rules.model import parse_rule
from urlsieve.rules.readers import LineContext


@pytest.fixture
def compiled() -> None:
    if speedups is None or not hasattr(speedups, "compile_lines"):
        missing("urlsieve._speedups not built, or a stale build: no list reader (urlsieve doctor)")


# Lines near the edge of what the compiled reader takes, each a few bytes from a line it
# must leave to the line parser.
EDGE_LINES = [
    "example.com",
    "sub.example.com",
    "a-b_c.example.net",
    "Example.com",
    "example.com.",
    ".example.com",
    "example..com",
    "com",
    "localhost",
    "1.2.3.4",
    "1.2.3.4/x",
    "1.2.3.com",
    "01.2.3.4",
    "xn--bcher-kva.example",
    "example.com/",
    "example.com/ads",
    "example.com/ads/",
    "example.com/ads/x/y",
    "example.com/Ads",
    "example.com/ads|",
    "example.com/a|b",
    "=example.com",
    "@@example.com",
    "@@example.com/ok/",
    "*.example.com",
    "www.example.com/x",
    "WWW.example.com/x",
    "www2.example.com/x",
    "web.de/x",
    "ftp.example.org/pub",
    "wwwx.example.com/x",
    "example.com/p?id=1",
    "example.com/a//b",
    "example.com/./a",
    "example.com/../a",
    "example.com/a/..",
    "example.com/.hidden",
    "example.com/a.b/c",
    "example.com/%20x",
    "example.com/%2e%2e/",
    "example.com/%2F",
    "example.com/%25",
    "example.com/%",
    "example.com/a b",
    "example.com #comment",
    "example.com\t",
    " example.com",
    "#comment",
    "",
    "\r",
    "example.com\r",
    "example.com\r\r",
    "http://example.com/x",
    "example.com:8080/x",
    "user@example.com/x",
    "exämple.com",
    "例子.com",
    "example.com/ü",
    "example.com/\udcff",
    "0.0.0.0 example.com",
    "example.com/~user/",
    "example.com/a:b",
    "example.com/x://y",
    "a" * 70 + ".com",
    "b.com/" + "c" * 300,
]

_line = st.one_of(
    st.sampled_from(EDGE_LINES),
    st.from_regex(r"[a-z0-9._-]{1,12}\.[a-z]{2,4}(/[a-zA-Z0-9._%|-]{0,8}){0,3}", fullmatch=True),
    st.text(st.characters(exclude_categories=["Cs"], exclude_characters="\x00"), max_size=20),
)


def _texts() -> st.SearchStrategy[str]:
    return st.lists(_line, max_size=40).map("\n".join) | st.lists(_line, max_size=40).map(
        lambda lines: "".join(f"{line}\n" for line in lines)
    )


def _load(paths: list[Path], bulk: bool, action: str | None) -> tuple[bytes, list[object]]:
    builder = SnapshotBuilder()
    # A bound method has no add_text: the line-by-line reference path.
    result = load_lists(paths, sink=builder if bulk else builder.add, action=action)
    image = bytes(builder.build({"x": 1}, created=0.0))
    reports = [
        (
            r.source,
            r.lines,
            r.rule_lines,
            r.loaded,
            r.duplicates,
            r.comments,
            r.ignored,
            r.skipped,
            [str(w) for w in r.warnings],
        )
        for r in result.reports
    ]
    return image, reports


@pytest.mark.usefixtures("compiled")
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    domains=_texts(),
    urls=_texts(),
    plain=_texts(),
    allow=st.booleans(),
)
def test_bulk_reader_builds_the_image_of_the_line_reader(
    tmp_path_factory: pytest.TempPathFactory, domains: str, urls: str, plain: str, allow: bool
) -> None:
    root = tmp_path_factory.mktemp("lists")
    category = root / "tree" / "cat"
    category.mkdir(parents=True)
    encode = {"encoding": "utf-8", "errors": "surrogateescape"}
    (category / "domains").write_text(domains, **encode)
    (category / "urls").write_text(urls, **encode)
    (root / "list.txt").write_text(plain + "\nexample.com\n" + plain, **encode)
    paths = [root / "tree", root / "list.txt"]
    action = "allow" if allow else None
    assert _load(paths, True, action) == _load(paths, False, action)


@pytest.mark.usefixtures("compiled")
def test_edge_lines_one_by_one_and_all_together(tmp_path: Path) -> None:
    for n, line in enumerate([*EDGE_LINES, "\n".join(EDGE_LINES)]):
        for name in ("domains", "urls"):
            category = tmp_path / f"t{n}{name}" / "cat"
            category.mkdir(parents=True)
            (category / name).write_text(
                f"{line}\nexample.org\n{line}\n", "utf-8", errors="surrogateescape"
            )
            paths = [category.parent]
            assert _load(paths, True, None) == _load(paths, False, None), line


@pytest.mark.usefixtures("compiled")
def test_the_bulk_reader_takes_plain_lines_and_leaves_the_rest() -> None:
    """The fast path is really taken (a reader that never took a line would pass the
    equality tests), and stops before the first line it does not take."""
    text = "a.com\nb.com/x/\n#c\n\nUPPER.com\nd.com\n"
    builder = SnapshotBuilder()
    ctx = LineContext("block", "cat", "src")
    run = builder.add_text(text, 0, 0, ctx, 1)
    assert run == (text.index("UPPER"), 4, 2, 2, 0)
    assert builder.add_text(text, text.index("UPPER"), 0, ctx, 5) is None
    assert builder.add_text(text, text.index("d.com"), 0, ctx, 6) == (len(text), 1, 0, 1, 0)
    assert len(builder) == 3
    # A domains file leaves a path to the line parser, which reports it.
    assert builder.add_text("e.com/x\n", 0, 1, ctx, 1) is None
    # A urls file leaves a www. label to the line parser, which drops it.
    assert builder.add_text("www.f.com/x\n", 0, 2, ctx, 1) is None
    assert builder.add_text("f.com\nf.com\n", 0, 0, ctx, 1) == (12, 2, 0, 1, 1)


@pytest.mark.usefixtures("compiled")
def test_line_numbers_and_provenance_survive_the_bulk_path(tmp_path: Path) -> None:
    from urlsieve import Filter

    lists = tmp_path / "ads.txt"
    lists.write_text("#head\n\nads.example\nUPPER.example\ntrack.example/pixel/\n")
    flt = Filter.from_lists([lists])
    verdict = flt.check("http://track.example/pixel/1.gif")
    assert verdict.rule is not None
    assert (verdict.rule.source, verdict.rule.line) == (str(lists), 5)
    assert verdict.rule.pattern == "track.example/pixel/"
    upper = flt.check("http://upper.example/")
    assert upper.rule is not None and upper.rule.line == 4


def test_a_builder_builds_once() -> None:
    builder = SnapshotBuilder()
    builder.build()
    with pytest.raises(RuntimeError, match="built"):
        builder.build()
    with pytest.raises(RuntimeError, match="built"):
        builder.add_text("a.com\n", 0, 0, LineContext("block", "c", "s"), 1)


@given(
    keys=st.lists(st.integers(1, 2**64 - 1), max_size=300, unique=True),
    narrow=st.booleans(),
)
@settings(max_examples=200, deadline=None)
def test_table_place_lays_out_the_bytes_of_the_reference(keys: list[int], narrow: bool) -> None:
    if speedups is None:
        pytest.skip("no extension: _table is the reference itself")
    if narrow:  # many keys with the last home slot: long probe runs, wrapping at the end
        keys = sorted({(0xFFFFFFFF << 32) | (k & 0xFFFFFFFF) for k in keys})
    k = np.array(keys, dtype=np.uint64)
    v = np.arange(1, len(keys) + 1, dtype=np.uint32) * 3
    slots = _slots(len(keys))
    reference = _table_rounds(k, v, np.zeros(slots, _SLOT))
    assert _table(k, v).tobytes() == reference.tobytes()


def test_table_place_refuses_misuse() -> None:
    if speedups is None:
        pytest.skip("no extension")
    place = speedups.table_place
    keys, values = np.ones(4, np.uint64), np.ones(4, np.uint32)
    with pytest.raises(ValueError):
        place(keys, np.ones(3, np.uint32), np.zeros(8, _SLOT))
    with pytest.raises(ValueError):  # values of 8 bytes
        place(keys, keys, np.zeros(8, _SLOT))
    with pytest.raises(ValueError):  # no slot
        place(keys[:0], values[:0], np.zeros(0, _SLOT))
    with pytest.raises(ValueError):  # part of a slot
        place(keys[:1], values[:1], np.zeros(10, np.uint8))
    with pytest.raises(ValueError):  # more keys than slots
        place(np.arange(1, 10, dtype=np.uint64), np.ones(9, np.uint32), np.zeros(8, _SLOT))
    with pytest.raises(BufferError):
        place(keys, values, bytes(96))  # read-only table
    with pytest.raises(TypeError):
        place(keys, values)


@pytest.mark.usefixtures("compiled")
@given(
    text=st.text(max_size=200) | st.binary(max_size=200).map(lambda b: b.decode("latin-1")),
    pos=st.integers(-5, 250),
    mode=st.integers(-1, 3),
    max_lines=st.integers(-1, 5),
    rule_id=st.integers(-1, 2**33),
    offset=st.integers(-1, 2**33),
    category=st.integers(-1, 70_000),
)
@settings(max_examples=300, deadline=None)
def test_compile_lines_takes_any_arguments_without_crashing(  # noqa: PLR0917
    text: str, pos: int, mode: int, max_lines: int, rule_id: int, offset: int, category: int
) -> None:
    fn = speedups.compile_lines  # type: ignore[union-attr]
    try:
        run = fn(text, pos, mode, max_lines, rule_id, offset, category, True)
    except (ValueError, OverflowError):
        return
    if run is not None:
        end, lines, comments, rules = run[:4]
        assert pos < end <= len(text) + 1
        assert 0 < lines <= max_lines and 0 <= comments <= lines and 0 <= rules <= lines
        assert len(run[4 + 1]) == 8 * rules  # offsets
        assert len(run[4 + 7]) == len(run[4 + 8]) * 2  # expression hashes and their rules
    with pytest.raises(TypeError):
        fn(b"bytes", 0, 0, 1, 0, 0, 0, True)
    with pytest.raises(TypeError):
        fn(text, 0, 0)


def test_a_random_list_compiles_to_the_same_snapshot_either_way(tmp_path: Path) -> None:
    """A larger list, many runs and chunks (the chunk made small), against the reference."""
    if speedups is None or not hasattr(speedups, "compile_lines"):
        missing("urlsieve._speedups not built, or a stale build: no list reader (urlsieve doctor)")
    rnd = random.Random(7)
    lines = []
    for _ in range(5000):
        host = ".".join(
            "".join(rnd.choices("abcdefgh0123-_", k=rnd.randint(1, 6))) for _ in range(3)
        )
        host = host.strip(".-") + rnd.choice([".com", ".net", ".Org"])
        path = "".join(
            f"/{rnd.choice(['ads', 'x', 'A', 'p.q', '..'])}" for _ in range(rnd.randint(0, 3))
        )
        lines.append(rnd.choice([host, host + path, host + path + "/", "# c", "", "@@" + host]))
    (tmp_path / "big.txt").write_text("\n".join(lines))
    chunk = snapshot._TEXT_CHUNK
    snapshot._TEXT_CHUNK = 37
    try:
        assert _load([tmp_path / "big.txt"], True, None) == _load(
            [tmp_path / "big.txt"], False, None
        )
    finally:
        snapshot._TEXT_CHUNK = chunk


@given(
    batches=st.lists(
        st.lists(st.integers(2, 2**64 - 1) | st.sampled_from([0, 2, 3, 2**64 - 1]), max_size=400),
        max_size=12,
    )
)
@settings(max_examples=100, deadline=None)
def test_the_compiled_key_set_counts_what_a_python_set_counts(batches: list[list[int]]) -> None:
    if speedups is None:
        pytest.skip("no extension: the key set is a Python set")
    compiled, reference = snapshot._KeySet(), snapshot._KeySet()
    reference._table = None  # the Python set the compiled table replaces
    for batch in batches:  # growing from 8 buckets on, with repeats inside and across batches
        keys = np.array(batch, dtype=np.uint64)
        if len(batch) % 3 == 1:  # one at a time, as SnapshotBuilder.add adds
            assert [compiled.add_one(k) for k in batch] == [reference.add_one(k) for k in batch]
        else:
            assert compiled.add_many(keys) == reference.add_many(keys)
        assert len(compiled) == len(reference)


@given(st.lists(st.integers(0, 2**64 - 1) | st.sampled_from([0, 1, 2**63]), max_size=200))
def test_runs_of_a_sorted_array_are_what_np_unique_gives(values: list[int]) -> None:
    ordered = np.sort(np.array(values, dtype=np.uint64))
    keys, first, counts = snapshot._runs(ordered)
    want = np.unique(ordered, return_index=True, return_counts=True)
    for got, expected in zip((keys, first, counts), want, strict=True):
        assert np.array_equal(got, expected)


def test_a_large_image_is_built_in_its_own_mapping(monkeypatch: pytest.MonkeyPatch) -> None:
    """From _OWN_MAPPING bytes on, the image is a private anonymous mapping (huge pages
    asked for): the same bytes as in a bytearray, matched the same, and closed cleanly."""
    rules = [
        parse_rule(f"host{k}.example/p{k % 7}", "block", f"c{k % 3}", "gen.txt", k + 1)
        for k in range(500)
    ]

    def build() -> bytearray | mmap.mmap:
        builder = SnapshotBuilder()
        for rule in rules:
            builder.add(rule)
        return builder.build({"x": 1}, created=0.0)

    small = build()
    assert isinstance(small, bytearray)
    monkeypatch.setattr(snapshot, "_OWN_MAPPING", 0)
    large = build()
    assert isinstance(large, mmap.mmap) and bytes(large) == bytes(small)
    memory = snapshot.image_memory(3 * 4096 + 5)
    assert len(memory) == 3 * 4096 + 5 and memory[:] == bytes(len(memory))
    urls = ["http://host3.example/p3/x", "http://host3.example/p4", "http://none.test/"]
    other = SnapshotMatcher.from_image(large)  # a second matcher over the same image
    with SnapshotMatcher.from_image(large) as matcher:
        want = [matcher.check(url) for url in urls]
        assert [v.blocked for v in want] == [True, False, False]
        assert want == [SnapshotMatcher.from_image(small).check(url) for url in urls]
    # the image is the caller's: closing one matcher leaves it, and the other matcher, be
    assert not large.closed and bytes(large) == bytes(small)
    assert [other.check(url) for url in urls] == want
    other.close()
    assert SnapshotMatcher.from_image(large).check(urls[0]) == want[0]
