"""The ``Matcher`` protocol, its ``Verdict``, and the rule-set resolution every engine shares."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, cast, runtime_checkable

from urlsieve.exceptions import InvalidURL
from urlsieve.rules.model import ALLOW, BLOCK, NONE, Rule, RuleKey
from urlsieve.url import URL, parse_url

__all__ = [
    "Explanation",
    "Matcher",
    "ReferenceMatcher",
    "RuleTable",
    "Verdict",
    "better",
    "resolve_rules",
]


class RuleTable(Protocol):
    """Where a verdict that holds a rule id reads its rule (the compiled engine)."""

    def rule(self, rule_id: int) -> Rule:
        """The rule with this id."""
        ...


_set = object.__setattr__


class Verdict:
    """The answer for one URL: ``action`` is ``block``, ``allow`` or ``none`` (no rule matched).

    ``rule`` is the deciding rule (pattern, action, category, source, line),
    ``canonical`` the URL as the engine saw it (canonical form for the
    compiled and reference engines and the tree).

    Immutable, and read as the named tuple ``(action, rule, canonical)`` it used to be:
    unpacking, indexing, ``len``, equality and hashing with such tuples, ``_asdict``,
    ``_replace``. A verdict of the compiled batch path holds its rule's *id* and the
    engine's rule table instead of the rule: the rule is built the first time ``rule``
    (or ``category``, equality, hashing, unpacking) reads it, and kept; a caller that
    reads only ``action``, ``blocked`` or ``canonical`` never builds one. Such a verdict
    keeps its engine alive (read ``rule`` before closing a snapshot file, see
    :meth:`~urlsieve.match.snapshot.SnapshotMatcher.close`). 64 bytes (four slots and the
    collector's header; the compiled path leaves them untracked), and 32 more for the int
    of a rule id above 256.
    """

    __slots__ = ("_rule", "_rules", "action", "canonical")
    __match_args__ = ("action", "rule", "canonical")
    _fields = ("action", "rule", "canonical")

    action: str
    canonical: str
    _rule: Rule | int | None  # an int: the id, not read from ``_rules`` yet
    _rules: RuleTable | None

    def __init__(self, action: str, rule: Rule | None, canonical: str) -> None:
        _set(self, "action", action)
        _set(self, "_rule", rule)
        _set(self, "_rules", None)
        _set(self, "canonical", canonical)

    @staticmethod
    def of(rule: Rule | None, canonical: str) -> Verdict:
        return Verdict(NONE if rule is None else rule.action, rule, canonical)

    @classmethod
    def deferred(cls, action: str, rule_id: int, canonical: str, rules: RuleTable) -> Verdict:
        """A verdict whose rule, ``rules.rule(rule_id)``, is built when first read (the
        reference of the compiled ``snapshot_verdicts``)."""
        if rule_id < 0:
            raise ValueError(f"a deferred verdict needs a rule id, not {rule_id}")
        verdict = cls.__new__(cls)
        _set(verdict, "action", action)
        _set(verdict, "_rule", rule_id)
        _set(verdict, "_rules", rules)
        _set(verdict, "canonical", canonical)
        return verdict

    @property
    def rule(self) -> Rule | None:
        """The deciding rule, ``None`` when no rule matched."""
        rule = self._rule
        if type(rule) is int:  # built once, then kept (two threads may both build it)
            rule = cast("RuleTable", self._rules).rule(rule)
            _set(self, "_rule", rule)
        return rule  # type: ignore[return-value]

    @property
    def category(self) -> str | None:
        """The deciding rule's category, ``None`` when no rule matched."""
        rule = self.rule
        return None if rule is None else rule.category

    @property
    def blocked(self) -> bool:
        return self.action == BLOCK

    @property
    def allowed(self) -> bool:
        """True unless blocked (an allow rule matched, or nothing did)."""
        return self.action != BLOCK

    # -- the named tuple it was -------------------------------------------------------

    def _tuple(self) -> tuple[str, Rule | None, str]:
        return (self.action, self.rule, self.canonical)

    def __iter__(self) -> Iterator[Any]:
        return iter(self._tuple())

    def __len__(self) -> int:
        return 3

    def __getitem__(self, index: Any) -> Any:
        return self._tuple()[index]

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Verdict):
            return self._tuple() == other._tuple()
        if isinstance(other, tuple):
            return self._tuple() == other
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self._tuple())

    def __repr__(self) -> str:
        return f"Verdict(action={self.action!r}, rule={self.rule!r}, canonical={self.canonical!r})"

    def __reduce__(self) -> tuple[type[Verdict], tuple[str, Rule | None, str]]:
        return (Verdict, self._tuple())

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"a Verdict is immutable: cannot set {name!r}")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"a Verdict is immutable: cannot delete {name!r}")

    def _asdict(self) -> dict[str, Any]:
        return dict(zip(self._fields, self._tuple(), strict=True))

    def _replace(self, **changes: Any) -> Verdict:
        fields = {**self._asdict(), **changes}
        if len(fields) != len(self._fields):
            raise ValueError(
                f"got unexpected field names: {sorted(set(changes) - set(self._fields))}"
            )
        return Verdict(fields["action"], fields["rule"], fields["canonical"])


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
