"""Pathological URLs (issue 9): every engine answers a host of tens of thousands of labels
or a path of tens of thousands of segments with the verdict of the same URL's small
equivalent, in memory linear in the URL (measured with tracemalloc, never with a clock)."""

from __future__ import annotations

import tracemalloc
from collections.abc import Callable
from pathlib import Path

import pytest

from urlsieve import Filter
from urlsieve.match import HashMatcher
from urlsieve.match.snapshot import compile_snapshot, open_snapshot
from urlsieve.rules.model import ALLOW, BLOCK, Rule, parse_rule
from urlsieve.url import MAX_URL_LENGTH, host_suffixes, lookup_expressions, path_prefixes
from urlsieve.url.expressions import MAX_EXPRESSIONS


def rules() -> list[Rule]:
    return [
        parse_rule("evil.com", BLOCK, "malware"),
        parse_rule("x.example/ads", BLOCK, "ads"),
        parse_rule("x.example/ads/ok/", ALLOW, "ok"),
        parse_rule("deep.example/a/b/c/d/e/f", BLOCK, "deep"),
        parse_rule("q.example/p?id=1", BLOCK, "q"),
    ]


def cases() -> list[tuple[Callable[[int], str], str]]:
    """(a pathological URL of about n bytes, what it must decide)."""
    return [
        (lambda n: f"http://{'a.' * (n // 2)}evil.com/", "block"),
        (lambda n: f"http://{'a.' * (n // 2)}good.org/", "none"),
        (lambda n: f"http://x.example/ads{'/s' * (n // 2)}", "block"),
        (lambda n: f"http://x.example/ads/ok{'/s' * (n // 2)}", "allow"),
        (lambda n: f"http://x.example/other{'/s' * (n // 2)}", "none"),
        (lambda n: f"http://deep.example/a/b/c/d/e/f{'/s' * (n // 2)}", "block"),
        (lambda n: f"http://{'a.' * (n // 4)}x.example/ads{'/s' * (n // 4)}", "block"),
        (lambda n: f"http://q.example/p?id=1&{'z' * n}", "none"),
    ]


def _engines(tmp_path: Path) -> dict[str, Callable[[str], str]]:
    snap = tmp_path / "r.snap"
    compile_snapshot(rules(), snap)
    matcher = open_snapshot(snap)
    hashed = HashMatcher(rules())
    loaded = Filter.load(snap)
    return {
        "snapshot": lambda u: matcher.check(u).action,
        "hashed": lambda u: hashed.check(u).action,
        "filter.load": lambda u: loaded.check(u).action,
        "explain": lambda u: matcher.explain(u).verdict.action,
    }


def _peak(check: Callable[[str], str], url: str) -> tuple[str, int]:
    tracemalloc.start()
    try:
        action = check(url)
        return action, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize(("make", "expected"), cases())
def test_pathological_urls_get_the_right_verdict_in_linear_memory(
    tmp_path: Path, make: Callable[[int], str], expected: str
) -> None:
    small, large = make(15_000), make(30_000)
    assert len(large) <= MAX_URL_LENGTH
    for name, check in _engines(tmp_path).items():
        action_small, peak_small = _peak(check, small)
        action_large, peak_large = _peak(check, large)
        assert action_small == action_large == expected, name
        # Twice the URL, about twice the memory (the quadratic engines held every host
        # suffix and path prefix at once: four times, and gigabytes at the URL cap).
        assert peak_large < 2.6 * peak_small + 100_000, (name, peak_small, peak_large)
        assert peak_large < 200 * len(large), (name, peak_large, len(large))


def test_lookup_expressions_are_bounded_and_most_specific_first() -> None:
    url = f"http://{'a.' * 15_000}x.com/{'s/' * 15_000}"
    expressions = lookup_expressions(url)
    assert len(expressions) == MAX_EXPRESSIONS
    assert expressions[0] == url[len("http://") :]
    assert expressions[1] == url[len("http://") : -2]  # "/s/…/s/" less its last segment
    small = "http://a.b.example.co.uk/x/y?q=1"
    assert lookup_expressions(small, limit=None) == [
        h + p for h in host_suffixes("a.b.example.co.uk") for p in path_prefixes("/x/y", "q=1")
    ]
    assert lookup_expressions(small, limit=3) == lookup_expressions(small)[:3]
