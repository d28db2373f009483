"""Answering from a compiled image: :class:`SnapshotMatcher`, urlsieve's one production
matcher.

The image (:mod:`~urlsieve.match.snapshot.format`) lies in memory (``Filter.from_lists``
compiles there) or in a snapshot file, memory-mapped read-only by every helper process,
so N processes share one copy in the page cache and opening costs a header check (plus
a checksum pass at memory speed), whatever the rule count.

**Categories are chosen per request.** The image keeps one rule per
``(key, category)`` (on a conflict within a category ``allow`` wins, else the
first read), and every lookup takes the set of categories to enforce (all
when none is given): rules of other categories are passed over. Within the
chosen categories the verdict is the one of a filter loaded from those
categories only (``tests/match/test_snapshot_engine.py`` checks it).

Matching gives the verdicts of the reference matcher (``HashMatcher``,
docs/architecture.md, "Rules"; the differential tests hold the two equal): for each host
suffix, most specific first, every path expression whose depth occurs at that
host is probed (:func:`~urlsieve.rules.model.storage_keys` says where a rule
is stored); candidates are checked against the rule's own fields (so a 64-bit
hash collision cannot produce a wrong match) and the highest
:func:`~urlsieve.rules.model.rank_of` at the first host level with a match
wins, the lowest rule id (first read) on a tie.

Batches run in C when ``urlsieve._speedups`` is built (``snapshot_match``):
canonical fast path, hashing, probing and rule checks in one call per batch,
rule ids out; a URL off the fast path is parsed by :func:`~urlsieve.parse_url`
and matched by :meth:`SnapshotMatcher._best`, the reference.
"""

from __future__ import annotations

import functools
import mmap
import os
import threading
from array import array
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from typing import Any, cast

import numpy as np

from urlsieve._accel import speedups
from urlsieve.exceptions import InvalidURL, SnapshotError
from urlsieve.match.base import Explanation, Verdict
from urlsieve.match.snapshot.build import build_image, write_image
from urlsieve.match.snapshot.format import (
    _DEEP_BIT,
    _EXTRA,
    _F_ALLOW,
    _F_ANCHORED,
    _F_EXACT_HOST,
    _F_EXTRA,
    _F_IP,
    _F_PATTERN_HOST,
    _F_PATTERN_HOST_PATH,
    _HEADER_SIZE,
    _LONE_HOST,
    _ONE_RULE,
    _QUERY_BIT,
    _RULE,
    _SLOT,
    _SLOT_STRUCT,
    CompiledImage,
    Image,
    SnapshotInfo,
    _depth,
    _home,
    _hs,
    read_image,
)
from urlsieve.rules.model import ALLOW, BLOCK, NONE, Rule, rank_of
from urlsieve.url import URL, parse_url

__all__ = ["RuleCache", "SnapshotMatcher", "open_snapshot", "read_snapshot_info"]

# The compiled batch lookup (absent without the extension, or in an older build of it).
_match = getattr(speedups, "snapshot_match", None)
# check_many in one call, with verdicts holding rule ids, not rules (reference: its
# Python body).
_verdicts = getattr(speedups, "snapshot_verdicts", None)
# One URL's verdict in one call, its categories fixed (SnapshotMatcher.checker; reference:
# SnapshotMatcher._verdict_py).
_checker = getattr(speedups, "snapshot_checker", None)
# Rule objects read from the image (reference: SnapshotMatcher.rule's Python body).
_rules = getattr(speedups, "snapshot_rules", None)
#: Rules kept built per process (a hit builds its rule once; the cache is emptied when full).
_RULE_CACHE = 1 << 16
_CACHE_BITS = 17  # the cache's slots: twice as many as it holds rules
_GOLDEN = 0x9E3779B97F4A7C15  # the slot hash: the id times this, mod 2**64, top bits


