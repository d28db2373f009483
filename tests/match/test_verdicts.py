"""Verdicts that hold a rule's id, not the rule (issue 34): ``check_many`` builds no rule
object until a caller reads one, the compiled batch (``snapshot_verdicts``) makes the
verdicts its Python reference makes, and a verdict still reads as the named tuple
``(action, rule, canonical)`` it was."""

from __future__ import annotations

import contextlib
import gc
import pickle
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.gateway import rulegen
from tests.match.test_snapshot_engine import rules_from, url_text
from tests.needs import missing
from urlsieve._accel import speedups
from urlsieve.exceptions import InvalidURL, SnapshotError
from urlsieve.match import Verdict
from urlsieve.match.snapshot import SnapshotMatcher
from urlsieve.match.snapshot import matcher as snapshot_module
from urlsieve.rules.model import ALLOW, BLOCK, Rule, parse_rule
from urlsieve.url import parse_url


def _compiled() -> Any:
    fn = getattr(speedups, "snapshot_verdicts", None)
    if fn is None:
        missing("urlsieve._speedups lacks snapshot_verdicts: a stale build (urlsieve doctor)")
    return fn


def _reference(monkeypatch: pytest.MonkeyPatch, matcher: SnapshotMatcher, urls: list[Any]) -> Any:
    with monkeypatch.context() as patched:
        patched.setattr(snapshot_module, "_verdicts", None)
        try:
            return matcher.check_many(urls)
        except (InvalidURL, TypeError) as exc:
            return exc


def _raw(verdict: Verdict) -> tuple[str, object, str]:
    """What a verdict holds before its rule is read: the id (or the rule, or None)."""
    return (verdict.action, verdict._rule, verdict.canonical)


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    patterns=st.lists(st.sampled_from(rulegen.random_rules(300, 4)), min_size=1, max_size=40),
    urls=st.lists(
        st.one_of(url_text, st.sampled_from(["http://x.example/", "é.example/a"])), max_size=30
    ),
    seed=st.integers(0, 1000),
    as_urls=st.booleans(),
)
def test_compiled_verdicts_equal_the_python_body(
    monkeypatch: pytest.MonkeyPatch,
    *,
    patterns: list[str],
    urls: list[str],
    seed: int,
    as_urls: bool,
) -> None:
    """The same ids (unread), actions and canonical forms; the same rules once read; the
    same first InvalidURL."""
    _compiled()
    matcher = SnapshotMatcher.from_rules(rules_from(patterns, seed))
    batch: list[Any] = list(urls)
    if as_urls:  # parsed URL objects are left to Python by the compiled call
        for at in range(0, len(batch), 2):
            with contextlib.suppress(InvalidURL):
                batch[at] = parse_url(batch[at])
    want = _reference(monkeypatch, matcher, batch)
    try:
        got: Any = matcher.check_many(batch)
    except (InvalidURL, TypeError) as exc:
        got = exc
    if isinstance(want, Exception):
        assert type(got) is type(want) and str(got) == str(want)
        return
    raw = [_raw(v) for v in want]  # (read before the comparison below builds the rules)
    assert [_raw(v) for v in got] == raw
    assert all(type(v) is Verdict for v in got)
    assert got == want  # the rules, read
    assert [v.rule for v in got] == [
        None if action == "none" else matcher.rule(rule_id)  # type: ignore[arg-type]
        for action, rule_id, _ in raw
    ]


def test_no_rule_is_built_until_one_is_read() -> None:
    _compiled()
    n = 2000
    matcher = SnapshotMatcher.from_rules(
        [
            parse_rule(f"h{i}.example/a", BLOCK if i % 3 else ALLOW, "c", "list", i + 1)
            for i in range(n)
        ]
    )
    verdicts = matcher.check_many(
        [f"http://h{i}.example/a/x" for i in range(n)] + ["http://no.test/"]
    )
    assert len(matcher._rule_cache) == 0  # a million distinct hits would build none either
    assert [v.action for v in verdicts[:6]] == ["allow", "block", "block"] * 2
    assert verdicts[-1] == Verdict("none", None, "http://no.test/")
    assert all(not gc.is_tracked(v) for v in verdicts)  # left to reference counts
    assert verdicts[5].blocked and verdicts[3].allowed
    assert verdicts[5].category == "c"  # reads the rule: built once, then kept
    assert len(matcher._rule_cache) == 1
    rule = verdicts[5].rule
    assert rule is verdicts[5].rule and rule is not None and rule.line == 6
    assert rule.pattern == "h5.example/a" and len(matcher._rule_cache) == 1


