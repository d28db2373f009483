"""Compiled rule snapshots: one versioned, checksummed file, matched where it lies (mmap).

A snapshot is compiled once (``urlsieve compile``) and opened by every helper
process with :func:`open_snapshot`: the file is memory-mapped read-only and
lookups read the mapping directly, so N processes share one copy in the page
cache and opening costs a header check (plus a checksum pass at memory speed),
whatever the rule count.

Layout (little-endian, sections 64-byte aligned)::

    header    128 bytes: magic, format version, sizes and offsets, body checksum,
              creation time, rule count, host-depth mask, header checksum
    hosts     open-addressing table of (xxh3-64(host), path-depth mask) u64 pairs:
              the pre-check; a host with no rule costs one probe
    exprs     open-addressing table of (xxh3-64(host + path[?query]), postings) u64
              pairs, postings = first << 8 | count into the postings array
    postings  u32 rule ids, grouped by expression
    rules     32-byte records: string offset, lengths of pattern/host/path/query,
              source id, line, category id, flags (allow, exact host, anchored, ip)
    strings   UTF-8 pattern, host, path and query of every rule
    meta      JSON: sources, categories, the lists and categories compiled

Matching gives the verdicts of the production matcher (DESIGN.md §2,
``tests/match/test_snapshot.py`` checks it differentially): for each host
suffix, most specific first, every path expression whose depth occurs at that
host is probed; the candidates are checked against the rule's own fields (so a
64-bit hash collision cannot produce a wrong match) and the highest
:attr:`Rule.rank` at the first host level with a match wins.

Swapping is atomic: :func:`compile_snapshot` writes a temporary file in the
target's directory, syncs it and renames it over the target, so a reader opens
either the old file or the new one, never a half-written one.
"""

from __future__ import annotations

import json
import mmap
import os
import struct
import tempfile
import time
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import xxhash

from urlsieve.exceptions import SnapshotError
from urlsieve.filter import Filter
from urlsieve.match.base import Explanation, Verdict, resolve_rules
from urlsieve.rules.load import LoadResult
from urlsieve.rules.model import ALLOW, BLOCK, Rule
from urlsieve.url import URL, parse_url

__all__ = [
    "FORMAT_VERSION",
    "MAGIC",
    "SnapshotError",
    "SnapshotFilter",
    "SnapshotInfo",
    "SnapshotMatcher",
    "compile_snapshot",
    "is_snapshot",
    "open_snapshot",
    "read_snapshot_info",
]

MAGIC = b"URLSNAP\x00"
FORMAT_VERSION = 2  # 2: rule paths and queries are stored lower-case

# magic, version, header size, file size, body checksum, created, rules,
# host slots, expr slots, postings count, offsets: hosts, exprs, postings, rules,
# strings, meta; lengths: strings, meta; host-depth mask; header checksum.
_HEADER = struct.Struct("<8sIIQQd13Q")
_HEADER_SIZE = 192
_RULE = struct.Struct("<IIIIiIIHH")  # 32 bytes
_ALIGN = 64
_MAX_LOAD = 0.6

_F_ALLOW = 1
_F_EXACT_HOST = 2
_F_ANCHORED = 4
_F_IP = 8

_QUERY_BIT = 1 << 63
_DEEP_BIT = 62  # depths >= 62 share one bit

_hash = xxhash.xxh3_64_intdigest


def _h(text: str) -> int:
    # 0 marks an empty slot.
    return _hash(text.encode("utf-8", "surrogatepass")) or 1


def _depth(path: str) -> int:
    depth = path.count("/")
    return depth if depth < _DEEP_BIT else _DEEP_BIT


def _align(n: int) -> int:
    return (n + _ALIGN - 1) // _ALIGN * _ALIGN


def _suffix_starts(url: URL) -> Iterator[tuple[int, int]]:
    """``(start, labels)`` of the host, then of every parent at a label boundary (an
    address has only itself), without building a string: linear in the host's length.

    Like the production matcher, no Public Suffix List work per request: no rule
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


def _keys(rule: Rule) -> list[str]:
    """The expressions a rule is stored under (see the module docstring)."""
    base = rule.host + rule.path
    if rule.query is not None:
        return [f"{base}?{rule.query}"]
    if rule.anchored or rule.path.endswith("/"):
        return [base]
    # "example.com/ads" covers "/ads" (the path expression) and "/ads/…" (prefix "/ads/").
    return [base, base + "/"]


def _table(pairs: Mapping[int, int]) -> bytearray:
    """An open-addressing table of (key, value) u64 pairs, linear probing, 0 = empty."""
    slots = 8
    while slots * _MAX_LOAD < len(pairs):
        slots *= 2
    mask = slots - 1
    table = [0] * (2 * slots)
    for key, value in pairs.items():
        i = key & mask
        while table[2 * i]:
            i = (i + 1) & mask
        table[2 * i] = key
        table[2 * i + 1] = value
    return bytearray(struct.pack(f"<{2 * slots}Q", *table))


@dataclass(frozen=True)
class SnapshotInfo:
    """What a snapshot's header and metadata say (no need to open the whole file)."""

    path: str
    format_version: int
    version: str  # content id: the body checksum in hex
    created: float
    rules: int
    size: int
    meta: Mapping[str, Any]

    def as_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "format": self.format_version,
            "version": self.version,
            "created": self.created,
            "rules": self.rules,
            "size": self.size,
            "categories": list(self.meta.get("selected_categories") or []),
        }


