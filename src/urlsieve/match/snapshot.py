"""The compiled rule format, urlsieve's one production matcher.

See docs/architecture.md, "The rule engine".

Rules are compiled into one flat image: hash tables, postings, fixed-size
rule records and their strings. :class:`SnapshotMatcher` answers from such
an image wherever it lies: in memory (``Filter.from_lists`` compiles there)
or in a *snapshot*, the image written to a file (``urlsieve compile``) and
memory-mapped read-only by every helper process, so N processes share one
copy in the page cache and opening costs a header check (plus a checksum
pass at memory speed), whatever the rule count.

Layout (little-endian, sections 64-byte aligned)::

    header    192 bytes: magic, format version, sizes and offsets, body checksum,
              creation time, rule count, host-depth mask, header checksum
    hosts     open-addressing table of 12-byte slots, (xxh3-64(host) u64, path-depth
              mask u32): the pre-check; a host with no rule costs one probe
    exprs     open-addressing table of 12-byte slots, (xxh3-64(host + path[?query])
              u64, postings u32): with the top bit set, the one rule id stored under
              the expression; else where its group starts in the postings array
              (both tables linear probing, key 0 = empty, 60 % full, of any size: a
              key's home slot is its top 32 bits scaled to the table, ``_home``)
    postings  u32: a 0 (so no group starts at 0), then per expression with two rules
              or more, their count and their ids, ascending
    rules     16-byte records: string offset, line, source id, category id, path
              length, host length, flags (allow, exact host, anchored, ip, how the
              pattern is kept, extra); with the extra flag, the offset is an index
              into the extras instead
    extras    20-byte records of the rules whose lengths do not fit theirs (a query,
              a pattern kept as written, a host above 255 or a path above 65,535
              bytes): string offset, lengths of pattern, host, path and query (-1:
              none)
    strings   UTF-8 pattern, host, path and query of every rule
    meta      JSON: sources, categories, aliases, the lists and categories compiled

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

Swapping is atomic: :func:`compile_snapshot` writes a temporary file in the
target's directory, syncs it and renames it over the target, so a reader opens
either the old file or the new one, never a half-written one.
"""

from __future__ import annotations

import contextlib
import json
import math
import mmap
import os
import struct
import threading
import time
from array import array
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple, cast

import numpy as np
import xxhash

from urlsieve._accel import speedups
from urlsieve.exceptions import InvalidURL, SnapshotError
from urlsieve.match.base import Explanation, Verdict
from urlsieve.rules.model import ALLOW, BLOCK, NONE, Rule, rank_of, storage_keys
from urlsieve.rules.readers import LineContext
from urlsieve.store.files import write_atomic
from urlsieve.url import URL, parse_url

__all__ = [
    "CompiledImage",
    "FORMAT_VERSION",
    "MAGIC",
    "SnapshotBuilder",
    "SnapshotError",
    "SnapshotInfo",
    "SnapshotMatcher",
    "compile_snapshot",
    "is_snapshot",
    "open_snapshot",
    "read_snapshot_info",
]

MAGIC = b"URLSNAP\x00"
# 2: rule paths and queries are stored lower-case
# 3: one rule per (key, category), categories chosen per request; 16-bit posting counts
# 4: tables of any size (60 % full; a key's home slot is its top 32 bits scaled)
# 5: 12-byte slots, one rule's id kept in its expression's slot, 16-byte rule records
#    (with extras for the rules whose lengths do not fit): 134 -> 95 bytes a rule
FORMAT_VERSION = 5

# magic, version, header size, file size, body checksum, created, rules,
# host slots, expr slots, postings count, extras count, offsets: hosts, exprs,
# postings, rules, extras, strings, meta; lengths: strings, meta; host-depth mask;
# header checksum.
_HEADER = struct.Struct("<8sIIQQd15Q")
_HEADER_SIZE = 192

# The sections' records as numpy builds them in bulk (packed); _struct_of reads one.
_SLOT = np.dtype([("key", "<u8"), ("value", "<u4")])  # 12 bytes
_RECORD = np.dtype(
    [
        ("offset", "<u4"),
        ("line", "<u4"),
        ("source", "<u2"),
        ("category", "<u2"),
        ("path", "<u2"),
        ("host", "u1"),
        ("flags", "u1"),
    ]
)  # 16 bytes
_EXTRA_RECORD = np.dtype(
    [
        ("offset", "<u4"),
        ("pattern", "<u4"),
        ("host", "<u4"),
        ("path", "<u4"),
        ("query", "<i4"),
    ]
)  # 20 bytes


def _struct_of(dtype: np.dtype) -> struct.Struct:
    """The struct that reads one record of a packed ``dtype`` of integer fields."""
    codes = {"u1": "B", "u2": "H", "u4": "I", "i4": "i", "u8": "Q"}
    names = dtype.names or ()
    return struct.Struct("<" + "".join(codes[dtype[name].str[1:]] for name in names))