def test_a_verdict_reads_as_the_named_tuple_it_was() -> None:
    matcher = SnapshotMatcher.from_rules([parse_rule("evil.com", BLOCK, "ads", "l", 3)])
    (hit,) = matcher.check_many(["http://www.evil.com/x"])
    rule = matcher.rule(0)
    eager = Verdict("block", rule, "http://www.evil.com/x")
    assert hit == eager and hit == ("block", rule, "http://www.evil.com/x")
    assert ("block", rule, "http://www.evil.com/x") == hit
    assert hash(hit) == hash(eager) == hash(("block", rule, "http://www.evil.com/x"))
    action, got_rule, canonical = hit
    assert (action, got_rule, canonical) == tuple(hit) and len(hit) == 3
    assert (
        hit[0] == "block" and hit[1] is rule and hit[-1] == canonical and hit[:2] == ("block", rule)
    )
    assert hit._asdict() == {"action": "block", "rule": rule, "canonical": canonical}
    assert hit._replace(action="allow") == ("allow", rule, canonical)
    assert Verdict._fields == ("action", "rule", "canonical")
    assert repr(eager) == f"Verdict(action='block', rule={rule!r}, canonical={canonical!r})"
    assert Verdict.of(None, "http://x/") == Verdict("none", None, "http://x/")
    assert hit != Verdict("none", None, canonical)
    assert hit not in ("block", ("block",))
    match hit:
        case Verdict(action="block", rule=Rule(category="ads")):
            pass
        case _:
            pytest.fail("a verdict matches as the named tuple did")
    with pytest.raises(AttributeError):
        hit.action = "allow"  # type: ignore[misc]
    with pytest.raises(AttributeError):
        del hit.canonical
    with pytest.raises(ValueError, match="unexpected"):
        hit._replace(colour="red")
    with pytest.raises(ValueError):
        Verdict.deferred("block", -1, "http://x/", matcher)
    none = Verdict("none", None, "http://x/")
    assert pickle.loads(pickle.dumps(none)) == none  # (a rule is not picklable yet)


def test_snapshot_verdicts_refuses_misuse() -> None:
    fn = _compiled()
    matcher = SnapshotMatcher.from_rules([parse_rule("evil.com", BLOCK, "c")])
    view, layout = matcher._view, matcher._layout
    ok = fn(
        view,
        layout,
        ["evil.com", "x.org", "é.org"],
        None,
        Verdict,
        "none",
        "allow",
        "block",
        matcher,
    )
    assert [_raw(v) if v is not None else None for v in ok[0]] == [
        ("block", 0, "http://evil.com/"),
        ("none", None, "http://x.org/"),
        None,
    ]
    assert ok[1] == [2]  # off the fast path: the caller's

    class NoSlots:
        pass

    class Property(Verdict):
        __slots__ = ()

        @property
        def action(self) -> str:  # type: ignore[override]
            return "block"

    class Extra(Verdict):
        __slots__ = ("extra",)

    for verdict_type in (tuple, NoSlots, Property, "Verdict", Rule, int):
        with pytest.raises(TypeError):
            fn(view, layout, ["evil.com"], None, verdict_type, "none", "allow", "block", matcher)
    (extra,), _ = fn(view, layout, ["evil.com"], None, Extra, "none", "allow", "block", matcher)
    assert type(extra) is Extra and extra == ("block", matcher.rule(0), "http://evil.com/")
    for args, error in [
        (
            (view, layout, ("evil.com",), None, Verdict, "none", "allow", "block", matcher),
            TypeError,
        ),
        (
            (view, layout[:-1], ["evil.com"], None, Verdict, "none", "allow", "block", matcher),
            TypeError,
        ),
        ((view, layout, ["evil.com"], None, Verdict, "none", "allow", "block"), TypeError),
    ]:
        with pytest.raises(error):
            fn(*args)
    was = gc.isenabled()
    for enabled in (True, False):
        (gc.enable if enabled else gc.disable)()
        fn(view, layout, ["evil.com"] * 3000, None, Verdict, "none", "allow", "block", matcher)
        assert gc.isenabled() is enabled
    (gc.enable if was else gc.disable)()


def test_a_verdict_reads_its_rule_after_its_filter_is_closed(tmp_path: Path) -> None:
    """As when verdicts held their rules: a rule read after close comes from the image in
    memory, or from the file mapped again if it is the same snapshot; a snapshot replaced
    since is refused, not read for a rule of another image."""
    rules = [parse_rule("evil.com", BLOCK, "c", "l", 1), parse_rule("bad.org", BLOCK, "d", "l", 2)]
    path = tmp_path / "r.snap"
    in_memory = SnapshotMatcher.from_rules(rules)
    in_memory.save(path)
    with SnapshotMatcher(path) as matcher:
        (hit, other) = matcher.check_many(["http://evil.com/", "http://bad.org/"])
    with in_memory:
        (kept,) = in_memory.check_many(["http://bad.org/x"])
    assert hit.rule is not None and hit.rule.category == "c" and hit.rule.line == 1
    assert kept.rule is not None and kept.rule.pattern == "bad.org"
    SnapshotMatcher.from_rules(rules[::-1]).save(path)  # replaced (atomically) since
    with pytest.raises(SnapshotError, match="replaced"):
        _ = other.rule
