"""The compiled engine: its C batch path held equal to the Python reference, categories chosen
per request, and the C entry point's refusal of misuse."""

from __future__ import annotations

import contextlib
import gc
import random
import threading
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.gateway import rulegen
from tests.needs import missing
from urlsieve import Filter, InvalidURL, parse_url
from urlsieve._accel import speedups
from urlsieve.match import HashMatcher, Verdict
from urlsieve.match.snapshot import SnapshotBuilder, SnapshotMatcher
from urlsieve.match.snapshot.format import _LONE_HOST, _ONE_RULE, _SLOT
from urlsieve.rules.model import ALLOW, BLOCK, Rule, RuleSyntaxError, parse_rule


@pytest.fixture
def compiled() -> None:
    """The compiled batch path must be there to be compared (CI builds it: see .ci/run)."""
    if speedups is None or not hasattr(speedups, "snapshot_match"):
        missing("urlsieve._speedups not built, or a stale build: no batch path (urlsieve doctor)")


CATEGORIES = ["c0", "c1", "c2", "c3"]


def rules_from(patterns: list[str], seed: int) -> list[Rule]:
    rnd = random.Random(seed)
    out = []
    for number, pattern in enumerate(patterns, 1):
        action = ALLOW if rnd.random() < 0.25 else BLOCK
        try:
            out.append(parse_rule(pattern, action, rnd.choice(CATEGORIES), "gen.txt", number))
        except RuleSyntaxError:
            continue
    return out


def reference_ids(matcher: SnapshotMatcher, urls: list[str], mask: bytes | None) -> list[int]:
    out = []
    for url in urls:
        try:
            out.append(matcher._best(parse_url(url), None, mask))
        except InvalidURL:
            out.append(-3)
    return out


def assert_batch_equals_reference(matcher: SnapshotMatcher, urls: list[str]) -> int:
    """Every URL the C path answers gets the reference's rule, for every category choice;
    returns how many it answered."""
    answered = 0
    for chosen in (None, ["c0"], ["c1", "c3"], [], CATEGORIES):
        mask = matcher.category_mask(chosen)
        got = matcher.match_ids(urls, mask)
        want = reference_ids(matcher, urls, mask)
        for url, g, w in zip(urls, got, want, strict=True):
            if g != -2:
                answered += 1
                assert g == w, (url, chosen, g, w)
    return answered


@pytest.mark.usefixtures("compiled")
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_compiled_batch_equals_the_reference(seed: int) -> None:
    rules = rules_from(rulegen.random_rules(500, seed), seed)
    matcher = SnapshotMatcher.from_rules(rules)
    urls = rulegen.random_urls(3000, seed + 50)
    # Most generated URLs are canonical or scheme-less canonical: the C path must take them.
    assert assert_batch_equals_reference(matcher, urls) > 5 * 3000 * 0.6


url_text = st.one_of(
    st.builds(lambda r: r, st.sampled_from(rulegen.random_urls(400, 9))),
    st.text(alphabet=st.sampled_from("abcehilmoptwxy.:/?=&%-_019AEX#\\ "), max_size=60),
    st.text(max_size=40),
)


@pytest.mark.usefixtures("compiled")
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    patterns=st.lists(st.sampled_from(rulegen.random_rules(300, 4)), min_size=1, max_size=40),
    urls=st.lists(url_text, max_size=30),
    seed=st.integers(0, 1000),
)
def test_compiled_batch_equals_the_reference_on_generated_sets(
    patterns: list[str], urls: list[str], seed: int
) -> None:
    matcher = SnapshotMatcher.from_rules(rules_from(patterns, seed))
    assert_batch_equals_reference(matcher, urls)


@pytest.mark.parametrize("seed", [5, 6])
def test_categories_chosen_per_request_equal_a_filter_of_those_categories(seed: int) -> None:
    rules = rules_from(rulegen.random_rules(600, seed), seed)
    everything = Filter(rules)
    urls = rulegen.random_urls(3000, seed + 70)
    decided = 0
    for chosen in (["c0"], ["c1", "c2"], CATEGORIES, []):
        only = Filter(HashMatcher([r for r in rules if r.category in chosen]))
        selected = everything.select(chosen)
        got_batch = everything.match_many(urls, chosen)
        for url, in_batch in zip(urls, got_batch, strict=True):
            try:
                want = only.check(url)
            except InvalidURL:
                assert isinstance(in_batch, InvalidURL)
                continue
            got = everything.check(url, chosen)
            assert (got.action, got.canonical) == (want.action, want.canonical), (url, chosen)
            assert got.rule == want.rule or (
                got.rule and want.rule and got.rule.key == want.rule.key
            )
            assert selected.check(url) == got
            assert in_batch == got.rule
            decided += got.rule is not None
    assert decided > 500


