"""``urlsieve.Filter``: rule lists in, verdicts and explanations out."""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence

from urlsieve.match.base import Explanation, Verdict
from urlsieve.match.hashed import HashMatcher
from urlsieve.rules.load import LoadResult, Progress, load_lists
from urlsieve.rules.model import ALLOW, BLOCK, Rule, parse_rule
from urlsieve.rules.readers import ListReport
from urlsieve.url import URL

__all__ = ["Filter"]

PathLike = str | os.PathLike[str]


class Filter:
    """A URL filter: most specific rule wins, ``allow`` on a tie (DESIGN.md §2).

    >>> f = Filter.from_rules(["evil.com", "@@evil.com/public/"])
    >>> f.check("http://WWW.Evil.COM:80/x").action
    'block'
    >>> f.check("http://evil.com/public/a.html").action
    'allow'
    >>> f.check("http://notevil.com/").action
    'none'
    """

    def __init__(
        self, rules: Iterable[Rule] | HashMatcher = (), *, load: LoadResult | None = None
    ) -> None:
        self._matcher = rules if isinstance(rules, HashMatcher) else HashMatcher(rules)
        self._load = load if load is not None else LoadResult()

    @classmethod
    def from_rules(cls, rules: Iterable[Rule | str], *, category: str = "-") -> Filter:
        """From :class:`Rule` objects or patterns (``@@pattern`` is an allow rule)."""
        parsed = []
        for rule in rules:
            if isinstance(rule, Rule):
                parsed.append(rule)
            elif rule.startswith("@@"):
                parsed.append(parse_rule(rule[2:], ALLOW, category))
            else:
                parsed.append(parse_rule(rule, BLOCK, category))
        return cls(parsed)

    @classmethod
    def from_lists(
        cls,
        block: Sequence[PathLike] = (),
        allow: Sequence[PathLike] = (),
        *,
        format: str = "auto",
        strict: bool = False,
        progress: Progress | None = None,
        categories: Sequence[str] = (),
    ) -> Filter:
        """From list files and squidGuard trees (see :func:`urlsieve.rules.load_lists`).

        ``block`` lists are read as block lists (``@@`` lines and squidGuard
        categories whose ``usage`` says ``white`` are allow rules);
        ``allow`` lists are all allow rules. Bad lines are skipped and kept
        in :attr:`warnings`; with ``strict`` the first one raises
        :class:`~urlsieve.RuleSyntaxError`. With ``categories``, only block rules of
        those categories are kept (allow rules all are); the choice is made as each
        rule is read, before duplicates are dropped, so a domain listed in a chosen
        and an unchosen category stays blocked.
        """
        matcher = HashMatcher()
        chosen = frozenset(categories)

        def sink(rule: Rule) -> bool:
            if chosen and rule.action == BLOCK and rule.category not in chosen:
                return True  # read and valid; its category is not selected
            return matcher.add(rule)

        def load(paths: Sequence[PathLike], action: str | None) -> LoadResult:
            return load_lists(
                paths,
                action=action,
                format=format,
                strict=strict,
                progress=progress,
                sink=sink,
            )

        result = load(block, None)
        if allow:
            extra = load(allow, ALLOW)
            result.reports += extra.reports
            result.aliases.update(extra.aliases)
        return cls(matcher, load=result)

    @classmethod
    def load(cls, path: PathLike, *, verify: bool = True) -> Filter:
        """Open a compiled snapshot (``urlsieve compile``) memory-mapped: near-instant, and
        shared by every process that opens it (see :mod:`urlsieve.match.snapshot`)."""
        from urlsieve.match.snapshot import SnapshotFilter

        return SnapshotFilter(path, verify=verify)

    def __len__(self) -> int:
        return len(self._matcher)

    @property
    def rules(self) -> list[Rule]:
        """The rules in force (one per pattern; conflicts resolved)."""
        return self._matcher.rules

    @property
    def reports(self) -> list[ListReport]:
        """Per list file: lines loaded, duplicate, comment, ignored and skipped."""
        return self._load.reports

    @property
    def warnings(self) -> list[Exception]:
        """Every skipped line, as :class:`~urlsieve.RuleSyntaxError` (``source:line: reason``)."""
        return list(self._load.warnings)

    @property
    def aliases(self) -> dict[str, str]:
        """squidGuard alias category → the category it names."""
        return dict(self._load.aliases)

    def check(self, url: str | URL) -> Verdict:
        """The verdict for ``url``; :class:`~urlsieve.InvalidURL` if it has no usable host."""
        return self._matcher.check(url)

    def match(self, url: URL) -> Rule | None:
        """The deciding rule for an already parsed URL (``None``: no rule), without a Verdict.

        The streaming fast path: :func:`urlsieve.parse_url` once, then this.
        """
        return self._matcher.decide(url)

    def check_many(self, urls: Iterable[str | URL]) -> list[Verdict]:
        """Verdicts for many URLs, in order."""
        return self._matcher.check_many(urls)

    def explain(self, url: str | URL) -> Explanation:
        """The canonical URL, the expressions probed (most specific first), the deciding rule."""
        return self._matcher.explain(url)
