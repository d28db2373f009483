"""Hostile URLs (a host of 100k labels, a path of 100k segments, a 1 MB query): the reference
matchers give the verdict they give a small equivalent, and memory stays linear in the URL."""

from __future__ import annotations

import tracemalloc
from collections.abc import Callable

import pytest

from urlsieve import URL
from urlsieve.match import DecompositionTree, HashMatcher
from urlsieve.rules.model import BLOCK, Rule, parse_rule

HUGE = 100_000
RULES = [
    parse_rule(text, BLOCK, "test", "t.txt", n)
    for n, text in enumerate(["evil.com", "example.org/ads", "=exact.net", "q.com/p?id=1"], 1)
]


def shapes(n: int) -> list[URL]:
    return [
        URL("http", "a." * n + "www.evil.com", "/x"),
        URL("http", "a." * n + "nothing.test", "/x"),
        URL("http", "example.org", "/ads/" + "x/" * n),
        URL("http", "a." * n + "example.org", "/ads" + "/z" * n),
        URL("http", "a." * n + "exact.net", "/"),
        URL("http", "q.com", "/p", "id=1&" + "k=v&" * n),
        URL("http", "q.com", "/p", "id=1" + "x" * 10 * n),
    ]


def peak(call: Callable[[], object]) -> tuple[object, int]:
    tracemalloc.start()
    try:
        result = call()
        return result, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("make", [HashMatcher, DecompositionTree])
@pytest.mark.parametrize("index", range(len(shapes(0))))
def test_matchers_decide_hostile_urls_in_linear_memory(
    make: Callable[[list[Rule]], HashMatcher | DecompositionTree], index: int
) -> None:
    matcher = make(RULES)
    reference = HashMatcher(RULES).decide(shapes(3)[index])
    huge = shapes(HUGE)[index]
    rule, used = peak(lambda: matcher.check(huge).rule)
    assert rule == reference
    assert used < 16 * len(huge.location) + 100_000