def compile_snapshot(
    rules: Iterable[Rule],
    path: str | os.PathLike[str],
    *,
    meta: Mapping[str, Any] | None = None,
) -> SnapshotInfo:
    """Compile ``rules`` into a snapshot at ``path``, replacing any file there atomically.

    Rules with one key are resolved as the production matcher does (allow wins,
    else the first read). ``meta`` is stored as JSON (lists, categories…).
    """
    resolved = resolve_rules(rules)
    sources: dict[str, int] = {}
    categories: dict[str, int] = {}
    strings = bytearray()
    records = bytearray()
    postings_by_key: dict[int, list[int]] = defaultdict(list)
    host_masks: dict[int, int] = defaultdict(int)
    host_depths = 0
    for rule_id, rule in enumerate(resolved):
        parts = [rule.pattern, rule.host, rule.path, rule.query or ""]
        encoded = [p.encode("utf-8", "surrogatepass") for p in parts]
        offset = len(strings)
        for blob in encoded:
            strings += blob
        flags = (
            (_F_ALLOW if rule.action == ALLOW else 0)
            | (_F_EXACT_HOST if rule.exact_host else 0)
            | (_F_ANCHORED if rule.anchored else 0)
            | (_F_IP if rule.is_ip else 0)
        )
        source_id = sources.setdefault(rule.source or "", len(sources))
        category_id = categories.setdefault(rule.category, len(categories))
        if category_id > 0xFFFF:
            raise ValueError("more than 65,536 categories")
        records += _RULE.pack(
            offset,
            len(encoded[0]),
            len(encoded[1]),
            len(encoded[2]),
            -1 if rule.query is None else len(encoded[3]),
            source_id,
            rule.line or 0,
            category_id,
            flags,
        )
        host_key = _h(rule.host)
        host_depths |= 1 << min(rule.host.count(".") + 1, 63)
        for key in _keys(rule):
            postings_by_key[_h(key)].append(rule_id)
            if rule.query is not None:
                host_masks[host_key] |= _QUERY_BIT
            else:
                host_masks[host_key] |= 1 << _depth(key[len(rule.host) :])
    postings: list[int] = []
    expr_values: dict[int, int] = {}
    for expr_key, ids in postings_by_key.items():
        if len(ids) > 0xFF:  # cannot happen: at most a few rules share an expression
            raise ValueError(f"{len(ids)} rules share one expression hash")
        expr_values[expr_key] = (len(postings) << 8) | len(ids)
        postings.extend(ids)
    hosts = _table(host_masks)
    exprs = _table(expr_values)
    postings_blob = struct.pack(f"<{len(postings)}I", *postings)
    meta_blob = json.dumps(
        {
            **(meta or {}),
            "sources": list(sources),
            "categories": list(categories),
            "actions": {
                BLOCK: sum(1 for r in resolved if r.action == BLOCK),
                ALLOW: sum(1 for r in resolved if r.action == ALLOW),
            },
        },
        sort_keys=True,
    ).encode("utf-8")

    sections: list[bytes | bytearray] = [hosts, exprs, postings_blob, records, strings, meta_blob]
    offsets = []
    body = bytearray()
    position = _HEADER_SIZE
    for section in sections:
        pad = _align(position) - position
        body += b"\0" * pad
        position += pad
        offsets.append(position)
        body += section
        position += len(section)
    file_size = _HEADER_SIZE + len(body)
    checksum = _hash(bytes(body))
    created = time.time()
    header = _HEADER.pack(
        MAGIC,
        FORMAT_VERSION,
        _HEADER_SIZE,
        file_size,
        checksum,
        created,
        len(resolved),
        len(hosts) // 16,
        len(exprs) // 16,
        len(postings),
        *offsets,
        len(strings),
        len(meta_blob),
        host_depths,
    )
    header += struct.pack("<Q", _hash(header))
    header += b"\0" * (_HEADER_SIZE - len(header))

    target = Path(path)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    except OSError as exc:
        raise SnapshotError(str(target), f"cannot write here: {exc.strerror or exc}") from exc
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(header)
            fh.write(body)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, target)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        raise SnapshotError(str(target), f"cannot write: {exc.strerror or exc}") from exc
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return SnapshotInfo(
        str(target),
        FORMAT_VERSION,
        f"{checksum:016x}",
        created,
        len(resolved),
        file_size,
        json.loads(meta_blob),
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
    offsets: tuple[int, ...]
    strings_len: int
    meta_len: int
    host_depths: int


def _parse_header(path: str, head: bytes, actual_size: int) -> _Header:
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
        offsets=tuple(fields[10:16]),
        strings_len=fields[16],
        meta_len=fields[17],
        host_depths=fields[18],
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
    """A compiled snapshot, memory-mapped; a :class:`~urlsieve.match.base.Matcher`.

    ``verify`` (default) checks the body checksum on open: one pass over the
    file at memory speed, which also faults the pages into the shared page cache.
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
                self._mm = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
        except OSError as exc:
            raise SnapshotError(self.path, f"cannot open: {exc.strerror or exc}") from exc
        try:
            self._open(size, verify)
        except BaseException:
            self._mm.close()
            raise

    def _open(self, size: int, verify: bool) -> None:
        mm = self._mm
        header = _parse_header(self.path, mm[:_HEADER_SIZE], size)
        if verify and _hash(memoryview(mm)[_HEADER_SIZE:]) != header.checksum:
            raise SnapshotError(self.path, "corrupt: the body checksum does not match")
        hosts_off, exprs_off, postings_off, rules_off, strings_off, meta_off = header.offsets
        ends = [
            (hosts_off, header.host_slots * 16),
            (exprs_off, header.expr_slots * 16),
            (postings_off, header.postings * 4),
            (rules_off, header.rules * _RULE.size),
            (strings_off, header.strings_len),
            (meta_off, header.meta_len),
        ]
        for offset, length in ends:
            if offset < _HEADER_SIZE or offset + length > size:
                raise SnapshotError(self.path, "corrupt: a section lies outside the file")
        for slots in (header.host_slots, header.expr_slots):
            if slots & (slots - 1):
                raise SnapshotError(self.path, "corrupt: a table size is not a power of two")
        try:
            meta = json.loads(mm[meta_off : meta_off + header.meta_len])
        except ValueError as exc:
            raise SnapshotError(self.path, f"corrupt metadata: {exc}") from exc
        view = memoryview(mm)
        self._hosts = view[hosts_off : hosts_off + header.host_slots * 16].cast("Q")
        self._exprs = view[exprs_off : exprs_off + header.expr_slots * 16].cast("Q")
        self._postings = view[postings_off : postings_off + header.postings * 4].cast("I")
        self._host_mask = header.host_slots - 1
        self._expr_mask = header.expr_slots - 1
        self._rules_off = rules_off
        self._strings_off = strings_off
        self._host_depths = header.host_depths
        self._header = header
        self._sources: list[str] = list(meta["sources"])
        self._categories: list[str] = list(meta["categories"])
        self._rule_cache: dict[int, Rule] = {}
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
        """Unmap the file (views are released first; safe to call twice)."""
        for name in ("_hosts", "_exprs", "_postings"):
            view = getattr(self, name, None)
            if view is not None:
                view.release()
        self._mm.close()

    def __enter__(self) -> SnapshotMatcher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __len__(self) -> int:
        return self._header.rules

    # -- lookups ---------------------------------------------------------------------------

    @staticmethod
    def _probe(table: memoryview, mask: int, text: str) -> int:
        """The value stored for ``text`` in an open-addressing table (0: absent)."""
        key = _h(text)
        i = key & mask
        while True:
            slot = table[2 * i]
            if slot == key:
                return int(table[2 * i + 1])
            if slot == 0:
                return 0
            i = (i + 1) & mask

    def _record(self, rule_id: int) -> tuple[int, int, int, int, int, int, int, int, int]:
        fields: tuple[int, int, int, int, int, int, int, int, int] = _RULE.unpack_from(
            self._mm, self._rules_off + rule_id * _RULE.size
        )
        return fields

    def rule(self, rule_id: int) -> Rule:
        """The rule with this id, rebuilt from the mapping (kept in a small per-process cache)."""
        cached = self._rule_cache.get(rule_id)
        if cached is not None:
            return cached
        off, n_pat, n_host, n_path, n_query, source_id, line, category_id, flags = self._record(
            rule_id
        )
        start = self._strings_off + off
        raw = self._mm[start : start + n_pat + n_host + n_path + max(n_query, 0)]
        pattern = raw[:n_pat].decode("utf-8", "surrogatepass")
        host = raw[n_pat : n_pat + n_host].decode("ascii", "surrogateescape")
        path = raw[n_pat + n_host : n_pat + n_host + n_path].decode("utf-8", "surrogatepass")
        query = (
            None if n_query < 0 else raw[n_pat + n_host + n_path :].decode("utf-8", "surrogatepass")
        )
        source = self._sources[source_id] or None
        rule = Rule(
            pattern=pattern,
            action=ALLOW if flags & _F_ALLOW else BLOCK,
            category=self._categories[category_id],
            host=host,
            path=path,
            query=query,
            exact_host=bool(flags & _F_EXACT_HOST),
            anchored=bool(flags & _F_ANCHORED),
            is_ip=bool(flags & _F_IP),
            source=source,
            line=line or None,
        )
        if len(self._rule_cache) >= 1 << 16:
            self._rule_cache.clear()
        self._rule_cache[rule_id] = rule
        return rule

    def _best(self, url: URL, probes: list[str] | None) -> Rule | None:
        """The deciding rule. Linear in the URL: host levels and path prefixes are cut
        out of the URL only at the depths the rule set has."""
        host_depths = self._host_depths
        full_host = url.host
        path = url.path.lower()  # rule paths are lower-case: matching ignores case
        query = None if url.query is None else url.query.lower()
        candidates: list[tuple[int, int, bool]] | None = None
        for level, (start, labels) in enumerate(_suffix_starts(url)):
            if not host_depths >> min(labels, 63) & 1:
                continue
            host = full_host[start:]
            if probes is not None:
                probes.append(host)
            depths = self._probe(self._hosts, self._host_mask, host)
            if not depths:
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
                value = self._probe(self._exprs, self._expr_mask, expr)
                if not value:
                    continue
                first, count = value >> 8, value & 0xFF
                for rule_id in self._postings[first : first + count]:
                    rank = self._candidate(rule_id, host, suffix, exact_path, level)
                    if rank is not None and (best is None or rank > best[0]):
                        best = (rank, rule_id)
            if best is not None:
                return self.rule(best[1])
        return None

    def _candidate(
        self, rule_id: int, host: str, suffix: str, exact_path: bool, level: int
    ) -> int | None:
        """The rank of the rule (as :attr:`Rule.rank`) if it really matches here, else None
        (a rule for another host level or path form, or a 64-bit hash collision)."""
        off, n_pat, n_host, n_path, n_query, _src, _line, _cat, flags = self._record(rule_id)
        if flags & (_F_EXACT_HOST | _F_IP) and level:
            return None
        anchored = flags & _F_ANCHORED
        if anchored and not exact_path:
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
        # Canonical hosts and paths are ASCII: byte lengths are character lengths.
        return (
            n_host << 20
            | min(path_len, 0x1FFFF) << 3
            | (4 if anchored else 0)
            | (2 if flags & _F_EXACT_HOST else 0)
            | (1 if flags & _F_ALLOW else 0)
        )

    def decide(self, url: URL) -> Rule | None:
        """The deciding rule for a parsed URL, ``None`` when no rule matches."""
        return self._best(url, None)

    def check(self, url: str | URL) -> Verdict:
        parts = url if isinstance(url, URL) else parse_url(url)
        return Verdict.of(self._best(parts, None), parts.canonical)

    def check_many(self, urls: Iterable[str | URL]) -> list[Verdict]:
        return [self.check(u) for u in urls]

    def explain(self, url: str | URL) -> Explanation:
        parts = url if isinstance(url, URL) else parse_url(url)
        probes: list[str] = []
        rule = self._best(parts, probes)
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


class SnapshotFilter(Filter):
    """A :class:`~urlsieve.Filter` answering from a compiled snapshot (``Filter.load``).

    The same verdicts and explanations as the filter the snapshot was compiled
    from; the per-file load reports stay with the compile step.
    """

    def __init__(self, path: str | os.PathLike[str], *, verify: bool = True) -> None:
        # Filter.__init__ builds an in-memory matcher: not wanted here.
        self._snapshot = SnapshotMatcher(path, verify=verify)
        self._load = LoadResult()

    @property
    def info(self) -> SnapshotInfo:
        """The snapshot's header and metadata (version, rule count, creation time…)."""
        return self._snapshot.info

    @property
    def matcher(self) -> SnapshotMatcher:
        return self._snapshot

    def close(self) -> None:
        self._snapshot.close()

    def __len__(self) -> int:
        return len(self._snapshot)

    @property
    def rules(self) -> list[Rule]:
        return [self._snapshot.rule(i) for i in range(len(self._snapshot))]

    def check(self, url: str | URL) -> Verdict:
        return self._snapshot.check(url)

    def match(self, url: URL) -> Rule | None:
        return self._snapshot.decide(url)

    def check_many(self, urls: Iterable[str | URL]) -> list[Verdict]:
        return self._snapshot.check_many(urls)

    def explain(self, url: str | URL) -> Explanation:
        return self._snapshot.explain(url)
