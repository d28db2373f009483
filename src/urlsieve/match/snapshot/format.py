"""The compiled rule format on disk and in memory: its constants, header and layout.

What a compiled image is, byte for byte, and how a reader checks one before using it;
:mod:`~urlsieve.match.snapshot.build` writes images, :mod:`~urlsieve.match.snapshot.matcher`
answers from them, and the extension's lookups (``urlsieve/_speedups.c``) read the same
layout (they take the section offsets and sizes :func:`read_image` checked, and check them
again).

Layout (little-endian, sections 64-byte aligned)::

    header    192 bytes: magic, format version, sizes and offsets, body checksum,
              creation time, rule count, host-depth mask, header checksum
    hosts     open-addressing table of 12-byte slots, (xxh3-64(host) u64, u32): with the
              top bit set, the one rule id of a host with one rule (the lookup reads
              that rule, no expression probed); else the host's path-depth mask. The
              pre-check: a host with no rule costs one probe
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

A reader takes only :data:`FORMAT_VERSION`; an older file is refused with the command
that rebuilds it (``urlsieve compile``).
"""

from __future__ import annotations

import json
import math
import mmap
import os
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
import xxhash

from urlsieve.exceptions import SnapshotError

MAGIC = b"URLSNAP\x00"
# 2: rule paths and queries are stored lower-case
# 3: one rule per (key, category), categories chosen per request; 16-bit posting counts
# 4: tables of any size (60 % full; a key's home slot is its top 32 bits scaled)
# 5: 12-byte slots, one rule's id kept in its expression's slot, 16-byte rule records
#    (with extras for the rules whose lengths do not fit): 134 -> 95 bytes a rule
# 6: a host with one rule keeps its id in its host slot (a hit on it reads no expression
#    slot); the query and deep bits of a path-depth mask move down one
FORMAT_VERSION = 6

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

_LONE_HOST = 1 << 31  # a host slot's value with this bit: its one rule's id
_QUERY_BIT = 1 << 30
_DEEP_BIT = 29  # depths >= 29 share one bit

_hash = xxhash.xxh3_64_intdigest

#: A compiled image in memory: a mapped file, or what
#: :func:`~urlsieve.match.snapshot.build.image_memory` gives.
Image = bytes | bytearray | mmap.mmap


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


def _slots(n: int) -> int:
    """The slot count of a table of ``n`` keys: 60 % full (any count: see :func:`_home`)."""
    return max(8, math.ceil(n / _MAX_LOAD))


def _home(keys: Any, slots: int) -> Any:
    """A key's home slot (keys an int or a uint64 array): its top 32 bits scaled to the
    table, so a table needs no power-of-two size (at most 2**32 slots)."""
    if isinstance(keys, int):
        return ((keys >> 32) * slots) >> 32
    return ((keys >> np.uint64(32)) * np.uint64(slots)) >> np.uint64(32)


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


@dataclass(frozen=True)
class ImageLayout:
    """A checked image: its header, its metadata, and where each section lies."""

    header: _Header
    meta: dict[str, Any]
    sources: list[str]  # by source id ("": none)
    categories: list[str]  # by category id
    aliases: dict[str, str]  # squidGuard alias category -> the category it names

    @property
    def sections(self) -> tuple[int, ...]:
        """What the compiled lookups take to find each section (checked again in C):
        offsets and sizes of hosts, exprs, postings, rules, extras, strings, and the
        host-depth mask."""
        header = self.header
        hosts_off, exprs_off, postings_off, rules_off, extras_off, strings_off, _meta = (
            header.offsets
        )
        return (
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


def read_image(where: str, image: Image, size: int, *, verify: bool) -> ImageLayout:
    """Check an image of ``size`` bytes (its header, that every section lies inside it,
    the tables' sizes, its metadata; ``verify``: the body checksum too) and say where
    its sections are. :class:`SnapshotError` naming ``where`` and the problem."""
    header = _parse_header(where, image[:_HEADER_SIZE], size)
    if verify and _hash(memoryview(image)[_HEADER_SIZE:]) != header.checksum:
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
        meta = json.loads(image[meta_off : meta_off + header.meta_len])
        sources = [str(s) for s in meta["sources"]]
        categories = [str(c) for c in meta["categories"]]
    except (ValueError, KeyError, TypeError) as exc:
        raise SnapshotError(where, f"corrupt metadata: {exc}") from exc
    aliases = meta.get("aliases") or {}
    return ImageLayout(
        header,
        meta,
        sources,
        categories,
        {str(k): str(v) for k, v in aliases.items()} if isinstance(aliases, dict) else {},
    )


def is_snapshot(path: str | os.PathLike[str]) -> bool:
    """True when ``path`` is a file that starts like a snapshot (any format version)."""
    try:
        with open(path, "rb") as fh:
            return fh.read(len(MAGIC)) == MAGIC
    except OSError:
        return False
