"""Filter.check of one URL (issue 34's single path) is the batch's verdict and the
Python reference's, for every category choice, compiled or not."""

from __future__ import annotations

import random

import pytest

from tests.gateway import rulegen
from urlsieve import Filter, InvalidURL, parse_url
from urlsieve.match.snapshot import SnapshotMatcher
from urlsieve.match.snapshot import matcher as snapshot
from urlsieve.rules.model import ALLOW, BLOCK, Rule, RuleSyntaxError, parse_rule

CATEGORIES = ["c0", "c1", "c2"]


def _rules(n: int, seed: int) -> list[Rule]:
    rnd = random.Random(seed)
    out = []
    for number, pattern in enumerate(rulegen.random_rules(n, seed), 1):
        action = ALLOW if rnd.random() < 0.25 else BLOCK
        try:
            out.append(parse_rule(pattern, action, rnd.choice(CATEGORIES), "gen.txt", number))
        except RuleSyntaxError:
            continue
    return out


class _Invalid(str):
    """What check() raised, as a value."""


def _verdict(check: object, url: str) -> object:
    try:
        return check(url)  # type: ignore[operator]
    except InvalidURL as exc:
        return _Invalid(exc.reason)


@pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "python"])
@pytest.mark.parametrize("chosen", [None, ["c1"], ["c0", "c2"], []])
def test_one_url_is_the_batch_and_the_reference(
    monkeypatch: pytest.MonkeyPatch, compiled: bool, chosen: list[str] | None
) -> None:
    rules = _rules(800, 4)
    urls = [*rulegen.random_urls(1500, 9), "javascript:x", "http://Bücher.de/a", "a b"]
    if not compiled:
        monkeypatch.setattr(snapshot, "_verdicts", None)
        monkeypatch.setattr(snapshot, "_match", None)
        monkeypatch.setattr(snapshot, "_checker", None)
    flt = Filter(SnapshotMatcher.from_rules(rules))
    single = [_verdict(lambda u: flt.check(u, chosen), url) for url in urls]  # cache cold
    valid = [u for u, v in zip(urls, single, strict=True) if not isinstance(v, _Invalid)]
    batch = flt.check_many(valid, chosen)
    assert [v for v in single if not isinstance(v, _Invalid)] == batch
    matcher = flt._matcher
    assert isinstance(matcher, SnapshotMatcher)
    mask = matcher.category_mask(chosen)
    for url, got in zip(urls, single, strict=True):
        try:
            parts = parse_url(url)
        except InvalidURL:
            assert isinstance(got, _Invalid)
            continue
        best = matcher._best(parts, None, mask)
        assert not isinstance(got, _Invalid)
        assert got.canonical == parts.canonical
        assert (got.rule is None) == (best < 0)
        if best >= 0:
            assert got.rule == matcher.rule(best)
    decided = sum(not isinstance(v, _Invalid) and v.rule is not None for v in single)
    assert decided > 50 if chosen != [] else decided == 0
    # a filter made for some categories checks them by default
    if chosen is not None:
        selected = flt.select(chosen)
        assert [_verdict(selected.check, u) for u in urls] == single