def test_a_category_choice_by_alias_and_an_unknown_name() -> None:
    builder = SnapshotBuilder()
    builder.add(parse_rule("evil.com", BLOCK, "adult"))
    builder.add(parse_rule("ads.com", BLOCK, "ads"))
    flt = Filter(SnapshotMatcher.from_image(builder.build({"aliases": {"porn": "adult"}})))
    assert flt.check("http://evil.com/", ["porn"]).action == "block"
    assert flt.check("http://ads.com/", ["porn"]).action == "none"
    assert flt.check("http://evil.com/", ["nosuch"]).action == "none"
    assert flt.check("http://evil.com/").action == "block"


def test_one_rule_per_key_and_category() -> None:
    rules = [
        parse_rule("evil.com", BLOCK, "a", "a.txt", 1),
        parse_rule("evil.com", BLOCK, "a", "a.txt", 2),  # a duplicate: the first stays
        parse_rule("evil.com", ALLOW, "b", "b.txt", 1),
        parse_rule("evil.com", BLOCK, "b", "b.txt", 2),  # allow wins within b
    ]
    flt = Filter(rules)
    assert sorted((r.category, r.action, r.line) for r in flt.rules) == [
        ("a", "block", 1),
        ("b", "allow", 1),
    ]
    assert flt.check("http://evil.com/").action == "allow"  # every category: allow wins
    assert flt.check("http://evil.com/", ["a"]).rule.line == 1  # type: ignore[union-attr]
    assert flt.check("http://evil.com/", ["b"]).action == "allow"


def test_the_reference_engines_refuse_a_category_choice() -> None:
    flt = Filter(HashMatcher([parse_rule("evil.com")]))
    assert flt.check("http://evil.com/").blocked
    with pytest.raises(ValueError, match="decides on every category"):
        flt.check("http://evil.com/", ["x"])


@pytest.mark.usefixtures("compiled")
def test_the_compiled_entry_point_refuses_misuse_with_typed_errors() -> None:
    matcher = SnapshotMatcher.from_rules([parse_rule("evil.com")])
    fn = speedups.snapshot_match  # type: ignore[union-attr]
    view, layout = matcher._view, matcher._layout
    out = np.empty(1, dtype=np.int64)
    with pytest.raises(TypeError):
        fn(view, layout, ["http://evil.com/"], None)
    with pytest.raises(TypeError):
        fn(view, layout[:-1], ["http://evil.com/"], None, out)
    with pytest.raises(TypeError):
        fn(view, layout, ("http://evil.com/",), None, out)
    with pytest.raises(TypeError):
        fn(view, layout, [b"http://evil.com/"], None, out)
    with pytest.raises(ValueError, match="one int64 per URL"):
        fn(view, layout, ["a", "b"], None, out)  # out too short
    for at in range(len(layout) - 1):  # every offset or size pushed out of the image
        broken = list(layout)
        broken[at] = 1 << 40
        with pytest.raises(ValueError, match="layout does not fit"):
            fn(view, tuple(broken), ["http://evil.com/"], None, out)
    with pytest.raises(OverflowError):
        fn(view, (-1, *layout[1:]), ["http://evil.com/"], None, out)
    fn(view, layout, ["http://evil.com/"], b"", out)  # an empty mask enforces nothing
    assert out[0] == -1
    fn(view, layout, ["http://evil.com/"], None, out)
    assert out[0] == 0


@pytest.mark.usefixtures("compiled")
@settings(max_examples=200, deadline=None)
@given(st.binary(min_size=0, max_size=2048), st.lists(url_text, max_size=24))
def test_a_damaged_image_gives_answers_never_a_crash(noise: bytes, urls: list[str]) -> None:
    """Bytes of the body overwritten at random: the C path reads only inside the image,
    the memory it asks for ahead of a URL (batches longer than that ring) included."""
    matcher = SnapshotMatcher.from_rules(rules_from(rulegen.random_rules(80, 3), 3))
    image = bytearray(matcher.image)
    start = 192 + (len(noise) * 7919) % (len(image) - 192)
    image[start : start + len(noise)] = noise[: len(image) - start]
    out = np.empty(len(urls), dtype=np.int64)
    speedups.snapshot_match(bytes(image), matcher._layout, urls, None, out)  # type: ignore[union-attr]
    assert all(-2 <= int(i) < len(matcher) for i in out)


