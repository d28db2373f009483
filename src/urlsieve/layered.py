"""An administrator's rules with a small overlay of learned rules beside them.

The self-learning gateway (:mod:`urlsieve.learn`) writes what it learns into its own
small snapshot, the *overlay*, recompiled in milliseconds whatever the size of the
base lists. :class:`LayeredFilter` asks the base first; only a URL no base rule decides
is looked up in the overlay. So an administrator's list always beats a learned rule
(a learned rule is only ever made for a URL the base left undecided), and the most
specific rule wins within each layer.

A URL neither layer decides is *unknown* (``Verdict.action == "none"``, rule id -1):
the gateway's ``unknown`` setting says what happens to it.

Rule ids of the overlay are offset by :data:`OVERLAY_IDS`, so one id names one rule
across both layers.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from urlsieve.exceptions import InvalidURL
from urlsieve.filter import Categories, Filter
from urlsieve.match.base import Explanation, Verdict
from urlsieve.rules.model import Rule
from urlsieve.url import URL

__all__ = ["OVERLAY_IDS", "LayeredFilter"]

#: Overlay rule ids start here (far above any base snapshot's rule count).
OVERLAY_IDS = 1 << 48


class LayeredFilter(Filter):
    """``base``'s verdicts, and ``overlay``'s where the base has no rule.

    Categories chosen per call apply to the base only: the overlay's categories are the
    learned ones, enforced whenever learning is on.
    """

    def __init__(self, base: Filter, overlay: Filter | None) -> None:
        super().__init__(base.matcher, load=base._load, categories=base.selected)
        self.base = base
        self.overlay = overlay

    def select(self, categories: Categories) -> Filter:
        return LayeredFilter(self.base.select(categories), self.overlay)

    def close(self) -> None:
        self.base.close()
        if self.overlay is not None:
            self.overlay.close()

    def __len__(self) -> int:
        return len(self.base) + (len(self.overlay) if self.overlay is not None else 0)

    def check(self, url: str | URL, categories: Categories = None) -> Verdict:
        verdict = self.base.check(url, categories)
        if verdict.rule is not None or self.overlay is None:
            return verdict
        learned = self.overlay.check(url)
        return learned if learned.rule is not None else verdict

    def match(self, url: URL, categories: Categories = None) -> Rule | None:
        rule = self.base.match(url, categories)
        if rule is not None or self.overlay is None:
            return rule
        return self.overlay.match(url)

    def check_many(self, urls: Iterable[str | URL], categories: Categories = None) -> list[Verdict]:
        urls = list(urls)
        verdicts = self.base.check_many(urls, categories)
        if self.overlay is None:
            return verdicts
        undecided = [at for at, v in enumerate(verdicts) if v.rule is None]
        if undecided:
            learned = self.overlay.check_many([urls[at] for at in undecided])
            for at, verdict in zip(undecided, learned, strict=True):
                if verdict.rule is not None:
                    verdicts[at] = verdict
        return verdicts

    def match_many(
        self, urls: Sequence[str | bytes | URL], categories: Categories = None
    ) -> list[Rule | InvalidURL | None]:
        found = self.base.match_many(urls, categories)
        if self.overlay is None:
            return found
        undecided = [at for at, r in enumerate(found) if r is None]
        if undecided:
            learned = self.overlay.match_many([urls[at] for at in undecided])
            for at, rule in zip(undecided, learned, strict=True):
                if isinstance(rule, Rule):
                    found[at] = rule
        return found

    def decide_ids(
        self, urls: Sequence[str], categories: Categories = None
    ) -> list[int | InvalidURL]:
        ids = self.base.decide_ids(urls, categories)
        if self.overlay is None:
            return ids
        undecided = [at for at, r in enumerate(ids) if r == -1]
        if undecided:
            learned = self.overlay.decide_ids([urls[at] for at in undecided])
            for at, rule_id in zip(undecided, learned, strict=True):
                if type(rule_id) is int and rule_id >= 0:
                    ids[at] = rule_id + OVERLAY_IDS
        return ids

    def provenance(self, rule_id: int) -> tuple[str, str, str | None, int | None]:
        if rule_id >= OVERLAY_IDS and self.overlay is not None:
            return self.overlay.provenance(rule_id - OVERLAY_IDS)
        return self.base.provenance(rule_id)

    def rule(self, rule_id: int) -> Rule:
        if rule_id >= OVERLAY_IDS and self.overlay is not None:
            return self.overlay.rule(rule_id - OVERLAY_IDS)
        return self.base.rule(rule_id)

    def explain(self, url: str | URL, categories: Categories = None) -> Explanation:
        explanation = self.base.explain(url, categories)
        if explanation.rule is not None or self.overlay is None:
            return explanation
        learned = self.overlay.explain(url)
        probes = [*explanation.probes, *(f"(learned) {p}" for p in learned.probes)]
        return Explanation(explanation.url, explanation.canonical, learned.verdict, probes)
