"""The ``Matcher`` protocol, its ``Verdict``, and the rule-set resolution every engine shares."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple, Protocol, runtime_checkable

from urlsieve.exceptions import InvalidURL
from urlsieve.rules.model import ALLOW, BLOCK, NONE, Rule, RuleKey
from urlsieve.url import URL, parse_url

__all__ = ["Explanation", "Matcher", "ReferenceMatcher", "Verdict", "better", "resolve_rules"]


class Verdict(NamedTuple):
    """The answer for one URL: ``action`` is ``block``, ``allow`` or ``none`` (no rule matched).

    ``rule`` is the deciding rule (pattern, action, category, source, line),
    ``canonical`` the URL as the engine saw it (canonical form for the
    compiled and reference engines and the tree). A named tuple: cheap to make per request.
    """

    action: str
    rule: Rule | None
    canonical: str

    @property
    def category(self) -> str | None:
        """The deciding rule's category, ``None`` when no rule matched."""
        return None if self.rule is None else self.rule.category

    @property
    def blocked(self) -> bool:
        return self.action == BLOCK

    @property
    def allowed(self) -> bool:
        """True unless blocked (an allow rule matched, or nothing did)."""
        return self.action != BLOCK

    @staticmethod
    def of(rule: Rule | None, canonical: str) -> Verdict:
        return Verdict(NONE if rule is None else rule.action, rule, canonical)


@dataclass(frozen=True)
class Explanation:
    """Why a URL got its verdict: the canonical form, every expression probed, the deciding rule."""

    url: str
    canonical: str
    verdict: Verdict
    probes: list[str] = field(default_factory=list)
    #: Every enforced category with a matching rule (filled by :meth:`Filter.explain`).
    matching: list[str] = field(default_factory=list)
    #: Why a learned rule was learned: its provenance comment (score, phrases, page hash,
    #: note), when the learned overlay decided (:class:`urlsieve.layered.LayeredFilter`).
    evidence: str | None = None

    @property
    def rule(self) -> Rule | None:
        return self.verdict.rule

    def __str__(self) -> str:
        lines = [f"url:       {self.url}", f"canonical: {self.canonical}", "probed:"]
        lines += [f"  {p}" for p in self.probes] or ["  (nothing: no rule has this host)"]
        rule = self.verdict.rule
        if rule is None:
            lines.append("decision:  none (no rule matches)")
        else:
            lines.append(
                f"decision:  {rule.action} by {rule.pattern!r} "
                f"(category {rule.category}, {rule.where})"
            )
        if self.evidence:
            lines.append(f"learned:   {self.evidence}")
        if self.matching:
            lines.append(f"matching:  {', '.join(self.matching)} (every category with a rule)")
        return "\n".join(lines)


@runtime_checkable
class Matcher(Protocol):
    """A matching engine built from rules: what :class:`~urlsieve.Filter` and every caller use.

    ``categories`` chooses, per call, the categories whose rules are enforced
    (``None``: all). The production engine (:class:`~urlsieve.match.SnapshotMatcher`)
    answers for any choice; the reference and seed engines decide on every category
    and refuse a choice with :class:`ValueError`.
    """

    name: str

    def check(self, url: str | URL, categories: Collection[str] | None = None) -> Verdict:
        """The verdict for one URL; :class:`~urlsieve.InvalidURL` if it has no usable host."""
        ...

    def check_many(
        self, urls: Iterable[str | URL], categories: Collection[str] | None = None
    ) -> list[Verdict]:
        """Verdicts for many URLs, in order (an invalid URL raises, as in :meth:`check`)."""
        ...

    def decide(self, url: URL, categories: Collection[str] | None = None) -> Rule | None:
        """The deciding rule for a parsed URL (``None``: no rule matches)."""
        ...

    def decide_many(
        self, urls: Sequence[str | bytes | URL], categories: Collection[str] | None = None
    ) -> list[Rule | InvalidURL | None]:
        """Per URL the deciding rule, ``None``, or the :class:`~urlsieve.InvalidURL` it raised."""
        ...

    def explain(self, url: str | URL, categories: Collection[str] | None = None) -> Explanation:
        """The canonical URL, the expressions probed, the deciding rule."""
        ...

    @property
    def rules(self) -> list[Rule]:
        """The rules held."""
        ...

    def close(self) -> None:
        """Release what the engine holds (a mapped file); safe to call twice."""
        ...

    def __len__(self) -> int:
        """Number of rules the engine holds."""
        ...


class ReferenceMatcher:
    """The :class:`Matcher` methods of the reference and seed engines, from ``_decide``.

    They decide on every category: a category choice raises :class:`ValueError`
    (build them from the chosen categories' rules instead).
    """

    name = "reference"

    def _decide(self, url: URL, trace: list[str] | None = None) -> Rule | None:
        raise NotImplementedError

    @property
    def rules(self) -> list[Rule]:
        raise NotImplementedError

    def _every(self, categories: Collection[str] | None) -> None:
        if categories is not None:
            raise ValueError(
                f"the {self.name} engine decides on every category: "
                "build it from the chosen categories' rules"
            )

    def decide(self, url: URL, categories: Collection[str] | None = None) -> Rule | None:
        self._every(categories)
        return self._decide(url)

    def check(self, url: str | URL, categories: Collection[str] | None = None) -> Verdict:
        self._every(categories)
        parts = url if isinstance(url, URL) else parse_url(url)
        return Verdict.of(self._decide(parts), parts.canonical)

    def check_many(
        self, urls: Iterable[str | URL], categories: Collection[str] | None = None
    ) -> list[Verdict]:
        return [self.check(url, categories) for url in urls]

    def decide_many(
        self, urls: Sequence[str | bytes | URL], categories: Collection[str] | None = None
    ) -> list[Rule | InvalidURL | None]:
        self._every(categories)
        out: list[Rule | InvalidURL | None] = []
        for url in urls:
            try:
                parts = url if isinstance(url, URL) else parse_url(url)
            except InvalidURL as exc:
                out.append(exc)
            else:
                out.append(self._decide(parts))
        return out

    def explain(self, url: str | URL, categories: Collection[str] | None = None) -> Explanation:
        self._every(categories)
        parts = url if isinstance(url, URL) else parse_url(url)
        trace: list[str] = []
        rule = self._decide(parts, trace)
        return Explanation(str(url), parts.canonical, Verdict.of(rule, parts.canonical), trace)

    def close(self) -> None:
        """Nothing to release: the engine lives in memory."""


def better(current: Rule | None, candidate: Rule) -> Rule:
    """The winner of two rules that both match: the higher :attr:`Rule.rank`, else the first."""
    if current is None or candidate.rank > current.rank:
        return candidate
    return current


def resolve_rules(rules: Iterable[Rule]) -> list[Rule]:
    """One rule per key: on a conflict ``allow`` wins, otherwise the first read is kept."""
    by_key: dict[RuleKey, Rule] = {}
    for rule in rules:
        previous = by_key.get(rule.key)
        if previous is None or (rule.action == ALLOW and previous.action != ALLOW):
            by_key[rule.key] = rule
    return list(by_key.values())