# Path and query pieces an evasion splices in: escapes of every kind (nested, lower-case,
# of "/", "?", "%", "\\", of bytes canonicalisation escapes, broken ones), dot segments,
# "/" runs.
_PATH_PIECES = [
    *("/", "//", "/./", "/../", "/..", "/.", ".", "..", "/.hidden", "/...", "a", "~", "-"),
    *("%2e", "%2E", "%2e%2e", "%252e", "%25252E", "%2F", "%2f", "%3F", "%3f", "%23", "%5C"),
    *("%25", "%", "%4", "%zz", "%41", "%61", "%20", "%7e", "%7F", "%C3%A9", "%00", "%ff"),
    *("%%32%65", "%2%35", "?", "&", "="),
    *("#", "#frag", "#/../x", "#?q", "\\", "\\..\\", "\\.", "/\\", "%5c"),
]


def _evasion(draw: st.DrawFn) -> str:
    """A URL of the generated vocabulary in the spellings an evasion adds: case, userinfo,
    ports (valid and not), dots around and inside the host, no scheme; escapes, dot
    segments and "/" runs spliced into the path and query."""
    url = draw(st.sampled_from(rulegen.random_urls(300, 12)))
    scheme, _, rest = url.partition("://")
    if not rest:
        scheme, rest = "http", url
    host, slash, tail = rest.partition("/")
    if slash:  # a backslash ends the authority as "/" does
        slash = draw(st.sampled_from(["/", "/", "\\"]))
    if slash and draw(st.booleans()):
        pieces = draw(st.lists(st.sampled_from(_PATH_PIECES), max_size=6))
        at = draw(st.integers(0, len(tail)))
        tail = tail[:at] + "".join(pieces) + tail[at:]
    host = draw(st.sampled_from(["", ".", ".."])) + host + draw(st.sampled_from(["", ".", ".."]))
    host = host.replace(".", draw(st.sampled_from([".", ".", ".."])), 1)
    host = "".join(c.upper() if draw(st.booleans()) else c for c in host)
    port = draw(
        st.sampled_from(["", "", ":80", ":0080", ":", ":65535", ":65536", ":8a", ":000000080"])
    )
    user = draw(st.sampled_from(["", "", "u@", "u:p@", "a@b@", "@"]))
    scheme = "".join(c.upper() if draw(st.booleans()) else c for c in scheme)
    head = draw(st.sampled_from([f"{scheme}://", f"{scheme}://", "", "//", f"{scheme}:///"]))
    return f"{head}{user}{host}{port}{slash}{tail}"


@pytest.mark.usefixtures("compiled")
@settings(max_examples=400, deadline=None)
@given(urls=st.lists(st.composite(_evasion)(), min_size=1, max_size=20))
def test_evasion_spellings_take_the_compiled_path_with_the_reference_verdict(
    urls: list[str],
) -> None:
    matcher = SnapshotMatcher.from_rules(rules_from(rulegen.random_rules(300, 7), 7))
    assert_batch_equals_reference(matcher, urls)
    canonical: list[str | None] = [None] * len(urls)
    matcher.match_ids(urls, None, canonical)
    for url, form in zip(urls, canonical, strict=True):
        if form is not None:
            assert form == parse_url(url).canonical, url


@pytest.mark.usefixtures("compiled")
def test_fragments_and_backslashes_take_the_compiled_path() -> None:
    """The rewrite drops a fragment and reads "\\" as "/" before the query, as the reader
    does; a backslash in the query, or after the scheme's "//", is the reference's."""
    matcher = SnapshotMatcher.from_rules(rules_from(["evil.com/a/b"], 1))
    taken = [
        "http://Evil.com/a/b#x",
        "evil.com\\a\\b",
        "http://evil.com/a\\.\\b#/../c",
        "evil.com#",
    ]
    left = ["http://EVIL.com/a?b\\c", "http://\\evil.com/a", "http://evil.com/a/b #x", "#x"]
    forms: list[str | None] = [None] * (len(taken) + len(left))
    ids = matcher.match_ids(taken + left, None, forms)
    assert ids[: len(taken)] == [0, 0, 0, -1] and set(ids[len(taken) :]) == {-2}
    assert forms[:3] == ["http://evil.com/a/b"] * 3 and forms[3] == "http://evil.com/"


