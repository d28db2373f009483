"""One URL at a time in one compiled call (``snapshot_checker``, what ``Filter.check``
calls): the same verdicts as its Python reference (``SnapshotMatcher._verdict_py``), the
same errors, every input left to the reference that it should be, and the object itself
(misuse, a closed matcher, the collector) safe."""

from __future__ import annotations

import gc
import weakref
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.gateway import rulegen
from tests.match.test_snapshot_engine import CATEGORIES, rules_from, url_text
from tests.needs import missing
from urlsieve import Filter
from urlsieve._accel import speedups
from urlsieve.exceptions import InvalidURL
from urlsieve.match import Verdict
from urlsieve.match.snapshot import SnapshotMatcher
from urlsieve.match.snapshot import matcher as snapshot_module
from urlsieve.rules.model import ALLOW, BLOCK, NONE, parse_rule
from urlsieve.url import parse_url


def _compiled() -> Any:
    fn = getattr(speedups, "snapshot_checker", None)
    if fn is None:
        missing("urlsieve._speedups lacks snapshot_checker: a stale build (urlsieve doctor)")
    return fn


def _outcome(check: Any, url: Any) -> tuple[str, object, str] | tuple[str, str]:
    """What a check gave, before any rule is read: (action, rule id, canonical), or the
    error's type and text."""
    try:
        verdict = check(url)
    except (InvalidURL, TypeError, ValueError) as exc:
        return (type(exc).__name__, str(exc))
    assert type(verdict) is Verdict
    return (verdict.action, verdict._rule, verdict.canonical)


class _Str(str):
    """A str subclass: matched as its text, its canonical form a plain str."""


@settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    patterns=st.lists(st.sampled_from(rulegen.random_rules(300, 4)), min_size=1, max_size=40),
    urls=st.lists(
        st.one_of(url_text, st.sampled_from(["http://x.example/", "é.example/a", "a b"])),
        max_size=30,
    ),
    seed=st.integers(0, 1000),
    chosen=st.one_of(st.none(), st.lists(st.sampled_from([*CATEGORIES, "other"]), max_size=3)),
)
def test_the_compiled_checker_equals_its_reference(
    patterns: list[str], urls: list[str], seed: int, chosen: list[str] | None
) -> None:
    """Per URL (a str, a str subclass, a parsed URL): the same rule id, action and
    canonical form, or the same error; the same rules once read; and the batch's verdicts."""
    _compiled()
    matcher = SnapshotMatcher.from_rules(rules_from(patterns, seed))
    check = matcher.checker(chosen)
    assert type(check).__name__ == "SnapshotChecker"
    mask = matcher.category_mask(chosen)
    for url in urls:
        want = _outcome(lambda u: matcher._verdict_py(mask, u), url)
        assert _outcome(check, url) == want
        assert _outcome(check, _Str(url)) == want
        assert _outcome(lambda u: matcher.check(u, chosen), url) == want
        if want[0] in (NONE, ALLOW, BLOCK):
            verdict = check(url)
            assert type(verdict.canonical) is str and type(check(_Str(url)).canonical) is str
            assert verdict == matcher._verdict_py(mask, url)  # the rules, read
            assert verdict == check(parse_url(url)) == matcher.check_many([url], chosen)[0]


def test_a_filter_checks_one_url_through_its_checker(monkeypatch: pytest.MonkeyPatch) -> None:
    """Filter.check of a str is one call of the checker of its categories: the Python probes
    do not run for a URL on the fast path; a URL off it (and a parsed URL) goes to them."""
    _compiled()
    rules = [
        parse_rule("evil.com/a", BLOCK, "c0", "l", 1),
        parse_rule("good.org", ALLOW, "c1", "l", 2),
        parse_rule("bücher.de", BLOCK, "c1", "l", 3),
    ]
    flt = Filter(SnapshotMatcher.from_rules(rules))
    matcher = flt.matcher
    assert isinstance(matcher, SnapshotMatcher)
    urls = ["http://evil.com/a/b", "HTTP://EVIL.com/a/./b#x", "good.org", "http://none.test/"]
    want = [matcher._verdict_py(None, url) for url in urls]
    python_probes = matcher._best

    def no_probes(*args: Any) -> int:
        raise AssertionError("the Python probes ran")

    monkeypatch.setattr(matcher, "_best", no_probes)
    got = [flt.check(url) for url in urls]
    assert got == want and [v.action for v in want] == [BLOCK, BLOCK, ALLOW, NONE]
    assert not any(gc.is_tracked(v) for v in got)  # left to reference counts, as the batch's
    with pytest.raises(AssertionError, match="Python probes"):
        flt.check("http://bücher.de/")  # not ASCII: the reference's
    monkeypatch.setattr(matcher, "_best", python_probes)
    assert flt.check("http://bücher.de/").action == BLOCK
    assert flt.check("http://bücher.de/", ["c0"]).action == NONE
    assert flt.select(["c0"]).check("good.org").action == NONE
    assert flt.select(["c1"]).check("good.org").action == ALLOW
    with pytest.raises(InvalidURL):
        flt.check("javascript:alert(1)")