class RuleCache:
    """Rules built from the image, kept per process: an open-addressed table of rule ids
    (``table[0]``: int64, -1 for an empty slot; linear probing from the id's
    multiplicative hash) beside the list of their rules (``table[1]``), 2**bits slots.
    (The layout was made for a compiled reader, since removed: the verdicts now hold rule
    ids and :meth:`SnapshotMatcher.rule` fills this cache.) At most ``limit`` rules (fewer
    than the slots): it is emptied when full.

    Threads: ``table`` is one attribute, replaced whole when the cache is emptied, so a
    reader takes ids and rules of one table; writers take a lock, and write a slot's rule
    before its id (a reader between the two finds the slot empty)."""

    __slots__ = ("_bits", "_by_id", "_limit", "_lock", "get", "table")

    def __init__(self, limit: int = _RULE_CACHE, bits: int = _CACHE_BITS) -> None:
        if not 0 < limit < 1 << bits or bits > 40:
            raise ValueError(f"a cache of {limit} rules takes more than 2**{bits} slots")
        self._limit, self._bits = limit, bits
        self._lock = threading.Lock()
        self.clear()

    def clear(self) -> None:
        with self._lock:
            self._clear()

    def _clear(self) -> None:
        size = 1 << self._bits
        self.table: tuple[array[int], list[Rule | None]] = (array("q", [-1]) * size, [None] * size)
        # The same rules by id, for Python's lookups (a dict lookup is a fraction of a
        # probe written in Python); the table is what the compiled reader reads.
        self._by_id: dict[int, Rule] = {}
        self.get: Callable[[int], Rule | None] = self._by_id.get

    def __len__(self) -> int:
        return len(self._by_id)

    def slot(self, rule_id: int, ids: array[int] | None = None) -> int:
        """Where ``rule_id`` is in ``ids`` (the table's by default), or the empty slot where
        it would go."""
        ids = self.table[0] if ids is None else ids
        mask = (1 << self._bits) - 1
        at = (rule_id * _GOLDEN & 0xFFFF_FFFF_FFFF_FFFF) >> (64 - self._bits)
        for _ in range(mask + 1):  # (bounded as the C probe is; a slot is always empty)
            if ids[at] == rule_id or ids[at] == -1:
                break
            at = (at + 1) & mask
        return at

    def put(self, rule_id: int, rule: Rule) -> None:
        if not 0 <= rule_id < 1 << 63:
            raise ValueError(f"rule id {rule_id} out of range")
        with self._lock:
            if rule_id not in self._by_id and len(self._by_id) >= self._limit:
                self._clear()
            ids, rules = self.table
            at = self.slot(rule_id, ids)
            rules[at] = rule  # the rule first: see the class doc
            ids[at] = rule_id
            self._by_id[rule_id] = rule


def _suffix_starts(url: URL) -> Iterator[tuple[int, int]]:
    """``(start, labels)`` of the host, then of every parent at a label boundary (an
    address has only itself), without building a string: linear in the host's length.

    Like the reference matcher, no Public Suffix List work per request: no rule
    can be a bare public suffix, so probing ``com`` finds nothing and is harmless.
    """
    host = url.host
    labels = host.count(".") + 1
    yield 0, labels
    if url.is_ip or host.startswith("["):
        return
    at = host.find(".")
    while at >= 0:
        labels -= 1
        yield at + 1, labels
        at = host.find(".", at + 1)


def _path_candidates(path: str, query: str | None) -> list[tuple[int, int, bool]]:
    """``(end, depth bit, is the exact path)`` of what a host's rules are probed with, most
    specific first: the path with its query (end -1), the path, each prefix ending at a
    ``/``. Ends, not strings: a prefix is cut only when its depth is in the rule set."""
    out: list[tuple[int, int, bool]] = []
    if query is not None:
        out.append((-1, _QUERY_BIT, True))
    slashes = path.count("/")
    out.append((len(path), 1 << min(slashes, _DEEP_BIT), True))
    depth = slashes - 1 if path.endswith("/") else slashes
    cut = path.rfind("/", 0, len(path) - 1)
    while cut >= 0:
        out.append((cut + 1, 1 << min(depth, _DEEP_BIT), False))
        depth -= 1
        cut = path.rfind("/", 0, cut)
    return out