@pytest.mark.usefixtures("compiled")
def test_one_url_is_checked_on_the_compiled_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """check() of a str is one compiled call (the checker: the service and Scrapy check one
    at a time); a URL object, and what that call leaves, take the Python probes."""
    matcher = SnapshotMatcher.from_rules(rules_from(["evil.com/a", "good.org", "bücher.de"], 1))
    urls = ["http://evil.com/a/b", "HTTP://EVIL.com/a/./b#x", "good.org", "http://none.test/"]
    want = [matcher.check(parse_url(url)) for url in urls]
    assert [v.rule is not None for v in want] == [True, True, True, False]
    python_probes = matcher._best

    def no_probes(*args: Any) -> int:
        raise AssertionError("the Python probes ran")

    monkeypatch.setattr(matcher, "_best", no_probes)
    assert [matcher.check(url) for url in urls] == want
    with pytest.raises(InvalidURL):
        matcher.check("javascript:alert(1)")
    monkeypatch.setattr(matcher, "_best", python_probes)
    assert matcher.check("http://Bücher.de/x").rule is not None  # IDN: off the fast path
    out = np.empty(3, dtype=np.int64)
    assert (
        speedups.snapshot_match(  # how many it left for Python, which skips numpy's search
            matcher._view, matcher._layout, ["http://bücher.de/", "evil.com/a", "a b"], None, out
        )
        == 2
    )
    assert out.tolist()[0] == out.tolist()[2] == -2


@pytest.mark.usefixtures("compiled")
def test_a_call_made_while_the_scratch_is_out_gets_its_own() -> None:
    """The module keeps one scratch block between calls. A call made while it is out, from
    a destructor the call runs or from another thread while canonical_hashes has let go of
    the GIL, must get its own block: neither call's answers change."""
    matcher = SnapshotMatcher.from_rules(rules_from(["evil.com/a", "good.org/p/q"], 1))
    # each needs the rewrite, which works in the scratch: case, dot segments, "//", fragments;
    # one rewritten longer than a ring slot keeps (matched from the scratch again)
    urls = ["HTTP://EVIL.COM/a/./b#x", "http://GOOD.org//p/q/../q/r?Z=1", "http://x.test/A"] * 7
    urls[9] = "HTTP://EVIL.COM/a/./" + "X" * 1500
    want = reference_ids(matcher, urls, None)
    assert want[9] == want[0] >= 0
    inner: list[tuple[list[int], str | None]] = []

    def match(batch: list[str], forms: list[object] | None = None) -> list[int]:
        out = np.empty(len(batch), dtype=np.int64)
        speedups.snapshot_match(matcher._view, matcher._layout, batch, None, out, forms)  # type: ignore[union-attr]
        return list(out.tolist())

    class Old:
        def __del__(self) -> None:
            rewritten = speedups.canonical_rewrite("HTTP://Inner.TEST/./a/../b#f", True, False)  # type: ignore[union-attr]
            inner.append((match(urls), rewritten))

    forms: list[object] = [Old() for _ in urls]
    assert match(urls, forms) == want
    assert forms == [parse_url(url).canonical for url in urls]
    assert len(inner) == len(urls)
    assert all(ids == want and form == "http://inner.test/b" for ids, form in inner)

    # threads: hashes computed without the GIL against lookups and rewrites meanwhile
    many = [f"HTTP://Host{k % 97}.EXAMPLE/a/./b/../c{k}//d?Q={k}#f" for k in range(4000)]
    hashes = np.empty(2 * len(many), dtype=np.uint64)
    speedups.canonical_hashes(many, True, 128, hashes, False)  # type: ignore[union-attr]
    expected = hashes.tolist()
    stop = threading.Event()
    wrong: list[str] = []

    def lookups() -> None:
        while not stop.is_set():
            if match(urls) != want:
                wrong.append("snapshot_match")
            if speedups.canonical_rewrite(many[5], True, False) != parse_url(many[5]).canonical:  # type: ignore[union-attr]
                wrong.append("canonical_rewrite")

    other = threading.Thread(target=lookups)
    other.start()
    try:
        for _ in range(30):
            got = np.empty(2 * len(many), dtype=np.uint64)
            speedups.canonical_hashes(many, True, 128, got, False)  # type: ignore[union-attr]
            if got.tolist() != expected:
                wrong.append("canonical_hashes")
    finally:
        stop.set()
        other.join()
    assert not wrong


# -- a mask per URL (the policy engine: each client's pass list) ----------------------------


