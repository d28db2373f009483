"""The ``Matcher`` protocol, its ``Verdict``, and the rule-set resolution every engine shares."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import NamedTuple, Protocol, runtime_checkable

from urlsieve.rules.model import ALLOW, BLOCK, NONE, Rule, RuleKey
from urlsieve.url import URL

__all__ = ["Explanation", "Matcher", "Verdict", "better", "resolve_rules"]


class Verdict(NamedTuple):
    """The answer for one URL: ``action`` is ``block``, ``allow`` or ``none`` (no rule matched).

    ``rule`` is the deciding rule (pattern, action, category, source, line),
    ``canonical`` the URL as the engine saw it (canonical form for the
    production matcher and the tree). A named tuple: cheap to make per request.
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
        return "\n".join(lines)


@runtime_checkable
class Matcher(Protocol):
    """A matching engine built from rules."""

    name: str

    def check(self, url: str | URL) -> Verdict:
        """The verdict for one URL; :class:`~urlsieve.InvalidURL` if it has no usable host."""
        ...

    def check_many(self, urls: Iterable[str | URL]) -> list[Verdict]:
        """Verdicts for many URLs, in order (an invalid URL raises, as in :meth:`check`)."""
        ...

    def __len__(self) -> int:
        """Number of rules the engine holds."""
        ...


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
