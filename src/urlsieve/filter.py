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

        ``block`` lists are read as block lists (``@@`` lines are allow rules) and
        ``allow`` lists as allow lists: a list is what it is named as, whatever a
        squidGuard ``usage`` file says. A white-usage category (an allow list, such
        as UT1's ``liste_bu``) inside a block tree is skipped unless selected by
        name, and reported in :attr:`skipped`. Bad lines are skipped and kept in
        :attr:`warnings`; with ``strict`` the first one raises
        :class:`~urlsieve.RuleSyntaxError`. With ``categories``, only those
        categories of the trees are read, in block and allow trees alike (an alias
        such as UT1's ``porn`` selects the category it points to); a list file or a
        category directory named on its own is always read. Unselected categories
        are not read at all, so a domain listed in a chosen and an unchosen
        category stays blocked.
        """
        matcher = HashMatcher()

        def load(paths: Sequence[PathLike], action: str | None) -> LoadResult:
            return load_lists(
                paths,
                action=action,
                format=format,
                categories=categories or None,
                strict=strict,
                progress=progress,
                sink=matcher.add,
            )

        result = load(block, None)
        if allow:
            extra = load(allow, ALLOW)
            result.reports += extra.reports
            result.aliases.update(extra.aliases)
            result.skipped += extra.skipped
            for name, where in extra.categories.items():
                result.categories.setdefault(name, where)
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

    @property
    def categories(self) -> dict[str, str]:
        """Every category found in the trees read, loaded or not (name → directory)."""
        return dict(self._load.categories)

    @property
    def skipped(self) -> list[str]:
        """Categories of trees not loaded, each with the reason."""
        return list(self._load.skipped)

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