@pytest.mark.usefixtures("compiled")
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    patterns=st.lists(st.sampled_from(rulegen.random_rules(300, 4)), min_size=1, max_size=40),
    urls=st.lists(url_text, max_size=30),
    seed=st.integers(0, 1000),
    data=st.data(),
)
def test_a_mask_per_url_equals_the_reference_with_that_mask(
    patterns: list[str], urls: list[str], seed: int, data: st.DataObject
) -> None:
    matcher = SnapshotMatcher.from_rules(rules_from(patterns, seed))
    choices = [[], ["c0"], ["c1", "c3"], CATEGORIES, ["c2"]]
    masks = [matcher.category_mask(c) or b"" for c in choices]
    stride = len(matcher.categories)
    assert all(len(m) == stride for m in masks)
    rows = [data.draw(st.integers(0, len(masks) - 1)) for _ in urls]
    forms: list[str | None] = [None] * len(urls)
    got = matcher.ids_by_rows(urls, b"".join(masks), rows, forms)
    for url, row, g, form in zip(urls, rows, got, forms, strict=True):
        try:
            parts = parse_url(url)
        except InvalidURL:
            assert isinstance(g, InvalidURL)
            continue
        assert g == matcher._best(parts, None, masks[row]), (url, choices[row])
        assert form == parts.canonical


@pytest.mark.usefixtures("compiled")
def test_mask_rows_are_checked_by_the_compiled_entry_point() -> None:
    matcher = SnapshotMatcher.from_rules(
        [parse_rule("evil.com", BLOCK, "a"), parse_rule("x.org", BLOCK, "b")]
    )
    fn = speedups.snapshot_match  # type: ignore[union-attr]
    view, layout = matcher._view, matcher._layout
    out = np.empty(2, dtype=np.int64)
    urls = ["http://evil.com/", "http://x.org/"]
    masks = b"\x01\x00" + b"\x00\x01"
    fn(view, layout, urls, masks, out, None, np.array([0, 0], dtype=np.int64), 2)
    assert out.tolist() == [0, -1]
    fn(view, layout, urls, masks, out, None, np.array([2, 2], dtype=np.int64), 2)
    assert out.tolist() == [-1, 1]
    for bad_rows in ([0, 3], [-1, 0], [0]):
        with pytest.raises(ValueError, match="rows"):
            fn(view, layout, urls, masks, out, None, np.array(bad_rows, dtype=np.int64), 2)
    with pytest.raises(ValueError, match="stride"):
        fn(view, layout, urls, None, out, None, np.array([0, 0], dtype=np.int64), 2)
    with pytest.raises(ValueError, match="stride"):
        fn(view, layout, urls, masks, out, None, np.array([0, 0], dtype=np.int64), -1)
    with pytest.raises(TypeError):
        fn(view, layout, urls, masks, out, None, np.array([0, 0], dtype=np.int64))


# -- check_many in C (snapshot_verdicts; reference: check_many's Python body) --------------


def _python_check_many(
    monkeypatch: pytest.MonkeyPatch, matcher: SnapshotMatcher, urls: list[Any]
) -> list[Verdict] | InvalidURL:
    import urlsieve.match.snapshot.matcher as snapshot_module

    with monkeypatch.context() as patched:
        patched.setattr(snapshot_module, "_verdicts", None)
        try:
            return matcher.check_many(urls)
        except (InvalidURL, TypeError) as exc:
            return exc  # type: ignore[return-value]


def _compiled_check() -> Any:
    fn = getattr(speedups, "snapshot_verdicts", None)
    if fn is None:
        missing("urlsieve._speedups lacks snapshot_verdicts: a stale build (urlsieve doctor)")
    return fn


@pytest.mark.usefixtures("compiled")
@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    patterns=st.lists(st.sampled_from(rulegen.random_rules(300, 4)), min_size=1, max_size=40),
    urls=st.lists(
        st.one_of(url_text, st.sampled_from(["http://x.example/", "é.example/a"])), max_size=30
    ),
    seed=st.integers(0, 1000),
    cached=st.booleans(),
    as_urls=st.booleans(),
)
def test_check_many_in_c_equals_the_python_loop(
    monkeypatch: pytest.MonkeyPatch,
    *,
    patterns: list[str],
    urls: list[str],
    seed: int,
    cached: bool,
    as_urls: bool,
) -> None:
    """The same verdicts (or the same first InvalidURL), whether the rules are in the cache
    or built for the missing positions, and with parsed URL objects among the strings (left
    to Python)."""
    _compiled_check()
    matcher = SnapshotMatcher.from_rules(rules_from(patterns, seed))
    batch: list[Any] = list(urls)
    if as_urls:  # every other valid URL parsed beforehand: not a str, so left to Python
        for at in range(0, len(batch), 2):
            with contextlib.suppress(InvalidURL):
                batch[at] = parse_url(batch[at])
    want = _python_check_many(monkeypatch, matcher, batch)
    if not cached:
        matcher._rule_cache.clear()
    try:
        got: list[Verdict] | InvalidURL = matcher.check_many(batch)
    except InvalidURL as exc:
        got = exc
    if isinstance(want, InvalidURL):
        assert isinstance(got, InvalidURL) and str(got) == str(want)
        return
    assert got == want
    assert all(type(v) is Verdict for v in got)  # type: ignore[union-attr]