_SLOT_STRUCT = _struct_of(_SLOT)
_RULE = _struct_of(_RECORD)
_EXTRA = _struct_of(_EXTRA_RECORD)
_ALIGN = 64
_MAX_LOAD = 0.6
_ONE_RULE = 1 << 31  # an expression slot's value with this bit: the rule id itself
_MAX_RULES = _ONE_RULE - 1
_MAX_SOURCES = 1 << 16
_MAX_STRINGS = (1 << 32) - 1  # string offsets are u32

_F_ALLOW = 1
_F_EXACT_HOST = 2
_F_ANCHORED = 4
_F_IP = 8
_F_PATTERN_HOST = 16  # the pattern as written is the host: not stored
_F_PATTERN_HOST_PATH = 32  # ... the host and path
_F_EXTRA = 64  # the record's offset is an index into the extras

_QUERY_BIT = 1 << 31
_DEEP_BIT = 30  # depths >= 30 share one bit

_hash = xxhash.xxh3_64_intdigest
# The compiled batch lookup and list reader (absent without the extension, or in an
# older build of it), and the table layout.
_match = getattr(speedups, "snapshot_match", None)
# check_many in one call, with verdicts holding rule ids, not rules (reference: its
# Python body). (snapshot_check, verdicts with the rules of the RuleCache, is no longer
# called by check_many.)
_verdicts = getattr(speedups, "snapshot_verdicts", None)
_ACTION_AT = Rule._fields.index("action")
# Rule objects read from the image (reference: SnapshotMatcher.rule's Python body).
_rules = getattr(speedups, "snapshot_rules", None)
#: Rules kept built per process (a hit builds its rule once; the cache is emptied when full).
_RULE_CACHE = 1 << 16
_CACHE_BITS = 17  # the cache's slots: twice as many as it holds rules
_GOLDEN = 0x9E3779B97F4A7C15  # the slot hash: the id times this, mod 2**64, top bits
_compile_lines = getattr(speedups, "compile_lines", None)
_table_place = getattr(speedups, "table_place", None)
#: Lines read per call of the compiled list reader (a progress report each).
_TEXT_CHUNK = 1 << 16


class RuleCache:
    """Rules built from the image, kept per process: an open-addressed table of rule ids
    (``table[0]``: int64, -1 for an empty slot; linear probing from the id's
    multiplicative hash) beside the list of their rules (``table[1]``), 2**bits slots.
    The compiled ``check_many`` reads it as it is (``snapshot_check``, whose probe is the
    same as :meth:`slot`'s), with no int object or dict lookup per URL. At most ``limit``
    rules (fewer than the slots): it is emptied when full.

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


def _h(data: bytes) -> int:
    # 0 marks an empty slot.
    return _hash(data) or 1


def _hs(text: str) -> int:
    return _h(text.encode("utf-8", "surrogatepass"))


def _depth(path: str) -> int:
    depth = path.count("/")
    return depth if depth < _DEEP_BIT else _DEEP_BIT


def _align(n: int) -> int:
    return (n + _ALIGN - 1) // _ALIGN * _ALIGN


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


def _slots(n: int) -> int:
    """The slot count of a table of ``n`` keys: 60 % full (any count: see :func:`_home`)."""
    return max(8, math.ceil(n / _MAX_LOAD))


def _home(keys: Any, slots: int) -> Any:
    """A key's home slot (keys an int or a uint64 array): its top 32 bits scaled to the
    table, so a table needs no power-of-two size (at most 2**32 slots)."""
    if isinstance(keys, int):
        return ((keys >> 32) * slots) >> 32
    return ((keys >> np.uint64(32)) * np.uint64(slots)) >> np.uint64(32)


def _table(keys: np.ndarray, values: np.ndarray, table: np.ndarray | None = None) -> np.ndarray:
    """An open-addressing table of (u64 key, u32 value) slots, linear probing, key 0 =
    empty, in ``table`` (``_slots(len(keys))`` slots of ``_SLOT``, zeroed here) or a new
    array.

    Built in rounds: every key still homeless tries its current slot; of those
    finding it free, the first in input order takes it, the rest (and those finding
    it taken) move one slot on. A key ends where linear probing from its home finds
    it, past occupied slots only. Deterministic: the compiled ``table_place`` lays
    out the same bytes in a loop per round; this vectorised code is its reference.
    """
    slots = _slots(len(keys))
    if table is None:
        table = np.zeros(slots, dtype=_SLOT)
    if _table_place is not None:
        _table_place(
            np.ascontiguousarray(keys, dtype=np.uint64),
            np.ascontiguousarray(values, dtype=np.uint32),
            table,
        )
        return table
    return _table_rounds(keys, values, table)


def _table_rounds(keys: np.ndarray, values: np.ndarray, table: np.ndarray) -> np.ndarray:
    slots = len(table)
    table["key"] = 0
    table["value"] = 0
    occupied = np.zeros(slots, dtype=bool)
    position = _home(np.asarray(keys, dtype=np.uint64), slots).astype(np.int64)
    pending = np.arange(len(keys), dtype=np.int64)
    while pending.size:
        at = position[pending]
        free = ~occupied[at]
        slots_free, first = np.unique(at[free], return_index=True)
        winners = pending[free][first]
        table["key"][slots_free] = keys[winners]
        table["value"][slots_free] = values[winners]
        occupied[slots_free] = True
        placed = np.zeros(len(keys), dtype=bool)
        placed[winners] = True
        pending = pending[~placed[pending]]
        position[pending] = (position[pending] + 1) % slots
    return table


class CompiledImage(NamedTuple):
    """A compiled image as the extension's batch calls take it (``squid_reply``)."""

    view: memoryview
    layout: tuple[int, ...]
    categories: list[str]  # by category id
    sources: list[str]  # by source id ("": none)
    mask: bytes | None  # the categories enforced (one byte per id; None: every one)
    #: Whether a URL no rule of the image decides is undecided for good (False: another
    #: layer, a learned overlay, may still decide it).
    complete: bool = True


