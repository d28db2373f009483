"""Building compiled images: rules in, an image out, written atomically.

:class:`SnapshotBuilder` takes rules one by one (:meth:`~SnapshotBuilder.add`) or runs of
plain list lines in one compiled call (:meth:`~SnapshotBuilder.add_text`), and lays out
the image of :mod:`~urlsieve.match.snapshot.format` in one buffer (:func:`image_memory`).
:func:`compile_snapshot` writes it as a snapshot file: a temporary file in the target's
directory, synced and renamed over the target, so a reader opens either the old file or
the new one, never a half-written one. The output is deterministic: the same rules and
metadata (and creation time) give the same bytes, compiled or in pure Python.
"""

from __future__ import annotations

import contextlib
import json
import mmap
import os
import struct
import time
from array import array
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from urlsieve._accel import speedups
from urlsieve.exceptions import SnapshotError
from urlsieve.match.snapshot.format import (
    _EXTRA_RECORD,
    _F_ALLOW,
    _F_ANCHORED,
    _F_EXACT_HOST,
    _F_EXTRA,
    _F_IP,
    _F_PATTERN_HOST,
    _F_PATTERN_HOST_PATH,
    _HEADER,
    _HEADER_SIZE,
    _LONE_HOST,
    _MAX_RULES,
    _MAX_SOURCES,
    _MAX_STRINGS,
    _ONE_RULE,
    _QUERY_BIT,
    _RECORD,
    _SLOT,
    FORMAT_VERSION,
    MAGIC,
    Image,
    SnapshotInfo,
    _align,
    _depth,
    _h,
    _hash,
    _home,
    _hs,
    _parse_header,
    _slots,
)
from urlsieve.rules.model import ALLOW, BLOCK, Rule, storage_keys
from urlsieve.rules.readers import LineContext
from urlsieve.store.files import write_atomic

__all__ = [
    "SnapshotBuilder",
    "build_image",
    "compile_snapshot",
    "image_memory",
    "write_image",
]

# The compiled list reader and table layout (absent without the extension, or in an
# older build of it).
_compile_lines = getattr(speedups, "compile_lines", None)
_table_place = getattr(speedups, "table_place", None)
#: Lines read per call of the compiled list reader (a progress report each).
_TEXT_CHUNK = 1 << 16


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
        # (the host entries run beside the expression entries: one per expression)
        host_keys, masks = _host_values(
            column(self._host_hash, "u8")[live], column(self._host_bits, "u8")[live], expr_rule
        )
        self._host_hash, self._host_bits = array("Q"), array("Q")
        del live
        order = np.argsort(expr_hash, kind="stable")
        expr_hash, postings = expr_hash[order], expr_rule[order]
        del order, expr_rule
        keys, first, counts = _runs(expr_hash)
        del expr_hash
        expr_values, postings = _postings(postings, first, counts)
        del first, counts

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
        _table(host_keys, masks, section(0, _SLOT))
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


def _host_values(
    hashes: np.ndarray, bits: np.ndarray, ids: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The host table's keys and values, from one entry per stored expression (its host's
    hash, its depth bit, its rule's id): a host whose entries all name one rule keeps
    that id with the top bit set (a lookup reads the rule, no expression slot); any other
    its path-depth mask, the OR of its entries' bits."""
    order = np.argsort(hashes, kind="stable")
    hashes, bits, ids = hashes[order], bits[order], ids[order]
    del order
    host_keys, first, _ = _runs(hashes)
    if not first.size:
        return host_keys, np.zeros(0, np.uint32)
    masks = np.bitwise_or.reduceat(bits, first).astype(np.uint32)
    lone = np.minimum.reduceat(ids, first) == np.maximum.reduceat(ids, first)
    masks[lone] = ids[first[lone]] | np.uint32(_LONE_HOST)
    return host_keys, masks


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