def test_a_collection_the_call_could_start_changes_nothing_it_reads() -> None:
    """snapshot_verdicts reads its list as it is (no copy): no collection, and so no gc
    callback, finalizer or thread switch, may run between reading its size and the end
    of the call. A callback that grows or empties the URL list at the first collection
    (with a threshold that makes the call's first allocation start one) leaves it whole."""
    _compiled_check()
    matcher = SnapshotMatcher.from_rules([parse_rule("evil.com", BLOCK, "c")])
    matcher.check_many(["http://evil.com/"])
    for change in ("grow", "empty", "cache"):
        urls = ["http://evil.com/", "x.org", "http://evil.com/a", "y.org"]
        armed = [True]

        def callback(
            phase: str,
            info: dict[str, int],
            urls: list[str] = urls,
            change: str = change,
            armed: list[bool] = armed,
        ) -> None:
            if phase == "start" and armed[0]:
                armed[0] = False
                if change == "grow":
                    urls.extend(["x.org"] * 10_000)
                elif change == "empty":
                    urls.clear()
                else:
                    matcher._rule_cache.table[1].clear()

        crowd = [[] for _ in range(500)]  # (no list from the free list: a new allocation)
        threshold = gc.get_threshold()
        gc.callbacks.append(callback)
        try:
            gc.set_threshold(1)
            out = matcher.check_many(urls)
        finally:
            gc.set_threshold(*threshold)
            gc.callbacks.remove(callback)
        del crowd
        assert all(type(v) is Verdict for v in out)
        assert [v.blocked for v in out][:4] == [True, False, True, False]


def test_edge_cases_answer_as_the_python_body(monkeypatch: pytest.MonkeyPatch) -> None:
    """A str subclass's verdict holds a plain str; an invalid URL before an item that is
    no URL at all raises what the Python body raises (every item parsed first)."""
    _compiled_check()

    class Text(str):
        __slots__ = ()

    matcher = SnapshotMatcher.from_rules([parse_rule("evil.com", BLOCK, "c")])
    for batch in (
        [Text("http://evil.com/"), parse_url("x.org")],
        [Text("http://evil.com/")],
        ["http://", None],
        ["http://", 5, "x.org"],
        [None, "http://"],
    ):
        want = _python_check_many(monkeypatch, matcher, batch)
        try:
            got: Any = matcher.check_many(batch)
        except (InvalidURL, TypeError) as exc:
            got = exc
        if isinstance(want, Exception) or isinstance(got, Exception):
            assert type(got) is type(want) and str(got) == str(want)
            continue
        assert got == want
        assert [type(v.canonical) for v in got] == [str] * len(batch)


# -- Rule objects read from the image in C (snapshot_rules; reference: _rule_py) ----------


_ODD_RULES = [
    "evil.com",
    "=exact.example/",
    "|ads.example/banner|",
    "ads.example/banner?id=1",
    "10.0.0.1/admin/",
    "bücher.example/Pfad",
    "*.wild.example",
    "x.example/a%2fb/",
    "Upper.Example/CaSe/",
]


