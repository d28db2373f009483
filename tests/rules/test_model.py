"""Rule patterns: the DESIGN.md §2 table, canonicalisation of rules, and bad patterns."""

from __future__ import annotations

import pytest

from urlsieve import RuleSyntaxError
from urlsieve.rules import ALLOW, BLOCK, parse_rule


@pytest.mark.parametrize(
    ("pattern", "expected"),
    [
        ("example.com", ("example.com", "/", None, False, False, False)),
        ("=example.com", ("example.com", "/", None, True, False, False)),
        ("example.com/ads", ("example.com", "/ads", None, False, False, False)),
        ("example.com/ads/", ("example.com", "/ads/", None, False, False, False)),
        ("example.com/ads|", ("example.com", "/ads", None, False, True, False)),
        ("example.com/p?id=1", ("example.com", "/p", "id=1", False, False, False)),
        ("10.0.0.1", ("10.0.0.1", "/", None, False, False, True)),
        ("0x0a.0.0.1", ("10.0.0.1", "/", None, False, False, True)),
        ("[2001:DB8:0::1]", ("[2001:db8::1]", "/", None, False, False, True)),
        ("WWW.Example.COM.", ("www.example.com", "/", None, False, False, False)),
        ("http://Example.com:8080/a/./b/../c", ("example.com", "/a/c", None, False, False, False)),
        ("bücher.example", ("xn--bcher-kva.example", "/", None, False, False, False)),
        ("xn--bcher-kva.example", ("xn--bcher-kva.example", "/", None, False, False, False)),
        ("gouv.fr", ("gouv.fr", "/", None, False, False, False)),
    ],
)
def test_patterns_are_canonicalised(pattern: str, expected: tuple[object, ...]) -> None:
    rule = parse_rule(pattern, BLOCK, "cat", "list.txt", 7)
    got = (rule.host, rule.path, rule.query, rule.exact_host, rule.anchored, rule.is_ip)
    assert got == expected
    assert (rule.pattern, rule.category, rule.source, rule.line) == (pattern, "cat", "list.txt", 7)
    assert rule.where == "list.txt:7"


def test_unicode_and_punycode_spellings_are_one_rule() -> None:
    assert parse_rule("bücher.example").key == parse_rule("XN--BCHER-KVA.example").key


@pytest.mark.parametrize(
    ("pattern", "reason"),
    [
        ("", "empty pattern"),
        ("   ", "empty pattern"),
        ("exa mple.com", "whitespace inside a pattern"),
        ("=", "empty host"),
        ("com", "top-level domain"),
        ("javascript:alert(1)", "unsupported scheme"),
        ("http:///path", "empty host"),
        ("exa%20mple.com", "forbidden character"),
        ("1.2.3.4.5", "more than four parts"),
        ("ads.*.example.com", "'*' wildcard in a host"),
        ("*tracker.com", "'*' wildcard in a host"),
        ("=*.example.com", "'*' wildcard in a host"),
    ],
)
def test_bad_patterns_say_what_and_where(pattern: str, reason: str) -> None:
    with pytest.raises(RuleSyntaxError) as info:
        parse_rule(pattern, BLOCK, "cat", "lists/ads/urls", 1042)
    assert str(info.value).startswith("lists/ads/urls:1042: ")
    assert reason in str(info.value)
    assert info.value.line == 1042


def test_rank_orders_host_then_path_then_allow() -> None:
    domain = parse_rule("example.com")
    sub = parse_rule("www.example.com")
    path = parse_rule("example.com/a/")
    allow_path = parse_rule("example.com/a/", ALLOW)
    assert sub.rank > path.rank > domain.rank
    assert allow_path.rank > path.rank
    assert allow_path.key == path.key


def test_action_is_validated() -> None:
    with pytest.raises(ValueError, match="block"):
        parse_rule("example.com", "deny")


def test_covers_host_on_label_boundaries() -> None:
    rule = parse_rule("example.com")
    assert rule.covers_host("a.b.example.com")
    assert not rule.covers_host("badexample.com")
    assert not parse_rule("=example.com").covers_host("www.example.com")


def test_star_dot_domain_is_the_domain_rule() -> None:
    rule = parse_rule("*.wild.example", BLOCK, "cat", "l.txt", 2)
    assert (rule.host, rule.path, rule.exact_host, rule.pattern) == (
        "wild.example",
        "/",
        False,
        "*.wild.example",
    )
    assert parse_rule("*.wild.example/ads/").path == "/ads/"
