"""The production matcher's incremental build: duplicates, conflicts, compact host rules."""

from __future__ import annotations

from urlsieve import parse_rule
from urlsieve.match import HashMatcher


def test_add_reports_duplicates_and_allow_wins_a_conflict() -> None:
    m = HashMatcher()
    assert m.add(parse_rule("a.example", "block", "one", "l1", 1)) is True
    assert m.add(parse_rule("a.example", "block", "two", "l2", 5)) is False  # duplicate
    assert m.check("http://a.example/").rule == parse_rule("a.example", "block", "one", "l1", 1)
    assert m.add(parse_rule("a.example", "allow", "ok", "l3", 2)) is True  # allow replaces
    assert m.add(parse_rule("a.example", "block", "three", "l4", 9)) is True  # shadowed
    assert len(m) == 1
    assert m.check("http://x.a.example/").action == "allow"


def test_a_compact_host_rule_moves_into_a_table_when_the_host_gets_more() -> None:
    m = HashMatcher([parse_rule("WWW.A.example", "block", "c", "src", 3)])
    assert m.check("http://www.a.example/").rule.pattern == "WWW.A.example"  # type: ignore[union-attr]
    m.add(parse_rule("www.a.example/ok/", "allow"))
    m.add(parse_rule("=www.a.example/x|", "allow"))
    assert len(m) == 3
    assert m.check("http://www.a.example/ok/1").action == "allow"
    assert m.check("http://www.a.example/x").action == "allow"
    assert m.check("http://b.www.a.example/x").action == "block"
    rule = m.check("http://www.a.example/y").rule
    assert rule is not None and (rule.pattern, rule.source, rule.line) == (
        "WWW.A.example",
        "src",
        3,
    )
    assert sorted(r.location for r in m.rules) == [
        "=www.a.example/x|",
        "www.a.example/",
        "www.a.example/ok/",
    ]


def test_rules_added_after_a_lookup_are_seen() -> None:
    m = HashMatcher([parse_rule("a.example")])
    assert m.check("http://b.a.example/").action == "block"
    assert m.check("http://c.b.a.example/").action == "block"
    m.add(parse_rule("b.a.example", "allow"))
    assert m.check("http://c.b.a.example/").action == "allow"


def test_a_replacing_rule_reports_its_own_spelling() -> None:
    from urlsieve.rules import ALLOW, BLOCK
    from urlsieve.rules.model import parse_rule

    matcher = HashMatcher(
        [
            parse_rule("WWW.X.com", BLOCK, "ads", "a.txt", 1),
            parse_rule("www.x.com", ALLOW, "ok", "b.txt", 7),  # same key: allow wins
        ]
    )
    verdict = matcher.check("http://www.x.com/")
    assert (verdict.action, verdict.rule.pattern, verdict.rule.source, verdict.rule.line) == (
        "allow",
        "www.x.com",
        "b.txt",
        7,
    )