@pytest.mark.usefixtures("compiled")
@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    patterns=st.lists(
        st.one_of(st.sampled_from(rulegen.random_rules(300, 5)), st.sampled_from(_ODD_RULES)),
        min_size=1,
        max_size=40,
    ),
    seed=st.integers(0, 1000),
)
def test_rules_read_in_c_equal_the_python_reader(patterns: list[str], seed: int) -> None:
    if not hasattr(speedups, "snapshot_rules"):
        missing("urlsieve._speedups lacks snapshot_rules: a stale build (urlsieve doctor)")
    rules = rules_from(patterns, seed)
    rules.append(parse_rule("nosource.example/x", ALLOW, "c1"))  # no source, no line
    matcher = SnapshotMatcher.from_rules(rules)
    ids = list(range(len(matcher)))
    names = (tuple(matcher._categories), tuple(matcher._sources))
    built = speedups.snapshot_rules(  # type: ignore[union-attr]
        matcher._view, matcher._layout, [*ids, -1, len(ids)], *names, Rule, ALLOW, BLOCK
    )
    assert built[-2:] == [None, None]  # ids outside the image: the reference raises
    for rule_id, rule in zip(ids, built, strict=False):
        want = matcher._rule_py(rule_id)
        if rule is None:  # only rules with non-ASCII strings are left to Python
            assert not "".join(str(f) for f in want).isascii()
            continue
        assert type(rule) is Rule and tuple(rule) == tuple(want)
        assert [type(f) for f in rule] == [type(f) for f in want]
        # untracked (no field can hold a cycle): its verdicts are untracked without a
        # look at its fields, and such a verdict can still be let go by refcount alone
        assert not gc.is_tracked(rule)
    assert [matcher.rule(i) for i in ids] == [matcher._rule_py(i) for i in ids]


# -- The format's compact parts: extras, lone rules in their slot, the size a rule takes ---


def test_lengths_that_do_not_fit_a_record_are_kept_in_an_extra() -> None:
    long_path = "a" * 65_000 + "é" * 200  # 66,200 bytes once escaped: above a u16
    rules = [
        parse_rule(f"example.com/{long_path}/x", BLOCK, "c0", "l.txt", 1),
        parse_rule("Example.com/Q?x=1", BLOCK, "c1", "l.txt", 2),  # a query; pattern as written
        parse_rule("plain.example/a", ALLOW, "c2", "l.txt", 3),  # these two fit their records
        parse_rule("plain.example", BLOCK, "c0", "l.txt", 4),
    ]
    matcher = SnapshotMatcher.from_rules(rules)
    assert matcher._header.extras == 2
    assert [matcher._rule_py(i) for i in range(4)] == rules
    urls = [
        f"http://example.com/{long_path}/x/y",
        "http://example.com/q?x=1",
        "http://plain.example/a/b",
        "http://plain.example/",
    ]
    assert [matcher._best(parse_url(u), None) for u in urls] == [0, 1, 2, 3]
    assert [v.rule for v in matcher.check_many(urls)] == rules
    if hasattr(speedups, "snapshot_rules"):
        names = (tuple(matcher._categories), tuple(matcher._sources))
        built = speedups.snapshot_rules(  # type: ignore[union-attr]
            matcher._view, matcher._layout, [0, 1, 2, 3], *names, Rule, ALLOW, BLOCK
        )
        assert built[1:] == rules[1:] and built[0] is None  # not ASCII: left to Python


def test_a_lone_rule_is_kept_in_its_slot_and_a_shared_expression_is_posted() -> None:
    rules = [
        parse_rule("shared.example", BLOCK, c, "l.txt", n) for n, c in enumerate(CATEGORIES, 1)
    ]
    rules.append(parse_rule("lone.example", ALLOW, "c0", "l.txt", 9))
    matcher = SnapshotMatcher.from_rules(rules)
    lone = matcher._probe(matcher._exprs, matcher._expr_slots, "lone.example/")
    assert lone == _ONE_RULE | 4
    shared = matcher._probe(matcher._exprs, matcher._expr_slots, "shared.example/")
    assert shared and not shared & _ONE_RULE
    assert matcher._postings[0] == 0  # no group starts at 0 (a slot's 0 would be ambiguous)
    assert list(matcher._postings[shared : shared + 5]) == [4, 0, 1, 2, 3]
    urls = ["http://shared.example/x", "http://lone.example/"]
    for chosen in CATEGORIES:
        verdicts = matcher.check_many(urls, [chosen])
        assert verdicts[0].rule == rules[CATEGORIES.index(chosen)]
        assert verdicts[1].rule == (rules[4] if chosen == "c0" else None)
        assert [
            matcher._best(parse_url(u), None, matcher.category_mask([chosen])) for u in urls
        ] == [
            CATEGORIES.index(chosen),
            4 if chosen == "c0" else -1,
        ]


