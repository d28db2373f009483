"""The URL decomposition tree: the baseline the seed patent compares itself against.

A URL is decomposed into items — host labels from the top-level domain
down, then path segments — and rules hang on the nodes of a tree of those
items. A lookup walks the tree along the request's items and keeps the best
rule met on the way (:attr:`Rule.rank`), so it has the reference matcher's
semantics exactly (the differential test checks this) with a tree's cost:
one dict step per label and per segment, however few rules there are.
"""

from __future__ import annotations

from collections.abc import Iterable

from urlsieve.match.base import ReferenceMatcher, better, resolve_rules
from urlsieve.rules.model import Rule
from urlsieve.url import URL

__all__ = ["DecompositionTree"]


class _PathNode:
    """A path segment. ``prefix``: ``/a`` (covers ``/a`` and below); ``dir``: ``/a/``;
    ``exact``: anchored ``/a|``; ``query``: ``/a?q``."""

    __slots__ = ("children", "dir", "exact", "prefix", "query")

    def __init__(self) -> None:
        self.children: dict[str, _PathNode] = {}
        self.prefix: Rule | None = None
        self.dir: Rule | None = None
        self.exact: Rule | None = None
        self.query: dict[str, Rule] | None = None

    def descend(self, segments: list[str]) -> _PathNode:
        node = self
        for segment in segments:
            child = node.children.get(segment)
            if child is None:
                child = node.children[segment] = _PathNode()
            node = child
        return node

    def add(self, rule: Rule) -> None:
        path = rule.path
        if rule.query is not None:
            node = self.descend(path[1:].split("/"))
            if node.query is None:
                node.query = {}
            node.query[rule.query] = better(node.query.get(rule.query), rule)
        elif rule.anchored:
            node = self.descend(path[1:].split("/"))
            node.exact = better(node.exact, rule)
        elif path == "/":
            self.prefix = better(self.prefix, rule)
        elif path.endswith("/"):
            node = self.descend(path[1:-1].split("/"))
            node.dir = better(node.dir, rule)
        else:
            node = self.descend(path[1:].split("/"))
            node.prefix = better(node.prefix, rule)

    def best(self, segments: list[str], query: str | None, best: Rule | None) -> Rule | None:
        node = self
        if node.prefix is not None:
            best = better(best, node.prefix)
        last = len(segments) - 1
        for i, segment in enumerate(segments):
            child = node.children.get(segment)
            if child is None:
                break
            node = child
            if node.prefix is not None:
                best = better(best, node.prefix)
            if i < last:
                if node.dir is not None:
                    best = better(best, node.dir)
            else:
                if node.exact is not None:
                    best = better(best, node.exact)
                if node.query is not None and query is not None:
                    rule = node.query.get(query)
                    if rule is not None:
                        best = better(best, rule)
        return best


class _HostNode:
    __slots__ = ("children", "exact", "sub")

    def __init__(self) -> None:
        self.children: dict[str, _HostNode] = {}
        self.sub: _PathNode | None = None
        self.exact: _PathNode | None = None


def _labels(host: str, is_ip: bool) -> list[str]:
    """Tree items of a host: labels from the top down (an address is one item)."""
    if is_ip or host.startswith("["):
        return [host]
    return host.split(".")[::-1]


class DecompositionTree(ReferenceMatcher):
    """Host labels, then path segments, one tree node each; see the module docstring."""

    name = "tree"

    def __init__(self, rules: Iterable[Rule]) -> None:
        self._rules = resolve_rules(rules)
        self._root = _HostNode()
        for rule in self._rules:
            node = self._root
            for label in _labels(rule.host, rule.is_ip):
                child = node.children.get(label)
                if child is None:
                    child = node.children[label] = _HostNode()
                node = child
            if rule.exact_host or rule.is_ip:
                if node.exact is None:
                    node.exact = _PathNode()
                node.exact.add(rule)
            else:
                if node.sub is None:
                    node.sub = _PathNode()
                node.sub.add(rule)

    def __len__(self) -> int:
        return len(self._rules)

    @property
    def rules(self) -> list[Rule]:
        return list(self._rules)

    def _decide(self, url: URL, trace: list[str] | None = None) -> Rule | None:
        labels = _labels(url.host, url.is_ip)
        segments = url.path.lower()[1:].split("/")  # rule paths are lower-case
        query = None if url.query is None else url.query.lower()
        best: Rule | None = None
        node = self._root
        last = len(labels) - 1
        for i, label in enumerate(labels):
            child = node.children.get(label)
            if child is None:
                break
            node = child
            if node.sub is not None:
                best = node.sub.best(segments, query, best)
            if i == last and node.exact is not None:
                best = node.exact.best(segments, query, best)
        return best
