"""The seed patent's segmented hash table (seed 000), faithfully, with its own semantics.

Build (steps S1–S2 of the patent):

- every blacklist URL, scheme removed, is split at ``/``; its *class* is the
  number of separators (1, 2, or 3 and more; the end of a URL that does not
  end in ``/`` counts as one, so ``www.taobao.com`` is class 1 and
  ``image.baidu.com/channel`` class 2, as in the patent's example);
- the table's ``size`` buckets are split between the classes in proportion
  to their sizes (``num_i = size × ratio_i``, or the ratios given), class
  ``i`` using buckets ``offset_i … offset_i + num_i``;
- a URL goes to bucket ``_hf(key) % num_i + offset_i``, where ``key`` is
  the URL up to its third separator and ``_hf`` the patent's hash
  ``Σ c·3·i`` over its bytes (1-based ``i``, C ``int`` arithmetic with
  signed ``char``);
- a bucket holds a list of *prefix nodes*, each keyed by the 16-bit prefix
  value (the first two bytes, ``url[0] << 8 | url[1]``), each holding the
  list of URLs with that prefix.

Lookup (steps T1–T2): the request, scheme removed and otherwise **as
received**, is hashed at its first, second and third separator (never
beyond); the buckets are probed from the shortest prefix up; in a bucket
the prefix values are compared first, then each stored URL no longer than
the request's prefix is compared as a raw string prefix of it; the first
match decides.

Its semantics, not urlsieve's (the contract tests mark each difference):

- no canonicalisation: case, ports, userinfo, percent-escapes, IP spellings
  and dot tricks all evade it (``canonical=True`` canonicalises requests
  first, to separate the two effects in benchmarks);
- no subdomain matching: ``evil.com`` does not cover ``www.evil.com``;
- a rule deeper than three separators never matches (the request is not
  hashed past its third separator), and a query string is part of the last
  segment it is attached to, so ``evil.com?x`` misses ``evil.com``;
- ``/p/`` and ``/p`` are the same rule, exact-host (``=``), anchors and
  exact queries are ignored: the stored string is ``host/path``;
- it is a blacklist structure. urlsieve's extension: allow rules go into a
  second table consulted first (a whitelist hit allows, whatever blocks).

The patent's flow chart (step T2-6) gives up when the first bucket is
non-empty but does not match; its worked example 2 goes on to the next
bucket. This follows the worked example (and the project's reading of it): the first match
anywhere decides. The worked example's bucket indices cannot be reproduced
with the ``_hf`` it prints (``_hf("www.taobao.com") = 30801``, not 73229);
its prefix values can (``www`` → 30583, ``im`` → 26989) and are tested.
"""

from __future__ import annotations

import operator
from collections.abc import Collection, Iterable, Sequence

from urlsieve.match.base import ReferenceMatcher, Verdict
from urlsieve.rules.model import ALLOW, Rule
from urlsieve.url import URL, canonicalize

__all__ = ["SegmentedTable", "hf", "prefix_value", "split_levels"]

_MASK = 0xFFFFFFFF


def hf(text: str) -> int:
    """The patent's ``_hf`` before ``% size``: ``|Σ c·3·i|``, 32-bit C ``int``, signed char."""
    data = text.encode("utf-8", "surrogateescape")
    total: int = 3 * sum(map(operator.mul, data, range(1, len(data) + 1)))
    if data and not data.isascii():
        total -= 3 * 256 * sum(i for i, c in enumerate(data, 1) if c >= 0x80)
    total &= _MASK
    if total >= 0x80000000:
        total -= 0x100000000
    return -total if total < 0 else total


def prefix_value(text: str) -> int:
    """The patent's 16-bit prefix value: the first two bytes, ``url[0] << 8 | url[1]``."""
    data = text.encode("utf-8", "surrogateescape")[:2]
    if not data:
        return 0
    return (data[0] << 8 | (data[1] if len(data) > 1 else 0)) & 0xFFFF


def split_levels(location: str) -> list[str]:
    """The URL (scheme removed) up to each of its first three separators.

    >>> split_levels("www.taobao.com/market/nvzhuang/x")
    ['www.taobao.com', 'www.taobao.com/market', 'www.taobao.com/market/nvzhuang']
    """
    out: list[str] = []
    at = location.find("/")
    while at >= 0 and len(out) < 3:
        out.append(location[:at])
        at = location.find("/", at + 1)
    if len(out) < 3 and location and not location.endswith("/"):
        out.append(location)
    return out