@dataclass(frozen=True)
class SnapshotInfo:
    """What an image's header and metadata say (``path`` is ``""`` for one in memory)."""

    path: str
    format_version: int
    version: str  # content id: the body checksum in hex
    created: float
    rules: int
    size: int
    meta: Mapping[str, Any]

    @property
    def compiled_categories(self) -> list[str]:
        """The categories the lists were read for (``[]``: every category)."""
        return list(self.meta.get("selected_categories") or [])

    def as_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "format": self.format_version,
            "version": self.version,
            "created": self.created,
            "rules": self.rules,
            "size": self.size,
            "categories": self.compiled_categories,
        }


class _KeySet:
    """The 64-bit keys a builder has seen: how many of a batch are new.

    Compiled, an open-addressing table of the keys themselves (the exact store's,
    ``exact_insert``), 8 bytes a slot at most 85 % full: a set of Python ints costs
    about 70 bytes a key, which was the largest part of a compile's peak memory.
    Without the extension, that set (the reference).
    """

    _MAX_LOAD = 0.85

    def __init__(self) -> None:
        self._count = 0
        self._table = np.zeros((8, 8), dtype=np.uint64) if speedups is not None else None
        self._set: set[int] = set()
        self._one = np.zeros(1, dtype=np.uint64)  # add_one's key and flag, reused
        self._flag = np.zeros(1, dtype=bool)

    def __len__(self) -> int:
        return self._count if self._table is not None else len(self._set)

    def add_many(self, keys: np.ndarray) -> int:
        """Add uint64 ``keys``; how many were not in the set (repeats in ``keys``: once)."""
        if self._table is None:
            before = len(self._set)
            self._set.update(keys.tolist())
            return len(self._set) - before
        assert speedups is not None
        keys = np.where(keys == 0, np.uint64(1), keys)  # 0 marks an empty slot (1 is 0's twin)
        while (self._count + len(keys)) > self._MAX_LOAD * self._table.size:
            old = self._table[self._table != 0]
            self._table = np.zeros((max(8, 2 * len(self._table)), 8), dtype=np.uint64)
            speedups.exact_insert(self._table, old, np.empty(len(old), dtype=bool))
        added = int(speedups.exact_insert(self._table, keys, np.empty(len(keys), dtype=bool)))
        self._count += added
        return added

    def add_one(self, key: int) -> bool:
        """Add one key; whether it was new (:meth:`add_many` without a batch's arrays)."""
        if self._table is None:
            before = len(self._set)
            self._set.add(key)
            return len(self._set) != before
        if self._count + 1 > self._MAX_LOAD * self._table.size:
            return self.add_many(np.array([key], dtype=np.uint64)) == 1
        assert speedups is not None
        self._one[0] = key or 1
        added = int(speedups.exact_insert(self._table, self._one, self._flag))
        self._count += added
        return added == 1