@pytest.mark.usefixtures("compiled")
def test_a_host_with_one_rule_keeps_its_id_in_its_host_slot() -> None:
    """Format 6: the host slot of a host with one rule (under one expression or two) holds
    that rule's id, read without probing an expression; a host with more keeps its depth
    mask. Both give the reference's verdicts, at every depth, level and rule shape."""
    patterns = [
        "lone.example",  # one expression
        "path.example/a/b",  # one rule under two expressions ("/a/b" and "/a/b/")
        "two.example/a",
        "two.example/c/d",
        "=exact.example",
        "anchor.example/x/y|",
        "query.example/p?q=1",
        "sub.parent.example/z/",
        "parent.example",
        "10.1.2.3/adm",
    ]
    rules = rules_from(patterns, 4)
    matcher = SnapshotMatcher.from_rules(rules)
    lone = {
        "lone.example": 0,
        "path.example": 1,
        "exact.example": 4,
        "anchor.example": 5,
        "query.example": 6,
        "sub.parent.example": 7,
        "parent.example": 8,
        "10.1.2.3": 9,
    }
    for host, rule_id in lone.items():
        assert matcher._probe(matcher._hosts, matcher._host_slots, host) == _LONE_HOST | rule_id
    two = matcher._probe(matcher._hosts, matcher._host_slots, "two.example")
    assert two and not two & _LONE_HOST
    paths = [
        "",
        "/",
        "/a",
        "/a/",
        "/a/b",
        "/a/b/",
        "/a/b/c",
        "/a/bc",
        "/A/B/x",
        "/c/d/e",
        "/x/y",
        "/x/y/",
        "/x/y?z",
        "/p?q=1",
        "/p?q=2",
        "/z",
        "/z/",
        "/z/1",
        "/adm/1",
    ]
    urls = [
        f"http://{prefix}{host}{path}"
        for host in [*lone, "two.example", "other.example"]
        for prefix in ("", "www.", "a.b.")
        for path in paths
    ]
    assert assert_batch_equals_reference(matcher, urls) > 0.9 * 5 * len(urls)  # most compiled
    hits = {u for u, i in zip(urls, matcher.match_ids(urls, None), strict=True) if i >= 0}
    assert "http://path.example/a/b/c" in hits and "http://path.example/a/bc" not in hits
    assert "http://www.exact.example/" not in hits and "http://exact.example/a" in hits
    assert "http://anchor.example/x/y" in hits and "http://anchor.example/x/y/" not in hits
    assert "http://a.b.lone.example/a/b/c" in hits


@pytest.mark.usefixtures("compiled")
def test_a_lone_rule_id_outside_the_image_finds_nothing() -> None:
    """A damaged host slot naming a rule the image does not have: no rule, from the
    compiled lookup (no read outside the image) and from the reference alike."""
    matcher = SnapshotMatcher.from_rules(rules_from(["lone.example"], 1))
    image = bytearray(matcher.image)
    hosts_at = matcher._layout[0]
    for k in range(matcher._host_slots):
        at = hosts_at + k * _SLOT.itemsize
        if int.from_bytes(image[at : at + 8], "little"):
            image[at + 8 : at + 12] = (_LONE_HOST | 12345).to_bytes(4, "little")
    damaged = SnapshotMatcher.from_image(image)
    urls = ["http://lone.example/", "http://lone.example/a/b"]
    assert list(damaged.match_ids(urls, None)) == [-1, -1]
    assert [damaged._best(parse_url(u), None) for u in urls] == [-1, -1]


def test_the_tables_and_records_take_under_67_bytes_a_rule() -> None:
    """The mix of the compile benchmark (half host rules, a quarter host/a, a quarter
    host/a/b): 12-byte slots 60 % full (20 bytes a host, 30 for a path rule's two
    expressions), 16-byte records, no postings for lone rules. Format 4 took 105."""
    rnd = random.Random(11)

    def word() -> str:
        return "".join(rnd.choice("abcdefghijklmnopqrstuvwxyz0123456789") for _ in range(6))

    patterns = []
    for n in range(20_000):
        host = f"{word()}.{word()}.com"
        shape = n % 4
        patterns.append([host, host, f"{host}/{word()}", f"{host}/{word()}/b"][shape])
    rules = [parse_rule(p, BLOCK, "c0", "l.txt", n) for n, p in enumerate(patterns, 1)]
    matcher = SnapshotMatcher.from_rules(rules)
    header = matcher._header
    assert header.extras == 0 and header.postings == 1
    assert (header.file_size - header.strings_len) / len(rules) < 67


def test_more_list_files_than_a_record_can_name_is_a_clear_error() -> None:
    builder = SnapshotBuilder()
    base = parse_rule("h.example", BLOCK, "c0", "list.txt", 1)
    for n in range(1 << 16):
        builder.add(base._replace(host=f"h{n}.example", pattern=f"h{n}.example", source=f"{n}"))
    with pytest.raises(ValueError, match="more than 65,536 list files"):
        builder.add(base._replace(source="one-more.txt"))
