"""One contract over every matching engine; the patent table's documented differences marked.

Each case gives urlsieve's expected action and, where the seed patent's
segmented table differs by design (see ``urlsieve.match.segmented``), its
action and the reason.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pytest

from urlsieve import InvalidURL, parse_rule
from urlsieve.match import (
    DecompositionTree,
    HashMatcher,
    Matcher,
    SegmentedTable,
    SnapshotMatcher,
)
from urlsieve.rules import ALLOW, BLOCK, Rule

PATTERNS = [
    ("evil.com", BLOCK),
    ("example.com/ads", BLOCK),
    ("example.com/dir/", BLOCK),
    ("example.com/ads/ok/", ALLOW),
    ("10.1.2.3", BLOCK),
    ("shop.example/p?id=1", BLOCK),
    ("deep.example/a/b/c/d", BLOCK),
    ("=exact.example", BLOCK),
    ("anchor.example/x|", BLOCK),
    ("upper.example/Private/", BLOCK),  # paths match without regard to case
]
RULES = [parse_rule(p, a, "cat", "contract.txt", i) for i, (p, a) in enumerate(PATTERNS, 1)]


@dataclass(frozen=True)
class Case:
    url: str
    action: str
    patent: str | None = None  # the patent table's action where it differs
    why: str = ""


CASES = [
    Case("http://evil.com/", "block"),
    Case("http://evil.com/x/y/z/w", "block"),
    Case("http://www.evil.com/", "block", "none", "no subdomain matching"),
    Case("http://EVIL.com/", "block", "none", "no canonicalisation (case)"),
    Case("http://evil.com:80/", "block", "none", "the port stays in the first segment"),
    Case("http://evil.com?x=1", "block", "none", "the query is glued to the host segment"),
    Case("http://notevil.com/", "none"),
    Case("http://evil.com.example.org/", "none"),
    Case("http://example.com/", "none"),
    Case("http://example.com/ads", "block"),
    Case("http://example.com/ads/x", "block"),
    Case("http://example.com/adsense", "none"),
    Case("http://example.com/dir", "none", "block", "/dir/ and /dir are one string to it"),
    Case("http://example.com/dir/x", "block"),
    Case("http://example.com/ads/ok/1", "allow"),
    Case("http://10.1.2.3/", "block"),
    Case("http://167838211/", "block", "none", "no IPv4 normalisation"),
    Case("http://shop.example/p?id=1", "block"),
    Case("http://shop.example/p?id=2", "none"),
    Case("http://example.com/ADS/x", "block", "none", "no canonicalisation (case)"),
    Case("http://shop.example/P?ID=1", "block", "none", "no canonicalisation (case)"),
    Case("http://upper.example/private/x", "block"),
    Case("http://upper.example/PRIVATE/x", "block", "none", "no canonicalisation (case)"),
    Case("http://upper.example/privately", "none"),
    Case("http://deep.example/a/b/c/d/e", "block", "none", "never hashes past 3 separators"),
    Case("http://deep.example/a/b/c/e", "none"),
    Case("http://exact.example/x", "block"),
    Case("http://www.exact.example/", "none"),
    Case("http://anchor.example/x", "block"),
    Case("http://anchor.example/x/y", "none", "block", "anchors are ignored"),
]

ENGINES: dict[str, Callable[[list[Rule]], Matcher]] = {
    # The production engine: the compiled rule format every Filter runs on.
    "snapshot": SnapshotMatcher.from_rules,
    "hash": HashMatcher,
    "tree": DecompositionTree,
    # Roomy, so that no bucket collision adds raw-prefix false hits (tested on their own).
    "patent": lambda rules: SegmentedTable(rules, size=1 << 16),
}


@pytest.fixture(scope="module", params=sorted(ENGINES))
def engine(request: pytest.FixtureRequest) -> tuple[str, Matcher]:
    name: str = request.param
    return name, ENGINES[name](RULES)


@pytest.mark.parametrize("case", CASES, ids=[c.url for c in CASES])
def test_contract(engine: tuple[str, Matcher], case: Case) -> None:
    name, matcher = engine
    expected = case.patent if name == "patent" and case.patent is not None else case.action
    verdict = matcher.check(case.url)
    assert verdict.action == expected, (name, case.why)
    if verdict.rule is not None:
        assert verdict.rule.action == verdict.action
        assert verdict.rule.source == "contract.txt"


def test_every_engine_satisfies_the_protocol(engine: tuple[str, Matcher]) -> None:
    _, matcher = engine
    assert isinstance(matcher, Matcher)
    assert len(matcher) == len(RULES)
    urls = [c.url for c in CASES]
    assert [v.action for v in matcher.check_many(urls)] == [matcher.check(u).action for u in urls]


def test_patent_differences_are_the_documented_ones() -> None:
    assert {c.why for c in CASES if c.patent is not None} == {
        "no subdomain matching",
        "no canonicalisation (case)",
        "the port stays in the first segment",
        "the query is glued to the host segment",
        "/dir/ and /dir are one string to it",
        "no IPv4 normalisation",
        "never hashes past 3 separators",
        "anchors are ignored",
    }


@pytest.mark.parametrize("name", ["snapshot", "hash", "tree"])
def test_canonicalising_engines_refuse_invalid_urls(name: str) -> None:
    with pytest.raises(InvalidURL):
        ENGINES[name](RULES).check("javascript:alert(1)")


def test_patent_with_canonical_requests_closes_the_canonicalisation_gaps() -> None:
    table = SegmentedTable(RULES, canonical=True)
    assert table.check("http://EVIL.com:80/").action == "block"
    assert table.check("http://167838211/").action == "block"
    assert table.check("http://www.evil.com/").action == "none"  # still no subdomains
