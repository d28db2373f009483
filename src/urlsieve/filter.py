"""``urlsieve.Filter``: rule lists in, verdicts and explanations out."""

from __future__ import annotations

import dataclasses
import functools
import os
from collections.abc import Callable, Collection, Iterable, Sequence

from urlsieve.exceptions import InvalidURL
from urlsieve.match.base import Explanation, Matcher, Verdict
from urlsieve.match.snapshot import (
    CompiledImage,
    SnapshotBuilder,
    SnapshotInfo,
    SnapshotMatcher,
    read_snapshot_info,
)
from urlsieve.rules.load import LoadResult, Progress, load_lists
from urlsieve.rules.model import ALLOW, BLOCK, Rule, parse_rule
from urlsieve.rules.readers import ListReport
from urlsieve.url import URL, parse_url

__all__ = ["Filter"]

PathLike = str | os.PathLike[str]
Categories = Collection[str] | None


class Filter:
    """A URL filter: most specific rule wins, ``allow`` on a tie (docs/architecture.md, "Rules").

    >>> f = Filter.from_rules(["evil.com", "@@evil.com/public/"])
    >>> f.check("http://WWW.Evil.COM:80/x").action
    'block'
    >>> f.check("http://evil.com/public/a.html").action
    'allow'
    >>> f.check("http://notevil.com/").action
    'none'
    """

    def __init__(
        self,
        rules: Iterable[Rule] | Matcher = (),
        *,
        load: LoadResult | None = None,
        categories: Categories = None,
    ) -> None:
        """From rules (compiled in memory) or an engine; ``categories``: the categories
        enforced when a call does not choose (``None``: every one)."""
        # An engine is told from rules by its type (isinstance against the protocol would
        # read every member, ``rules`` included: all rules rebuilt).
        self._matcher: Matcher = (
            rules  # type: ignore[assignment]
            if callable(getattr(type(rules), "decide_many", None))
            else SnapshotMatcher.from_rules(rules)  # type: ignore[arg-type]
        )
        self._load = load if load is not None else LoadResult()
        self._categories = None if categories is None else frozenset(categories)
        # check(url) of the default categories in one call: the compiled engine's checker
        # (one URL straight to its verdict), else the engine's check with them
        checker = getattr(self._matcher, "checker", None)
        self._one: Callable[[str | URL], Verdict] = (
            checker(self._categories)
            if checker is not None
            else functools.partial(self._matcher.check, categories=self._categories)
        )

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
        meta: dict[str, object] | None = None,
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
        category stays blocked. The rules are compiled in memory into the snapshot
        format (``meta`` is stored in it); :meth:`select` and the ``categories``
        argument of the lookups choose among the categories read, per call.
        """
        builder = SnapshotBuilder()

        def load(paths: Sequence[PathLike], action: str | None) -> LoadResult:
            return load_lists(
                paths,
                action=action,
                format=format,
                categories=categories or None,
                strict=strict,
                progress=progress,
                sink=builder,
            )

        result = load(block, None)
        if allow:
            result.merge(load(allow, ALLOW))
        meta = {
            **(meta or {}),
            "aliases": dict(result.aliases),
            "selected_categories": list(categories),
        }
        return cls(SnapshotMatcher.from_image(builder.build(meta)), load=result)

    @classmethod
    def load(cls, path: PathLike, *, verify: bool = True) -> Filter:
        """Open a compiled snapshot (``urlsieve compile``) memory-mapped: near-instant, and
        shared by every process that opens it (see :mod:`urlsieve.match.snapshot`)."""
        return cls(SnapshotMatcher(path, verify=verify))

    def save(self, path: PathLike) -> SnapshotInfo:
        """Write the compiled rules as a snapshot file, atomically (``urlsieve compile``)."""
        save: Callable[[PathLike], None] | None = getattr(self._matcher, "save", None)
        if save is None:
            raise TypeError(f"a {self._matcher.name} engine has no compiled image to save")
        save(path)  # the compiled engine writes from its mapping: no copy of the image
        return read_snapshot_info(path)

    def select(self, categories: Categories) -> Filter:
        """This filter enforcing only ``categories`` by default (``None``: every one); the
        rules are shared, not copied."""
        return Filter(self._matcher, load=self._load, categories=categories)

    @property
    def matcher(self) -> Matcher:
        """The engine answering (the compiled one unless built from another engine)."""
        return self._matcher

    @property
    def compiled(self) -> CompiledImage | None:
        """The compiled image with this filter's default categories, as the extension's
        batch calls take it; ``None`` for a reference engine."""
        compiled: Callable[[Categories], CompiledImage] | None = getattr(
            self._matcher, "compiled", None
        )
        return None if compiled is None else compiled(self._categories)

    @property
    def info(self) -> SnapshotInfo | None:
        """The compiled image's header and metadata (``info.path`` is ``""`` in memory);
        ``None`` for a reference engine."""
        info: SnapshotInfo | None = getattr(self._matcher, "info", None)
        return info

    @property
    def selected(self) -> frozenset[str] | None:
        """The categories enforced by default (``None``: every one)."""
        return self._categories

    def close(self) -> None:
        """Release the engine (unmap a snapshot file); safe to call twice."""
        self._matcher.close()

    def __len__(self) -> int:
        return len(self._matcher)

    @property
    def rules(self) -> list[Rule]:
        """The rules held (one per key and category; conflicts within a category resolved)."""
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

    def _chosen(self, categories: Categories) -> Categories:
        return self._categories if categories is None else categories

    def check(self, url: str | URL, categories: Categories = None) -> Verdict:
        """The verdict for ``url``; :class:`~urlsieve.InvalidURL` if it has no usable host.

        ``categories``: enforce only these categories' rules for this call.
        """
        if categories is None:
            return self._one(url)
        return self._matcher.check(url, categories)

    def matching_categories(self, url: str | URL, categories: Categories = None) -> list[str]:
        """Every enforced category with a rule matching ``url`` (block or allow), in the
        order the categories were read; :meth:`check` names the one that decides. One
        lookup per category: for explaining a verdict, not for the request path."""
        parts = url if isinstance(url, URL) else parse_url(url)
        chosen = self._chosen(categories)
        names = getattr(self._matcher, "categories", None)
        mask_of = getattr(self._matcher, "category_mask", None)
        if not isinstance(names, list) or mask_of is None:  # decides on every category at once
            rule = self._matcher.decide(parts, chosen)
            return [] if rule is None else [rule.category]
        mask = mask_of(chosen)
        return [
            name
            for index, name in enumerate(names)
            if (mask is None or mask[index]) and self._matcher.decide(parts, [name]) is not None
        ]

    def match(self, url: URL, categories: Categories = None) -> Rule | None:
        """The deciding rule for an already parsed URL (``None``: no rule), without a Verdict."""
        return self._matcher.decide(url, self._chosen(categories))

    def check_many(self, urls: Iterable[str | URL], categories: Categories = None) -> list[Verdict]:
        """Verdicts for many URLs, in order (one compiled call for the batch)."""
        return self._matcher.check_many(urls, self._chosen(categories))

    def match_many(
        self, urls: Sequence[str | bytes | URL], categories: Categories = None
    ) -> list[Rule | InvalidURL | None]:
        """The streaming batch path: per URL the deciding rule, ``None``, or the
        :class:`~urlsieve.InvalidURL` it raised (a bad URL never stops the batch)."""
        return self._matcher.decide_many(urls, self._chosen(categories))

    def decide_ids(
        self, urls: Sequence[str], categories: Categories = None
    ) -> list[int | InvalidURL]:
        """The batch path without rule objects: per URL the deciding rule's id (:meth:`rule`
        gives the rule), -1 for none, or the :class:`~urlsieve.InvalidURL` it raised.
        :class:`TypeError` for an engine without rule ids (the reference engines)."""
        decide: Callable[..., list[int | InvalidURL]] | None = getattr(
            self._matcher, "decide_ids", None
        )
        if decide is None:
            raise TypeError(f"the {self._matcher.name} engine has no rule ids")
        return decide(urls, self._chosen(categories))

    def provenance(self, rule_id: int) -> tuple[str, str, str | None, int | None]:
        """``(action, category, source, line)`` of the rule with an id :meth:`decide_ids` gave,
        without rebuilding the rule."""
        found: tuple[str, str, str | None, int | None] = self._matcher.provenance(  # type: ignore[attr-defined]
            rule_id
        )
        return found

    def rule(self, rule_id: int) -> Rule:
        """The rule with an id :meth:`decide_ids` gave."""
        rule: Rule = self._matcher.rule(rule_id)  # type: ignore[attr-defined]
        return rule

    def explain(self, url: str | URL, categories: Categories = None) -> Explanation:
        """The canonical URL, the expressions probed (most specific first), the deciding rule
        and every category with a matching rule."""
        explanation = self._matcher.explain(url, self._chosen(categories))
        return dataclasses.replace(explanation, matching=self.matching_categories(url, categories))