class SnapshotMatcher:
    """A compiled image, in memory or memory-mapped from a snapshot file; a
    :class:`~urlsieve.match.base.Matcher`.

    ``SnapshotMatcher(path)`` maps a file; ``verify`` (default) checks the body
    checksum on open: one pass at memory speed, which also faults the pages into
    the shared page cache. :meth:`from_rules` compiles in memory.
    """

    name = "snapshot"

    def __init__(self, path: str | os.PathLike[str], *, verify: bool = True) -> None:
        self.path = str(path)
        try:
            with open(self.path, "rb") as fh:
                size = os.fstat(fh.fileno()).st_size
                if size < _HEADER_SIZE:
                    raise SnapshotError(
                        self.path, f"truncated: {size} bytes, shorter than the header"
                    )
                self._mm: Image = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
        except OSError as exc:
            raise SnapshotError(self.path, f"cannot open: {exc.strerror or exc}") from exc
        try:
            self._open(size, verify)
        except BaseException:
            self.close()
            raise

    @classmethod
    def from_image(cls, image: Image, *, name: str = "<memory>") -> SnapshotMatcher:
        """A matcher over an image in memory (:class:`SnapshotBuilder`'s output)."""
        matcher = cls.__new__(cls)
        matcher.path = ""
        matcher._mm = image
        matcher._open(len(image), verify=False, name=name)
        return matcher

    @classmethod
    def from_rules(
        cls, rules: Iterable[Rule], *, meta: Mapping[str, Any] | None = None
    ) -> SnapshotMatcher:
        """Compile ``rules`` into memory: the same format and code as a snapshot file."""
        return cls.from_image(build_image(rules, meta))

    def _open(self, size: int, verify: bool, name: str | None = None) -> None:
        mm = self._mm
        checked = read_image(name or self.path, mm, size, verify=verify)
        header = checked.header
        hosts_off, exprs_off, postings_off, rules_off, extras_off, strings_off, _meta = (
            header.offsets
        )
        view = memoryview(mm)
        self._view = view
        self._hosts = view[hosts_off : hosts_off + header.host_slots * _SLOT.itemsize]
        self._exprs = view[exprs_off : exprs_off + header.expr_slots * _SLOT.itemsize]
        self._postings = view[postings_off : postings_off + header.postings * 4].cast("I")
        self._host_slots = header.host_slots
        self._expr_slots = header.expr_slots
        self._rules_off = rules_off
        self._extras_off = extras_off
        self._strings_off = strings_off
        self._host_depths = header.host_depths
        self._header = header
        self._sources = checked.sources
        self._categories = checked.categories
        self._category_ids = {c: i for i, c in enumerate(checked.categories)}
        self._aliases = checked.aliases
        self._masks: dict[frozenset[str], bytes] = {}
        self._rule_cache = RuleCache()
        self._closed = False
        self._names: tuple[tuple[str, ...], tuple[str, ...]] | None = None
        # What the compiled batch path needs to find each section (checked again in C).
        self._layout = checked.sections
        self.info = SnapshotInfo(
            self.path,
            header.version,
            f"{header.checksum:016x}",
            header.created,
            header.rules,
            header.file_size,
            checked.meta,
        )

    # -- lifecycle -------------------------------------------------------------------------

    def close(self) -> None:
        """Unmap the file (views are released first; safe to call twice). An image in
        memory (:meth:`from_image`) is the caller's: only the views of it are released.
        A verdict made before still reads its rule (:meth:`rule` after close)."""
        self._closed = True
        for name in ("_hosts", "_exprs", "_postings", "_view"):
            view = getattr(self, name, None)
            if view is not None:
                view.release()
        if self.path and isinstance(self._mm, mmap.mmap):
            self._mm.close()

    def __enter__(self) -> SnapshotMatcher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __len__(self) -> int:
        return self._header.rules

    @property
    def image(self) -> bytes:
        """The whole compiled image (header and body), as written to a snapshot file."""
        return bytes(self._mm)

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the image as a snapshot file, atomically, from the mapping (no copy)."""
        write_image(self._view, path)

    @property
    def categories(self) -> list[str]:
        """The categories of the rules held, in the order first read."""
        return list(self._categories)

    @property
    def aliases(self) -> dict[str, str]:
        """squidGuard alias category → the category it names, as compiled in the image."""
        return dict(self._aliases)

    @property
    def rules(self) -> list[Rule]:
        """Every rule held (one per key and category), in the order read."""
        return [self.rule(i) for i in range(len(self))]

    def compiled(self, categories: Collection[str] | None = None) -> CompiledImage:
        """The image as the extension's batch calls take it, enforcing ``categories``."""
        return CompiledImage(
            self._view,
            self._layout,
            self._categories,
            self._sources,
            self.category_mask(categories),
        )

    # -- categories ------------------------------------------------------------------------

    def category_mask(self, categories: Collection[str] | None) -> bytes | None:
        """One byte per category id, 1 where enforced (``None``: every category).

        Names may be squidGuard aliases (UT1's ``porn`` for ``adult``); a name the
        image does not have enforces nothing (no rule of it exists here).
        """
        if categories is None:
            return None
        key = frozenset(categories)
        mask = self._masks.get(key)
        if mask is None:
            chosen = bytearray(len(self._categories))
            for name in key:
                at = self._category_ids.get(self._aliases.get(name, name))
                if at is not None:
                    chosen[at] = 1
            if len(self._masks) >= 256:
                self._masks.clear()
            mask = self._masks[key] = bytes(chosen)
        return mask

    # -- lookups ---------------------------------------------------------------------------

    @staticmethod
    def _probe(table: memoryview, slots: int, text: str) -> int:
        """The value stored for ``text`` in an open-addressing table (0: absent)."""
        key = _hs(text)
        i = _home(key, slots)
        read = _SLOT_STRUCT.unpack_from
        for _ in range(slots):
            slot, value = read(table, i * _SLOT_STRUCT.size)
            if slot == key:
                return int(value)
            if slot == 0:
                return 0
            i = i + 1 if i + 1 < slots else 0
        return 0

    def _record(self, rule_id: int) -> tuple[int, int, int, int, int, int, int, int, int]:
        """``(string offset, lengths of pattern, host, path and query (-1: none), source id,
        line, category id, flags)`` of a rule, from its record and, with ``_F_EXTRA``, its
        extra (:class:`~urlsieve.exceptions.SnapshotError` if that is not in the image)."""
        if not 0 <= rule_id < self._header.rules:
            raise IndexError(f"rule id {rule_id} out of range ({self._header.rules} rules)")
        offset, line, source, category, n_path, n_host, flags = _RULE.unpack_from(
            self._mm, self._rules_off + rule_id * _RULE.size
        )
        n_pat, n_query = 0, -1
        if flags & _F_EXTRA:
            if offset >= self._header.extras:
                raise SnapshotError(self.path or "<memory>", f"corrupt: rule {rule_id}'s extra")
            offset, n_pat, n_host, n_path, n_query = _EXTRA.unpack_from(
                self._mm, self._extras_off + offset * _EXTRA.size
            )
        return offset, n_pat, n_host, n_path, n_query, source, line, category, flags

    def rule(self, rule_id: int) -> Rule:
        """The rule with this id, rebuilt from the image (kept in a small per-process cache).

        After :meth:`close` (a verdict's rule read late): from the image in memory, or from
        the file mapped again for the read, if it is still the same snapshot
        (:class:`SnapshotError` when it has been replaced since)."""
        cached = self._rule_cache.get(rule_id)
        if cached is not None:
            return cached
        if self._closed:
            return self._rule_after_close(rule_id)
        if _rules is not None:
            self._cache_rules([rule_id])
            cached = self._rule_cache.get(rule_id)
            if cached is not None:
                return cached
        return self._rule_py(rule_id)

    def _rule_after_close(self, rule_id: int) -> Rule:
        if not (self.path and isinstance(self._mm, mmap.mmap)):  # in memory: still there
            return self._rule_py(rule_id)
        with SnapshotMatcher(self.path, verify=False) as again:
            if again._header.checksum != self._header.checksum:
                raise SnapshotError(
                    self.path,
                    f"closed, and replaced since: rule {rule_id} of the snapshot that was "
                    "open is gone (read a verdict's rule before closing its filter)",
                )
            rule = again.rule(rule_id)
        self._rule_cache.put(rule_id, rule)
        return rule

    def _cache_rules(self, ids: list[int]) -> None:
        """Put the rules of ``ids`` in the cache, read in one compiled call (those it leaves,
        with strings that are not ASCII, :meth:`rule` builds in Python)."""
        if _rules is None or not ids:
            return
        names = self._names
        if names is None:
            names = self._names = (tuple(self._categories), tuple(self._sources))
        built: list[Rule | None] = _rules(
            self._view, self._layout, ids, names[0], names[1], Rule, ALLOW, BLOCK
        )
        put = self._rule_cache.put
        for rule_id, rule in zip(ids, built, strict=True):
            if rule is not None:
                put(rule_id, rule)

    def _rule_py(self, rule_id: int) -> Rule:
        """:meth:`rule` in Python: the reference of ``snapshot_rules``."""
        off, n_pat, n_host, n_path, n_query, source_id, line, category_id, flags = self._record(
            rule_id
        )
        start = self._strings_off + off
        raw = self._mm[start : start + n_pat + n_host + n_path + max(n_query, 0)]
        a, b, c = n_pat, n_pat + n_host, n_pat + n_host + n_path
        if raw.isascii():  # almost every rule: one decode, then slices
            text = raw.decode("ascii")
            pattern, host, path = text[:a], text[a:b], text[b:c]
            query = None if n_query < 0 else text[c:]
        else:
            pattern = raw[:a].decode("utf-8", "surrogatepass")
            host = raw[a:b].decode("ascii", "surrogateescape")
            path = raw[b:c].decode("utf-8", "surrogatepass")
            query = None if n_query < 0 else raw[c:].decode("utf-8", "surrogatepass")
        if flags & _F_PATTERN_HOST:
            pattern = host
        elif flags & _F_PATTERN_HOST_PATH:
            pattern = host + path
        exact_host, anchored = bool(flags & _F_EXACT_HOST), bool(flags & _F_ANCHORED)
        allow = bool(flags & _F_ALLOW)
        path_len = len(path) if query is None else len(path) + len(query) + 1
        # The Rule tuple made directly (its __new__ checks what the compiler checked).
        rule: Rule = tuple.__new__(
            Rule,
            (
                pattern,
                ALLOW if allow else BLOCK,
                self._categories[category_id],
                host,
                path,
                query,
                exact_host,
                anchored,
                bool(flags & _F_IP),
                self._sources[source_id] or None,
                line or None,
                rank_of(len(host), path_len, anchored, exact_host, allow),
            ),
        )
        self._rule_cache.put(rule_id, rule)
        return rule

    def provenance(self, rule_id: int) -> tuple[str, str, str | None, int | None]:
        """``(action, category, source, line)`` of a rule, without rebuilding it."""
        _o, _p, _h, _pa, _q, source_id, line, category_id, flags = self._record(rule_id)
        return (
            ALLOW if flags & _F_ALLOW else BLOCK,
            self._categories[category_id],
            self._sources[source_id] or None,
            line or None,
        )

    def _best(self, url: URL, probes: list[str] | None, mask: bytes | None = None) -> int:
        """The deciding rule's id (-1: none), the reference of ``snapshot_match`` in C.

        Linear in the URL: host levels and path prefixes are cut out of the URL only
        at the depths the rule set has.
        """
        host_depths = self._host_depths
        full_host = url.host
        path = url.path.lower()  # rule paths are lower-case: matching ignores case
        query = None if url.query is None else url.query.lower()
        candidates: list[tuple[int, int, bool]] | None = None
        for level, (start, labels) in enumerate(_suffix_starts(url)):
            if not host_depths >> min(labels, 63) & 1 and (level or probes is None):
                continue  # no rule has a host with this many labels (the URL's own is shown)
            host = full_host[start:]
            depths = self._probe(self._hosts, self._host_slots, host)
            if depths & _LONE_HOST:
                depths = self._lone_depths(depths ^ _LONE_HOST)
            if not depths:
                if probes is not None:
                    probes.append(f"{host} (no rules for this host)")
                continue
            if candidates is None:
                candidates = _path_candidates(path, query)
            best: tuple[int, int] | None = None
            for end, bit, exact_path in candidates:
                if not depths & bit:
                    continue
                suffix = f"{path}?{query}" if end < 0 else path[:end]
                expr = host + suffix
                if probes is not None:
                    probes.append(expr)
                value = self._probe(self._exprs, self._expr_slots, expr)
                if not value:
                    continue
                if value & _ONE_RULE:
                    ids: Sequence[int] = (value ^ _ONE_RULE,)
                elif value < len(self._postings):
                    ids = self._postings[value + 1 : value + 1 + self._postings[value]]
                else:
                    continue  # a damaged image
                for rule_id in ids:
                    rank = self._candidate(rule_id, host, suffix, exact_path, level, mask)
                    if rank is not None and (best is None or rank > best[0]):
                        best = (rank, rule_id)
            if best is not None:
                return best[1]
        return -1

    def _lone_depths(self, rule_id: int) -> int:
        """The path-depth mask of a host whose one rule is ``rule_id`` (the bits of that
        rule's expressions, :func:`~urlsieve.rules.model.storage_keys`), 0 for an id or
        extra not in the image. The compiled lookup reads such a host's rule straight
        away; this reference probes the expressions, as for any host."""
        if not 0 <= rule_id < self._header.rules:
            return 0
        try:
            off, n_pat, n_host, n_path, n_query, _src, _line, _category, flags = self._record(
                rule_id
            )
        except SnapshotError:
            return 0
        if n_query >= 0:
            return _QUERY_BIT
        start = self._strings_off + off + n_pat + n_host
        path = bytes(self._mm[start : start + n_path]).decode("latin-1")  # (its "/"s)
        depths = 1 << _depth(path)
        if not flags & _F_ANCHORED and not path.endswith("/"):
            depths |= 1 << _depth(path + "/")
        return depths

    def _candidate(  # noqa: PLR0917 (the C loop's arguments, in its order)
        self,
        rule_id: int,
        host: str,
        suffix: str,
        exact_path: bool,
        level: int,
        mask: bytes | None,
    ) -> int | None:
        """The rank of the rule if it really matches here, else None (a rule for another
        host level, path form or category, or a 64-bit hash collision)."""
        off, n_pat, n_host, n_path, n_query, _src, _line, category, flags = self._record(rule_id)
        if flags & (_F_EXACT_HOST | _F_IP) and level:
            return None
        anchored = flags & _F_ANCHORED
        if anchored and not exact_path:
            return None
        if mask is not None and not (category < len(mask) and mask[category]):
            return None
        start = self._strings_off + off + n_pat
        stored = self._mm[start : start + n_host + n_path + max(n_query, 0)]
        expr = (host + suffix).encode("utf-8", "surrogatepass")
        if n_query >= 0:
            ok = expr == stored[: n_host + n_path] + b"?" + stored[n_host + n_path :]
        elif len(expr) == n_host + n_path:
            ok = expr == stored
        else:  # the "/ads" rule stored under "/ads/"
            ok = not anchored and expr == stored + b"/"
        if not ok:
            return None
        path_len = n_path if n_query < 0 else n_path + n_query + 1
        return rank_of(
            n_host, path_len, bool(anchored), bool(flags & _F_EXACT_HOST), bool(flags & _F_ALLOW)
        )

    def decide(self, url: URL, categories: Collection[str] | None = None) -> Rule | None:
        """The deciding rule for a parsed URL, ``None`` when no rule matches."""
        rule_id = self._best(url, None, self.category_mask(categories))
        return None if rule_id < 0 else self.rule(rule_id)

    def check(self, url: str | URL, categories: Collection[str] | None = None) -> Verdict:
        mask = None if categories is None else self.category_mask(categories)
        if type(url) is str and _verdicts is not None:
            # one URL, the compiled call check_many makes (a caller checking URL after URL
            # with the same categories keeps a checker(): one call, no list, no layout read)
            return self._verdicts_compiled([url], mask)[0]
        return self._verdict_py(mask, url)

    def checker(self, categories: Collection[str] | None = None) -> Callable[[str | URL], Verdict]:
        """:meth:`check` with ``categories`` fixed, for one URL at a time: a callable taking
        the URL and giving its verdict (as :meth:`check_many` makes it) in one compiled
        call, with no batch to build (``Filter`` keeps one for its categories: that is
        ``Filter.check``). An :class:`InvalidURL` raises, as in :meth:`check`. Without the
        extension, :meth:`_verdict_py` (the reference).

        A new one each call, for the caller to keep: the checker holds this matcher, and the
        matcher keeps none, so no reference cycle delays the unmapping of a dropped one."""
        mask = self.category_mask(categories)
        reference = functools.partial(self._verdict_py, mask)
        if _checker is None:
            return reference
        found: Callable[[str | URL], Verdict] = _checker(
            self._view, self._layout, mask, Verdict, NONE, ALLOW, BLOCK, self, reference
        )
        return found

    def _verdict_py(self, mask: bytes | None, url: str | URL) -> Verdict:
        """One URL's verdict, parsed and matched in Python: the reference of the compiled
        checker (``snapshot_checker``), and what it and ``check_many`` leave to Python."""
        parts = url if isinstance(url, URL) else parse_url(url)
        best = self._best(parts, None, mask)
        if best < 0:
            return Verdict(NONE, None, parts.canonical)
        return Verdict.deferred(self.action_of(best), best, parts.canonical, self)

    def match_ids(
        self, urls: list[str], mask: bytes | None = None, canonical: list[str | None] | None = None
    ) -> list[int]:
        """Rule ids for canonical-fast-path URLs in one compiled call: -1 no rule, -2 off the
        fast path (the caller parses it); with ``canonical`` (a list as long as ``urls``),
        each fast-path URL's canonical form is stored in it. Pure Python: every URL is -2."""
        if _match is None:
            return [-2] * len(urls)
        out = np.empty(len(urls), dtype=np.int64)
        _match(self._view, self._layout, urls, mask, out, canonical)
        ids: list[int] = out.tolist()
        return ids

    def _ids(
        self, urls: Sequence[str | bytes | URL], mask: bytes | None, forms: list[str | None] | None
    ) -> list[int | InvalidURL]:
        """Per URL the deciding rule's id, -1 for none, or its :class:`InvalidURL`: the
        compiled call, then the Python path for what it left (-2). With ``forms`` (a list as
        long as ``urls``), the canonical forms are stored in it (``None``: invalid)."""
        out: list[int | InvalidURL]
        left: list[int]
        if _match is None:
            out, left = [-2] * len(urls), list(range(len(urls)))
        else:
            ids = np.empty(len(urls), dtype=np.int64)
            batch = urls if type(urls) is list else list(urls)
            try:
                n_left = _match(self._view, self._layout, batch, mask, ids, forms)
            except TypeError:  # not every URL a str: the others are parsed below
                texts = [u if type(u) is str else "" for u in urls]
                n_left = _match(self._view, self._layout, texts, mask, ids, forms)
            out = cast("list[int | InvalidURL]", ids.tolist())  # InvalidURLs go in below
            # (numpy's search costs microseconds even for one URL: skipped when none is left)
            left = np.flatnonzero(ids == -2).tolist() if n_left else []
        for at in left:
            url = urls[at]  # off the fast path (or not a str): parsed here
            try:
                parts = url if isinstance(url, URL) else parse_url(url)
            except InvalidURL as exc:
                out[at] = exc
                continue
            out[at] = self._best(parts, None, mask)
            if forms is not None:
                forms[at] = parts.canonical
        return out

    def _batch(
        self, urls: Sequence[str | bytes | URL], mask: bytes | None
    ) -> list[Rule | InvalidURL | None]:
        """Per URL the deciding rule, ``None`` or its :class:`InvalidURL`."""
        out: list[Rule | InvalidURL | None] = []
        ids = self._ids(urls, mask, None)
        if _rules is not None:  # the rules not cached yet, built in one call
            get = self._rule_cache.get
            self._cache_rules([i for i in ids if type(i) is int and i >= 0 and get(i) is None])
        get = self._rule_cache.get  # (a new dict when that filled the cache)
        for rule_id in ids:
            if isinstance(rule_id, InvalidURL):
                out.append(rule_id)
            elif rule_id >= 0:
                out.append(get(rule_id) or self.rule(rule_id))
            else:
                out.append(None)
        return out

    def ids_by_rows(
        self,
        urls: Sequence[str],
        masks: bytes,
        rows: Sequence[int],
        forms: list[str | None] | None = None,
    ) -> list[int | InvalidURL]:
        """:meth:`_ids` with a mask per URL, in one compiled call: ``masks`` holds rows of
        one byte per category, URL ``k`` is matched with the row at ``rows[k]`` (its
        index). The Python path (:meth:`_best`) answers what the compiled one leaves."""
        stride = len(self._categories)
        n = len(urls)
        out: list[int | InvalidURL]
        if _match is None or not all(type(u) is str for u in urls):
            out = [-2] * n
        else:
            ids = np.empty(n, dtype=np.int64)
            offsets = np.asarray(rows, dtype=np.int64) * stride
            _match(self._view, self._layout, list(urls), masks, ids, forms, offsets, stride)
            out = list(ids.tolist())
        for at, rule_id in enumerate(out):
            if rule_id != -2:
                continue
            url = urls[at]
            try:
                parts = url if isinstance(url, URL) else parse_url(url)
            except InvalidURL as exc:
                out[at] = exc
                continue
            row = rows[at] * stride
            out[at] = self._best(parts, None, masks[row : row + stride])
            if forms is not None:
                forms[at] = parts.canonical
        return out

    def decide_ids(
        self, urls: Sequence[str], categories: Collection[str] | None = None
    ) -> list[int | InvalidURL]:
        """Per URL the deciding rule's id (:meth:`rule` gives the rule), -1 for none, or the
        :class:`InvalidURL` it raised: the batch path without rule objects."""
        return self._ids(urls, self.category_mask(categories), None)

    def decide_many(
        self, urls: Sequence[str | bytes | URL], categories: Collection[str] | None = None
    ) -> list[Rule | InvalidURL | None]:
        """Per URL the deciding rule, ``None``, or the :class:`InvalidURL` it raised: one
        batch never stops at a bad URL. The batch path; no verdict objects are built."""
        return self._batch(urls, self.category_mask(categories))

    def check_many(
        self, urls: Iterable[str | URL], categories: Collection[str] | None = None
    ) -> list[Verdict]:
        """Verdicts in order; an invalid URL raises :class:`InvalidURL`, as in :meth:`check`.

        A verdict with a rule holds the rule's id, and this engine to build the rule from
        when its ``rule`` is read (:meth:`Verdict.deferred`): no rule object is made for a
        caller that reads the action alone. Compiled: :meth:`_verdicts_compiled`. This
        method's Python body is its reference: the batch path (:meth:`_ids`), then one pass
        making the verdicts.
        """
        batch = urls if isinstance(urls, list) else list(urls)
        mask = self.category_mask(categories)
        if _verdicts is not None:
            return self._verdicts_compiled(batch, mask)
        action_of = self.action_of
        deferred = Verdict.deferred
        forms: list[str | None] = [None] * len(batch)
        ids = self._ids(batch, mask, forms)
        out: list[Verdict] = []
        append = out.append
        for rule_id, canonical in zip(ids, forms, strict=True):
            if isinstance(rule_id, InvalidURL):
                raise rule_id
            assert canonical is not None  # (a form for every valid URL)
            if rule_id < 0:
                append(Verdict(NONE, None, canonical))
            else:
                append(deferred(action_of(rule_id), rule_id, canonical, self))
        return out

    def action_of(self, rule_id: int) -> str:
        """The action of a rule (``allow`` or ``block``), from its record's flags alone."""
        if not 0 <= rule_id < self._header.rules:
            raise IndexError(f"rule id {rule_id} out of range ({self._header.rules} rules)")
        flags = self._mm[self._rules_off + rule_id * _RULE.size + _RULE.size - 1]
        return ALLOW if flags & _F_ALLOW else BLOCK

    def _verdicts_compiled(self, batch: list[str | URL], mask: bytes | None) -> list[Verdict]:
        """check_many in one compiled call, which leaves the URLs off the fast path (or not a
        str) to this method."""
        assert _verdicts is not None
        found: tuple[list[Verdict], list[int]] = _verdicts(
            self._view, self._layout, batch, mask, Verdict, NONE, ALLOW, BLOCK, self
        )
        verdicts, left = found
        invalid: InvalidURL | None = None
        for at in left:  # off the fast path: parsed here
            try:
                verdicts[at] = self._verdict_py(mask, batch[at])
            except InvalidURL as exc:
                # as the reference: every URL parsed (another error raises at once), then
                # the first invalid one raises
                invalid = invalid or exc
        if invalid is not None:
            raise invalid
        return verdicts

    def explain(self, url: str | URL, categories: Collection[str] | None = None) -> Explanation:
        parts = url if isinstance(url, URL) else parse_url(url)
        probes: list[str] = []
        rule_id = self._best(parts, probes, self.category_mask(categories))
        rule = None if rule_id < 0 else self.rule(rule_id)
        return Explanation(str(url), parts.canonical, Verdict.of(rule, parts.canonical), probes)


def open_snapshot(path: str | os.PathLike[str], *, verify: bool = True) -> SnapshotMatcher:
    """Open a compiled snapshot (raises :class:`SnapshotError` naming the problem)."""
    return SnapshotMatcher(path, verify=verify)


def read_snapshot_info(path: str | os.PathLike[str], *, verify: bool = False) -> SnapshotInfo:
    """The header and metadata of a snapshot (``verify`` also checks the body checksum)."""
    with SnapshotMatcher(path, verify=verify) as matcher:
        return matcher.info