def _strip_scheme(url: str) -> str:
    at = url.find("://")
    return url[at + 3 :] if at >= 0 else url


def rule_location(rule: Rule) -> str:
    """What the patent stores for a rule: ``host`` or ``host/path`` (no trailing ``/``)."""
    text = rule.host + ("" if rule.path == "/" else rule.path)
    if rule.query is not None:
        text += f"?{rule.query}"
    return text.rstrip("/")


class _Table:
    """One segmented table (the blacklist; urlsieve adds a whitelist beside it)."""

    def __init__(self, rules: Sequence[Rule], size: int, ratios: Sequence[float] | None) -> None:
        entries = []
        counts = [0, 0, 0]
        for rule in rules:
            location = rule_location(rule)
            levels = split_levels(location)
            if not levels:
                continue
            cls = len(levels)  # 1, 2 or 3 (3 = three or more separators)
            counts[cls - 1] += 1
            entries.append((cls, levels[-1], location, rule))
        total = sum(counts)
        if ratios is None:
            ratios = [c / total if total else 0.0 for c in counts]
        if len(ratios) != 3:
            raise ValueError("ratios must give one share per class (three numbers)")
        self.num = [int(size * r) for r in ratios]
        for i, count in enumerate(counts):
            if count and self.num[i] == 0:
                self.num[i] = 1  # a class with URLs needs at least one bucket
        self.offset = [0, self.num[0], self.num[0] + self.num[1]]
        # bucket → list of [prefix value, list of (stored string, rule)]
        self.buckets: list[list[tuple[int, list[tuple[str, Rule]]]] | None] = [None] * sum(self.num)
        self.counts = counts
        self.collisions = 0
        for cls, key, location, rule in entries:
            self._insert(cls, key, location, rule)

    def index(self, cls: int, key: str) -> int:
        return hf(key) % self.num[cls - 1] + self.offset[cls - 1]

    def _insert(self, cls: int, key: str, location: str, rule: Rule) -> None:
        at = self.index(cls, key)
        prefix = prefix_value(location)
        bucket = self.buckets[at]
        if bucket is None:
            self.buckets[at] = [(prefix, [(location, rule)])]
            return
        self.collisions += 1
        for value, urls in bucket:
            if value == prefix:
                urls.append((location, rule))
                return
        bucket.append((prefix, [(location, rule)]))

    def lookup(self, levels: list[str], prefix: int) -> Rule | None:
        num = self.num
        buckets = self.buckets
        for cls, text in enumerate(levels, 1):
            size = num[cls - 1]
            if not size:
                continue
            bucket = buckets[hf(text) % size + self.offset[cls - 1]]
            if bucket is None:
                continue
            for value, urls in bucket:
                if value != prefix:
                    continue
                for stored, rule in urls:
                    if len(text) >= len(stored) and text.startswith(stored):
                        return rule
        return None


class SegmentedTable(ReferenceMatcher):
    """The seed patent's table; see the module docstring for its (different) semantics."""

    name = "patent"

    def __init__(
        self,
        rules: Iterable[Rule],
        *,
        size: int | None = None,
        ratios: Sequence[float] | None = None,
        canonical: bool = False,
    ) -> None:
        rules = list(rules)
        block = [r for r in rules if r.action != ALLOW]
        allow = [r for r in rules if r.action == ALLOW]
        self.size = size if size is not None else max(16, int(len(rules) * 0.8))
        self.canonical = canonical
        self._count = len(rules)
        self._rules = rules
        self.black = _Table(block, self.size, ratios)
        self.white = _Table(allow, max(16, int(self.size * len(allow) / max(1, len(rules)))), None)

    def __len__(self) -> int:
        return self._count

    @property
    def rules(self) -> list[Rule]:
        return list(self._rules)

    def _lookup(self, location: str) -> Rule | None:
        levels = split_levels(location)
        prefix = prefix_value(location)
        rule = self.white.lookup(levels, prefix) if self.white.counts != [0, 0, 0] else None
        if rule is None:
            rule = self.black.lookup(levels, prefix)
        return rule

    def _decide(self, url: URL, trace: list[str] | None = None) -> Rule | None:
        return self._lookup(url.location)

    def check(self, url: str | URL, categories: Collection[str] | None = None) -> Verdict:
        """The patent's verdict: on the raw string (canonicalised only with ``canonical``)."""
        self._every(categories)
        if isinstance(url, URL):
            location = url.location
        else:
            location = _strip_scheme(canonicalize(url) if self.canonical else url)
        return Verdict.of(self._lookup(location), location)