class SnapshotBuilder:
    """Rules in, an image out; :meth:`add` keeps a rule as a few array entries, not an object.

    ``add`` streams (``load_lists(..., sink=builder)``, which hands runs of plain lines
    to :meth:`add_text`, compiled); :meth:`build` settles conflicts (one rule per key
    and category: ``allow`` wins, else the first read), groups the postings and lays
    out the hash tables with numpy.
    """

    def __init__(self) -> None:
        self._strings = bytearray()
        self._offset = array("Q")
        self._lengths = array("I")  # pattern, host, path per rule
        self._query = array("i")
        self._source = array("I")
        self._line = array("I")
        self._category = array("H")
        self._flags = array("H")
        self._dedup = array("Q")  # xxh3(location \0 category): conflicts are found by it
        self._expr_hash = array("Q")
        self._expr_rule = array("I")
        self._host_hash = array("Q")
        self._host_bits = array("Q")
        self._host_depths = 0
        self._sources: dict[str, int] = {}
        self._categories: dict[str, int] = {}
        self._seen = _KeySet()
        self._built = False

    def __len__(self) -> int:
        return len(self._flags)

    def __call__(self, rule: Rule) -> bool:
        """:meth:`add`: a builder is a rule sink for :func:`~urlsieve.rules.load_lists`,
        which also gives it runs of plain lines through :meth:`add_text`."""
        return self.add(rule)

    def add_text(
        self, text: str, pos: int, mode: int, ctx: LineContext, first_line: int
    ) -> tuple[int, int, int, int, int] | None:
        """The run of plain rule lines of ``text`` from ``pos`` added in one compiled call
        with the action, category and source of ``ctx``
        (:data:`urlsieve.rules.readers.TEXT_MODES` says which lines a mode takes; line
        numbers start at ``first_line``); ``None`` when the line at ``pos`` is not such a
        line, or without the compiled reader: the caller reads it with :meth:`add`.

        Returns ``(pos after the run, lines, comment lines, rules new, duplicates)``; the
        rules are those :meth:`add` would have kept for the same lines, in the same order.
        """
        if self._built:
            raise RuntimeError("this SnapshotBuilder has built its image already")
        if _compile_lines is None:
            return None
        category = ctx.category
        category_id = self._categories.get(category)
        if category_id is None:
            if len(self._categories) > 0xFFFF:
                raise ValueError("more than 65,536 categories")
            category_id = len(self._categories)
        run = _compile_lines(
            text,
            pos,
            mode,
            _TEXT_CHUNK,
            len(self._flags),
            len(self._strings),
            category_id,
            ctx.action == ALLOW,
        )
        if run is None:
            return None
        (end, lines, comments, rules, strings, offsets, lengths, numbers, flags, dedup, keys,
         expr_hash, expr_rule, host_hash, host_bits, depths) = run  # fmt: skip
        if rules:
            self._categories.setdefault(category, category_id)
            if len(self._strings) + len(strings) > _MAX_STRINGS:
                raise ValueError("rule text above 4 GiB: split the lists")
            source_id = self._source_id(ctx.source)
            self._strings += strings
            self._offset.frombytes(offsets)
            self._lengths.frombytes(lengths)
            self._query.frombytes(np.full(rules, -1, "<i4").tobytes())
            self._source.frombytes(np.full(rules, source_id, "<u4").tobytes())
            line = np.frombuffer(numbers, "<u4").astype(np.int64) + first_line
            line[line >= 1 << 32] = 0
            self._line.frombytes(line.astype("<u4").tobytes())
            self._category.frombytes(np.full(rules, category_id, "<u2").tobytes())
            self._flags.frombytes(flags)
            self._dedup.frombytes(dedup)
            self._expr_hash.frombytes(expr_hash)
            self._expr_rule.frombytes(expr_rule)
            self._host_hash.frombytes(host_hash)
            self._host_bits.frombytes(host_bits)
            self._host_depths |= depths
        new = self._seen.add_many(np.frombuffer(keys, np.uint64))
        return end, lines, comments, new, rules - new

    def _source_id(self, source: str | None) -> int:
        """The id of a list file (``""``: none), :class:`ValueError` past 65,536 files."""
        name = source or ""
        source_id = self._sources.get(name)
        if source_id is None:
            if len(self._sources) >= _MAX_SOURCES:
                raise ValueError(f"more than {_MAX_SOURCES:,} list files")
            source_id = self._sources[name] = len(self._sources)
        return source_id

    def add(self, rule: Rule) -> bool:
        """Add one rule; False when a rule with its key was added before (in any category:
        the load reports count it as a duplicate, and it is kept for its category).

        :class:`ValueError` past 65,536 categories or list files, or 4 GiB of rule text.
        """
        if self._built:
            raise RuntimeError("this SnapshotBuilder has built its image already")
        category_id = self._categories.get(rule.category)
        if category_id is None:
            if len(self._categories) > 0xFFFF:
                raise ValueError("more than 65,536 categories")
            category_id = self._categories[rule.category] = len(self._categories)
        source_id = self._source_id(rule.source)
        host_text, path_text, query_text = rule.host, rule.path, rule.query
        host = host_text.encode("utf-8", "surrogatepass")
        rest = path_text.encode("utf-8", "surrogatepass")
        n_path = len(rest)
        if query_text is not None:
            rest += query_text.encode("utf-8", "surrogatepass")
        # The pattern as written is kept only where it is not the host (most domain lines)
        # or the host and path: the rest are rebuilt from those.
        flags = (
            (_F_ALLOW if rule.action == ALLOW else 0)
            | (_F_EXACT_HOST if rule.exact_host else 0)
            | (_F_ANCHORED if rule.anchored else 0)
            | (_F_IP if rule.is_ip else 0)
        )
        written = rule.pattern
        if written == host_text:
            flags |= _F_PATTERN_HOST
            pattern = b""
        elif query_text is None and written == host_text + path_text:
            flags |= _F_PATTERN_HOST_PATH
            pattern = b""
        else:
            pattern = written.encode("utf-8", "surrogatepass")
        strings = self._strings
        offset = len(strings)
        strings += pattern
        strings += host
        strings += rest
        if len(strings) > _MAX_STRINGS:
            raise ValueError("rule text above 4 GiB: split the lists")
        rule_id = len(self._flags)
        self._offset.append(offset)
        self._lengths.extend((len(pattern), len(host), n_path))
        self._query.append(-1 if query_text is None else len(rest) - n_path)
        self._source.append(source_id)
        line = rule.line or 0
        self._line.append(line if 0 <= line < 1 << 32 else 0)
        self._category.append(category_id)
        self._flags.append(flags)
        # What the rule matches, as bytes: host, path, "?" + query, and its shape.
        shape = flags & (_F_EXACT_HOST | _F_ANCHORED) | (query_text is not None) << 4
        key = host + rest + bytes((shape, n_path & 0xFF, len(host) & 0xFF))
        self._dedup.append(_h(key + category_id.to_bytes(2, "little")))
        host_key = _h(host)
        self._host_depths |= 1 << min(host_text.count(".") + 1, 63)
        n_host = len(host_text)
        for expression in storage_keys(rule):
            self._expr_hash.append(_hs(expression))
            self._expr_rule.append(rule_id)
            self._host_hash.append(host_key)
            self._host_bits.append(
                _QUERY_BIT if query_text is not None else 1 << _depth(expression[n_host:])
            )
        # Seen by a 64-bit hash: a collision only miscounts a report, no rule is lost.
        return self._seen.add_one(_h(key))

    def _exact_key(self, rule_id: int) -> tuple[bytes, int, int]:
        """What a rule matches and its category, read back (for a dedup-hash collision)."""
        start = self._offset[rule_id] + self._lengths[3 * rule_id]
        n_host, n_path = self._lengths[3 * rule_id + 1], self._lengths[3 * rule_id + 2]
        n_query = self._query[rule_id]
        text = bytes(self._strings[start : start + n_host + n_path + max(n_query, 0)])
        shape = self._flags[rule_id] & (_F_EXACT_HOST | _F_ANCHORED) | (n_query >= 0) << 8
        return text + b"\0" + f"{n_host},{n_path}".encode(), shape, self._category[rule_id]

    def _kept(self) -> np.ndarray:
        """Which rules stay: per (key, category) the allow, else the first."""
        n = len(self)
        dedup = np.frombuffer(self._dedup, dtype=np.uint64) if n else np.zeros(0, np.uint64)
        keep = np.ones(n, dtype=bool)
        if n < 2:
            return keep
        allow = np.frombuffer(self._flags, dtype=np.uint16) & _F_ALLOW
        order = np.lexsort((np.arange(n), -allow.astype(np.int8), dedup))
        ranked = dedup[order]
        same = np.flatnonzero(ranked[1:] == ranked[:-1])
        if not same.size:
            return keep
        # Runs of one dedup hash (almost always one key and category): the first in
        # (allow first, then read order) wins among rules that really share both.
        starts = same[np.r_[True, same[1:] != same[:-1] + 1]]
        for start in starts.tolist():
            end = start + 1
            while end < n and ranked[end] == ranked[start]:
                end += 1
            winners: set[tuple[bytes, int, int]] = set()
            for rule_id in order[start:end].tolist():
                key = self._exact_key(rule_id)
                if key in winners:
                    keep[rule_id] = False
                else:
                    winners.add(key)
        return keep

    def build(
        self, meta: Mapping[str, Any] | None = None, created: float | None = None
    ) -> bytearray | mmap.mmap:
        """The image (header and body), ready to be written or matched in memory (in
        :func:`image_memory`).

        Laid out in one buffer: the tables and arrays are written in place, and the
        builder's own arrays are let go as they are used, so the peak is about the
        builder's arrays plus the image. A builder builds once: it is empty afterwards.
        """
        if self._built:
            raise RuntimeError("this SnapshotBuilder has built its image already")
        self._built = True
        self._seen = _KeySet()
        keep = self._kept()
        n_total = len(self)
        new_id = np.cumsum(keep, dtype=np.int64) - 1
        n_rules = int(new_id[-1]) + 1 if n_total else 0
        if n_rules > _MAX_RULES:
            raise ValueError(f"{n_rules:,} rules: an image holds at most {_MAX_RULES:,}")

        def column(values: array[int], dtype: str) -> np.ndarray:
            return np.frombuffer(values, dtype=dtype) if len(values) else np.zeros(0, dtype)

        # Postings: rule ids grouped by expression hash, ascending within a group (ids
        # were appended in rule order, and a stable sort keeps that order).
        expr_hash = column(self._expr_hash, "u8")
        expr_rule = column(self._expr_rule, "u4")
        self._expr_hash, self._expr_rule = array("Q"), array("I")
        live = keep[expr_rule]
        expr_hash, expr_rule = expr_hash[live], new_id[expr_rule[live]].astype(np.uint32)
        order = np.argsort(expr_hash, kind="stable")
        expr_hash, postings = expr_hash[order], expr_rule[order]
        del order, expr_rule
        keys, first, counts = _runs(expr_hash)
        del expr_hash
        expr_values, postings = _postings(postings, first, counts)
        del first, counts

        host_hash = column(self._host_hash, "u8")
        host_bits = column(self._host_bits, "u8")
        self._host_hash, self._host_bits = array("Q"), array("Q")
        order = np.argsort(host_hash)  # any order within a host: its masks are ORed
        host_hash, host_bits = host_hash[order], host_bits[order]
        del order
        host_keys, host_first, _ = _runs(host_hash)
        del host_hash
        masks = (
            np.bitwise_or.reduceat(host_bits, host_first)
            if host_first.size
            else np.zeros(0, np.uint64)
        )
        del host_bits, host_first

        flags = column(self._flags, "u2")[keep]
        allow = flags & _F_ALLOW
        meta_blob = json.dumps(
            {
                **(meta or {}),
                "sources": list(self._sources),
                "categories": list(self._categories),
                "actions": {
                    BLOCK: int(np.count_nonzero(allow == 0)),
                    ALLOW: int(np.count_nonzero(allow)),
                },
            },
            sort_keys=True,
        ).encode("utf-8")
        # A record keeps its lengths where they fit (host < 256 and path < 65,536 bytes,
        # no query, the pattern not kept as written); the others' are in an extra.
        lengths = column(self._lengths, "u4").reshape(-1, 3)[keep]
        query = column(self._query, "i4")[keep]
        extra = (lengths[:, 0] > 0) | (query >= 0) | (lengths[:, 1] > 0xFF)
        extra |= lengths[:, 2] > 0xFFFF
        n_extras = int(np.count_nonzero(extra))
        host_slots, expr_slots = _slots(len(host_keys)), _slots(len(keys))
        sizes = [
            host_slots * _SLOT.itemsize,
            expr_slots * _SLOT.itemsize,
            len(postings) * 4,
            n_rules * _RECORD.itemsize,
            n_extras * _EXTRA_RECORD.itemsize,
            len(self._strings),
            len(meta_blob),
        ]
        offsets = []
        position = _HEADER_SIZE
        for size in sizes:
            position = _align(position)
            offsets.append(position)
            position += size
        image = image_memory(position)
        data = np.frombuffer(image, dtype=np.uint8)

        def section(k: int, dtype: Any) -> np.ndarray:
            return data[offsets[k] : offsets[k] + sizes[k]].view(dtype)

        # The rule text first: its copy in the builder goes before the tables are laid out.
        image[offsets[5] : offsets[5] + sizes[5]] = self._strings
        self._strings = bytearray()
        _table(host_keys, masks.astype(np.uint32), section(0, _SLOT))
        del host_keys, masks
        _table(keys, expr_values, section(1, _SLOT))
        del keys, expr_values
        section(2, "<u4")[:] = postings
        del postings
        offset = column(self._offset, "u8")[keep]
        extras = section(4, _EXTRA_RECORD)
        extras["offset"] = offset[extra]
        extras["pattern"] = lengths[extra, 0]
        extras["host"] = lengths[extra, 1]
        extras["path"] = lengths[extra, 2]
        extras["query"] = query[extra]
        records = section(3, _RECORD)
        offset[extra] = np.arange(n_extras)
        records["offset"] = offset
        records["host"] = np.where(extra, 0, lengths[:, 1])
        records["path"] = np.where(extra, 0, lengths[:, 2])
        records["source"] = column(self._source, "u4")[keep]
        records["line"] = column(self._line, "u4")[keep]
        records["category"] = column(self._category, "u2")[keep]
        records["flags"] = flags | np.where(extra, _F_EXTRA, 0).astype(np.uint16)
        del records, extras, offset, lengths, query, extra, flags, allow
        for name in ("_offset", "_lengths", "_query", "_source", "_line", "_category", "_dedup"):
            setattr(self, name, array(getattr(self, name).typecode))
        image[offsets[6] : offsets[6] + sizes[6]] = meta_blob
        header = _HEADER.pack(
            MAGIC,
            FORMAT_VERSION,
            _HEADER_SIZE,
            len(image),
            _hash(memoryview(image)[_HEADER_SIZE:]),
            time.time() if created is None else created,
            n_rules,
            host_slots,
            expr_slots,
            sizes[2] // 4,
            n_extras,
            *offsets,
            sizes[5],
            sizes[6],
            self._host_depths,
        )
        header += struct.pack("<Q", _hash(header))
        image[: len(header)] = header
        return image