def test_misuse_is_refused() -> None:
    checker = _compiled()
    matcher = SnapshotMatcher.from_rules([parse_rule("evil.com", BLOCK, "c", "l", 1)])
    view, layout = matcher._view, matcher._layout

    def make(**changes: Any) -> Any:
        args: dict[str, Any] = {
            "image": view,
            "layout": layout,
            "mask": None,
            "verdict_type": Verdict,
            "none": NONE,
            "allow": ALLOW,
            "block": BLOCK,
            "rules": matcher,
            "fallback": lambda url: ("fallback", url),
        }
        args.update(changes)
        return checker(*args.values())

    good = make()
    assert good("http://evil.com/").action == BLOCK
    assert good(b"http://evil.com/") == ("fallback", b"http://evil.com/")  # not a str
    assert good("http://é.evil.com/") == ("fallback", "http://é.evil.com/")  # not ASCII
    assert good("a b") == ("fallback", "a b")  # off the fast path
    for bad_call in ((), ("a", "b")):
        with pytest.raises(TypeError, match="one URL"):
            good(*bad_call)
    with pytest.raises(TypeError, match="one URL"):
        good(url="http://evil.com/")
    with pytest.raises(TypeError, match="9 arguments"):
        checker(view, layout)
    with pytest.raises(TypeError, match="mask"):
        make(mask=bytearray(1))  # (a mask must not change under the checker)
    with pytest.raises(TypeError, match="callable"):
        make(fallback=3)
    with pytest.raises(TypeError):
        make(verdict_type=tuple)
    with pytest.raises(ValueError, match="layout"):
        make(layout=(*layout[:-2], 1 << 62, layout[-1]))
    with pytest.raises(TypeError):
        make(layout=layout[:5])
    with pytest.raises(TypeError):
        make(image="not a buffer")
    # a mask shorter than the categories: rules of the categories past it are not enforced
    assert make(mask=b"")("http://evil.com/").action == NONE
    assert make(mask=b"\x01")("http://evil.com/").action == BLOCK


def test_a_closed_matcher_refuses_as_before(tmp_path: Any) -> None:
    """A checker kept past its matcher's close raises (the view is released) and does not
    keep the file's mapping from closing; the rules read before stay readable."""
    _compiled()
    path = tmp_path / "rules.snap"
    source = SnapshotMatcher.from_rules([parse_rule("evil.com", BLOCK, "c", "l", 1)])
    source.save(path)
    flt = Filter.load(path)
    check = flt._one
    verdict = check("http://evil.com/x")
    flt.close()  # releases the views: no export of the checker holds them
    with pytest.raises(ValueError):
        check("http://evil.com/y")
    with pytest.raises(ValueError):
        flt.check("http://evil.com/y")
    assert verdict.rule is not None and verdict.rule.pattern == "evil.com"


def test_a_dropped_filter_frees_its_matcher_at_once() -> None:
    """A checker holds its matcher, the matcher holds no checker: a filter dropped without
    close() frees its engine (and unmaps its file) by reference counts, with no collection;
    a cycle through a checker is still freed by the collector (it takes part)."""
    _compiled()
    flt = Filter(SnapshotMatcher.from_rules([parse_rule("evil.com", BLOCK, "c", "l", 1)]))
    assert flt.check("http://evil.com/").action == BLOCK
    gone = weakref.ref(flt.matcher)
    was = gc.isenabled()
    gc.disable()
    try:
        del flt
        assert gone() is None
    finally:
        if was:
            gc.enable()
    matcher = SnapshotMatcher.from_rules([parse_rule("evil.com", BLOCK, "c", "l", 1)])
    check = matcher.checker(None)
    assert gc.is_tracked(check)
    matcher.kept = check  # type: ignore[attr-defined]  # a cycle
    gone = weakref.ref(matcher)
    del matcher, check
    gc.collect()
    assert gone() is None


def test_without_the_compiled_checker_the_reference_serves(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(snapshot_module, "_checker", None)
    matcher = SnapshotMatcher.from_rules([parse_rule("evil.com", BLOCK, "c", "l", 1)])
    check = matcher.checker()
    assert type(check).__name__ == "partial"
    assert check("http://www.evil.com/").action == BLOCK
    assert Filter(matcher).check("http://good.com/").action == NONE