def _postings(
    ids: np.ndarray, first: np.ndarray, counts: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The expression slots' values and the postings array, from ``ids`` grouped by
    expression (group ``g`` is ``ids[first[g] : first[g] + counts[g]]``): a group of one
    is its id with the top bit set; a larger one is the index of its count in the
    postings, which start with a 0 and hold each such group as its count and its ids."""
    values = np.empty(len(counts), dtype=np.uint32)
    single = counts == 1
    values[single] = ids[first[single]] | np.uint32(_ONE_RULE)
    many, sizes = ~single, counts[~single]
    starts = np.cumsum(sizes + 1) - sizes  # the 0 first, then per group its count, its ids
    values[many] = starts
    posted = int(sizes.sum())
    postings = np.zeros(1 + posted + len(sizes), dtype=np.uint32)
    postings[starts] = sizes
    if len(sizes):
        # per id of a large group: its place in the group, then where it goes and comes from
        place = np.arange(posted) - np.repeat(np.cumsum(sizes) - sizes, sizes)
        postings[np.repeat(starts + 1, sizes) + place] = ids[np.repeat(first[many], sizes) + place]
    return values, postings


def _runs(ordered: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``np.unique(ordered, return_index=True, return_counts=True)`` of a sorted array,
    without the sort ``np.unique`` makes again (time, and copies at a compile's peak)."""
    if not ordered.size:
        empty = np.zeros(0, np.int64)
        return ordered[:0], empty, empty
    first = np.flatnonzero(np.concatenate(([True], ordered[1:] != ordered[:-1])))
    counts = np.diff(np.append(first, ordered.size))
    return ordered[first], first, counts


#: A compiled image in memory: a mapped file, or what :func:`image_memory` gives.
Image = bytes | bytearray | mmap.mmap

#: Images from this size on get memory of their own (see image_memory).
_OWN_MAPPING = 4 << 20


def image_memory(size: int) -> bytearray | mmap.mmap:
    """Zeroed, writable memory for an image of ``size`` bytes.

    A large one is a private anonymous mapping with transparent huge pages asked for
    (``MADV_HUGEPAGE``; Linux's default, ``madvise``, gives them only when asked). A
    lookup reads three to six places at random in an image of about 95 bytes a rule, and
    with 4 KiB pages each read also waits for a page-table walk: at 1M rules (format 4)
    the batch lookup took about 0.55 µs a URL in a ``bytearray`` and 0.48 µs with huge
    pages. Where the system has no huge pages the mapping is plain memory, as a
    ``bytearray`` is.
    """
    private = getattr(mmap, "MAP_PRIVATE", None)
    anonymous = getattr(mmap, "MAP_ANONYMOUS", None)
    if size < _OWN_MAPPING or private is None or anonymous is None:
        return bytearray(size)
    memory = mmap.mmap(-1, size, flags=private | anonymous)
    advice = getattr(mmap, "MADV_HUGEPAGE", None)
    if advice is not None:
        with contextlib.suppress(OSError):  # a kernel without huge pages: plain pages
            memory.madvise(advice)
    return memory


def build_image(
    rules: Iterable[Rule], meta: Mapping[str, Any] | None = None
) -> bytearray | mmap.mmap:
    """The compiled image of ``rules`` (see :class:`SnapshotBuilder`)."""
    builder = SnapshotBuilder()
    for rule in rules:
        builder.add(rule)
    return builder.build(meta)


def write_image(image: Image | memoryview, path: str | os.PathLike[str]) -> None:
    """Write ``image`` at ``path`` atomically and durably (temporary file, fsync, rename,
    directory fsync: :func:`urlsieve.store.files.write_atomic`)."""

    def refuse(exc: OSError, target: Path, doing: str) -> SnapshotError:
        return SnapshotError(str(target), f"cannot write: {exc.strerror or exc}")

    write_atomic(path, image, translate=refuse)


def compile_snapshot(
    rules: Iterable[Rule] | SnapshotBuilder,
    path: str | os.PathLike[str],
    *,
    meta: Mapping[str, Any] | None = None,
) -> SnapshotInfo:
    """Compile ``rules`` (or a filled :class:`SnapshotBuilder`) into a snapshot at ``path``,
    replacing any file there atomically. ``meta`` is stored as JSON (lists, categories…)."""
    image = rules.build(meta) if isinstance(rules, SnapshotBuilder) else build_image(rules, meta)
    write_image(image, path)
    header = _parse_header(str(path), image[:_HEADER_SIZE], len(image))
    meta_off = header.offsets[6]
    return SnapshotInfo(
        str(path),
        FORMAT_VERSION,
        f"{header.checksum:016x}",
        header.created,
        header.rules,
        len(image),
        json.loads(image[meta_off : meta_off + header.meta_len]),
    )


@dataclass(frozen=True)
class _Header:
    version: int
    file_size: int
    checksum: int
    created: float
    rules: int
    host_slots: int
    expr_slots: int
    postings: int
    extras: int
    offsets: tuple[int, ...]
    strings_len: int
    meta_len: int
    host_depths: int


def _parse_header(path: str, head: bytes | bytearray, actual_size: int) -> _Header:
    if len(head) < _HEADER_SIZE:
        raise SnapshotError(path, f"truncated: {actual_size} bytes, shorter than the header")
    if head[:8] != MAGIC:
        raise SnapshotError(
            path,
            "not a urlsieve snapshot (bad magic); compile one with "
            "`urlsieve compile --lists PATH... -o FILE`",
        )
    fields = _HEADER.unpack_from(head)
    version = fields[1]
    if version != FORMAT_VERSION:
        raise SnapshotError(
            path,
            f"snapshot format version {version}, this urlsieve reads version {FORMAT_VERSION}: "
            "recompile it with this version's `urlsieve compile`",
        )
    (stored,) = struct.unpack_from("<Q", head, _HEADER.size)
    if _hash(head[: _HEADER.size]) != stored:
        raise SnapshotError(path, "corrupt header (checksum mismatch)")
    header = _Header(
        version=version,
        file_size=fields[3],
        checksum=fields[4],
        created=fields[5],
        rules=fields[6],
        host_slots=fields[7],
        expr_slots=fields[8],
        postings=fields[9],
        extras=fields[10],
        offsets=tuple(fields[11:18]),
        strings_len=fields[18],
        meta_len=fields[19],
        host_depths=fields[20],
    )
    if actual_size != header.file_size:
        raise SnapshotError(
            path,
            f"truncated or extended: {actual_size} bytes, the header says {header.file_size}",
        )
    return header


def read_snapshot_info(path: str | os.PathLike[str], *, verify: bool = False) -> SnapshotInfo:
    """The header and metadata of a snapshot (``verify`` also checks the body checksum)."""
    with SnapshotMatcher(path, verify=verify) as matcher:
        return matcher.info


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
        where = name or self.path
        mm = self._mm
        header = _parse_header(where, mm[:_HEADER_SIZE], size)
        if verify and _hash(memoryview(mm)[_HEADER_SIZE:]) != header.checksum:
            raise SnapshotError(where, "corrupt: the body checksum does not match")
        hosts_off, exprs_off, postings_off, rules_off, extras_off, strings_off, meta_off = (
            header.offsets
        )
        ends = [
            (hosts_off, header.host_slots * _SLOT.itemsize),
            (exprs_off, header.expr_slots * _SLOT.itemsize),
            (postings_off, header.postings * 4),
            (rules_off, header.rules * _RULE.size),
            (extras_off, header.extras * _EXTRA.size),
            (strings_off, header.strings_len),
            (meta_off, header.meta_len),
        ]
        for offset, length in ends:
            if offset < _HEADER_SIZE or offset % 8 or offset + length > size:
                raise SnapshotError(where, "corrupt: a section lies outside the file")
        for slots in (header.host_slots, header.expr_slots):
            if not 1 <= slots <= 1 << 32:
                raise SnapshotError(where, f"corrupt: a table of {slots:,} slots")
        try:
            meta = json.loads(mm[meta_off : meta_off + header.meta_len])
            sources = [str(s) for s in meta["sources"]]
            categories = [str(c) for c in meta["categories"]]
        except (ValueError, KeyError, TypeError) as exc:
            raise SnapshotError(where, f"corrupt metadata: {exc}") from exc
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
        self._sources = sources
        self._categories = categories
        self._category_ids = {c: i for i, c in enumerate(categories)}
        aliases = meta.get("aliases") or {}
        self._aliases = (
            {str(k): str(v) for k, v in aliases.items()} if isinstance(aliases, dict) else {}
        )
        self._masks: dict[frozenset[str], bytes] = {}
        self._rule_cache = RuleCache()
        self._closed = False
        self._names: tuple[tuple[str, ...], tuple[str, ...]] | None = None
        # What the compiled batch path needs to find each section (checked again in C).
        self._layout = (
            hosts_off,
            header.host_slots,
            exprs_off,
            header.expr_slots,
            postings_off,
            header.postings,
            rules_off,
            header.rules,
            extras_off,
            header.extras,
            strings_off,
            header.strings_len,
            header.host_depths,
        )
        self.info = SnapshotInfo(
            self.path,
            header.version,
            f"{header.checksum:016x}",
            header.created,
            header.rules,
            header.file_size,
            meta,
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
        if type(url) is str and _verdicts is not None:
            # one URL, straight to the compiled call check_many makes (the HTTP service and
            # Scrapy's middleware check URLs one by one: every frame counts)
            mask = None if categories is None else self.category_mask(categories)
            return self._verdicts_compiled([url], mask)[0]
        if type(url) is str and _match is not None:
            # the compiled batch path with one URL: a fraction of the per-expression
            # Python probes of decide()
            return self.check_many([url], categories)[0]
        parts = url if isinstance(url, URL) else parse_url(url)
        return Verdict.of(self.decide(parts, categories), parts.canonical)

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
            url: str | URL = batch[at]
            try:
                parts = url if isinstance(url, URL) else parse_url(url)
            except InvalidURL as exc:
                # as the reference: every URL parsed (another error raises at once), then
                # the first invalid one raises
                invalid = invalid or exc
                continue
            best = self._best(parts, None, mask)
            verdicts[at] = (
                Verdict(NONE, None, parts.canonical)
                if best < 0
                else Verdict.deferred(self.action_of(best), best, parts.canonical, self)
            )
        if invalid is not None:
            raise invalid
        return verdicts

    def explain(self, url: str | URL, categories: Collection[str] | None = None) -> Explanation:
        parts = url if isinstance(url, URL) else parse_url(url)
        probes: list[str] = []
        rule_id = self._best(parts, probes, self.category_mask(categories))
        rule = None if rule_id < 0 else self.rule(rule_id)
        return Explanation(str(url), parts.canonical, Verdict.of(rule, parts.canonical), probes)


def is_snapshot(path: str | os.PathLike[str]) -> bool:
    """True when ``path`` is a file that starts like a snapshot (any format version)."""
    try:
        with open(path, "rb") as fh:
            return fh.read(len(MAGIC)) == MAGIC
    except OSError:
        return False


def open_snapshot(path: str | os.PathLike[str], *, verify: bool = True) -> SnapshotMatcher:
    """Open a compiled snapshot (raises :class:`SnapshotError` naming the problem)."""
    return SnapshotMatcher(path, verify=verify)
