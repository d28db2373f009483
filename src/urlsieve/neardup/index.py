"""Near-duplicate index over 64-bit SimHashes: every key within ``k`` bits of a query.

Permuted tables in the style of Manku, Jain & Das Sarma (WWW 2007): the 64
bits are cut into ``blocks`` blocks (default ``k + 1``); ``k`` differing bits
touch at most ``k`` blocks, so two fingerprints within ``k`` bits agree exactly
on at least ``blocks - k`` of them. One table per choice of ``blocks - k``
blocks, keyed by their values, therefore yields every candidate, and the
popcount of the XOR keeps the true ones. The index is exact: no fingerprint
within ``k`` bits of a query is ever missed, and none farther is returned.
With ``k = 3`` (4 tables keyed by 16-bit blocks), a random key holds ~1.5 of
10⁵ documents; for a larger ``k``, more blocks keep the keys wide (``k = 5,
blocks = 7``: 21 tables keyed by two 9-bit blocks), trading memory for speed.

Backends, chosen by a spec (:func:`open_index`), behind one protocol:

* ``memory:?k=3`` — :class:`MemoryIndex`, one process;
* ``file:PATH?k=3`` — :class:`FileIndex`, an append-only record log shared by
  processes (writers append under ``flock``; every process replays the new
  tail before a query), crash-safe: a torn last record is ignored and cut by
  the next writer;
* ``valkey://host:port/0?prefix=P&k=3`` (also ``redis://``, ``valkeys://``,
  ``rediss://``, ``unix://``) — :class:`ValkeyIndex`: one Valkey set per
  table bucket, queried in one pipelined round trip; standalone or cluster.

Keys are strings (URLs, typically) of at most 8 KiB in UTF-8. A key may be
added again with another fingerprint (a page that changed); a query returns
every (key, distance) pair within ``k``, so it can name a key twice.
"""

from __future__ import annotations

import fcntl
import itertools
import math
import os
import re
import struct
import zlib
from array import array
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, NamedTuple, Protocol, Self, runtime_checkable

import numpy as np
import numpy.typing as npt

from urlsieve._accel import speedups as _accel
from urlsieve._bits import bit_counts
from urlsieve.exceptions import ConfigError, StoreClosed, StoreCorrupt
from urlsieve.store.base import ClosingStore
from urlsieve.store.files import os_error
from urlsieve.store.spec import Backend, Registry
from urlsieve.store.valkey import SERVER_SCHEMES

__all__ = ["FileIndex", "MemoryIndex", "NearDupIndex", "ValkeyIndex", "k_for_jaccard", "open_index"]

MAX_K = 8
MAX_TABLES = 64
MAX_KEY = 8192  # bytes of UTF-8
MASK64 = (1 << 64) - 1

Match = tuple[str, int]
U64 = npt.NDArray[np.uint64]

#: the compiled table walk (None: the pure-Python dict tables; tests set it to None)
speedups = _accel if _accel is not None and hasattr(_accel, "nd_query") else None
#: documents added since the compiled tables were built are scanned one by one (in C) until
#: there are more than this many, or more than 1/64 of the built ones: then they are rebuilt
TAIL = 2048


@runtime_checkable
class NearDupIndex(Protocol):
    """Keys by 64-bit SimHash; :meth:`query` finds every key within ``k`` bits."""

    k: int

    def add(self, key: str, fp: int) -> None: ...

    def add_many(self, keys: Sequence[str], fps: Sequence[int]) -> None: ...

    def query(self, fp: int, k: int | None = None) -> list[Match]: ...

    def query_many(self, fps: Sequence[int], k: int | None = None) -> list[list[Match]]: ...

    def __len__(self) -> int: ...

    def flush(self) -> None: ...

    def close(self) -> None: ...

    def __enter__(self) -> Self: ...

    def __exit__(self, *exc: object) -> None: ...


class Layout:
    """Which bits key each table: ``blocks`` near-equal blocks, every ``blocks - k`` of them."""

    def __init__(self, k: int, blocks: int | None = None) -> None:
        blocks = k + 1 if blocks is None else blocks
        if not k < blocks <= 64:
            raise ConfigError(f"near-duplicate index: blocks must be {k + 1}..64 for k={k}")
        if math.comb(blocks, blocks - k) > MAX_TABLES:
            raise ConfigError(
                f"near-duplicate index: k={k}, blocks={blocks} needs "
                f"{math.comb(blocks, blocks - k):,} tables (at most {MAX_TABLES})"
            )
        self.k, self.blocks = k, blocks
        self.parts: list[tuple[int, int, int]] = []  # shift, mask, width of each block
        start = 0
        for i in range(blocks):
            width = 64 // blocks + (1 if i < 64 % blocks else 0)
            self.parts.append((start, (1 << width) - 1, width))
            start += width
        #: per table: (block index, where its bits go in the table key), and the key's width
        self.tables: list[tuple[tuple[tuple[int, int], ...], int]] = []
        for chosen in itertools.combinations(range(blocks), blocks - k):
            fields, offset = [], 0
            for index in chosen:
                fields.append((index, offset))
                offset += self.parts[index][2]
            self.tables.append((tuple(fields), offset))
        self._single = all(len(fields) == 1 for fields, _ in self.tables)
        #: per table, (shift, mask, offset) of each block keying it: the compiled walk's layout
        self.fields = tuple(
            tuple((self.parts[i][0], self.parts[i][1], offset) for i, offset in fields)
            for fields, _ in self.tables
        )

    def keys(self, fp: int) -> list[int]:
        """The key of ``fp`` in every table."""
        values = [(fp >> shift) & mask for shift, mask, _ in self.parts]
        if self._single:
            return values
        out = []
        for fields, _ in self.tables:
            key = 0
            for index, offset in fields:
                key |= values[index] << offset
            out.append(key)
        return out

    def keys_array(self, table: int, fps: U64) -> U64:
        """The key of every fingerprint of ``fps`` in ``table``."""
        key = np.zeros(len(fps), dtype=np.uint64)
        for index, offset in self.tables[table][0]:
            shift, mask, _ = self.parts[index]
            key |= ((fps >> np.uint64(shift)) & np.uint64(mask)) << np.uint64(offset)
        return key


#: share of the pairs at exactly the threshold that :func:`k_for_jaccard`'s ``k`` finds
FIND_AT_THRESHOLD = 0.7


def k_for_jaccard(threshold: float, *, find: float = FIND_AT_THRESHOLD) -> int:
    """The index distance ``k`` for documents at Jaccard similarity ``threshold`` or more.

    Two token sets of equal size at Jaccard ``T`` have cosine ``2T/(1+T)``; each SimHash bit
    differs with probability ``p = arccos(2T/(1+T))/π``, so their distance is
    Binomial(64, p). ``k`` is the smallest distance within which a pair at exactly ``T`` is
    found with probability ``find`` (0.7 by default; more similar pairs more often): 4 at
    0.975, 6 at 0.95, 8 at 0.89. Rounding the mean distance instead (3, 5, 7) finds only
    about half of the pairs at ``T`` (``benchmarks/neardup.py`` measures both). Returned
    pairs may be below ``T``: confirm them with ``simhash.jaccard`` of the documents'
    ``features`` when precision matters. Raises :class:`ValueError` when the threshold
    needs more than :data:`MAX_K` bits (below about 0.885).
    """
    if not 0.0 < threshold <= 1.0 or not 0.0 < find < 1.0:
        raise ValueError(f"threshold must be in (0, 1] and find in (0, 1), not {threshold}, {find}")
    p = math.acos(min(1.0, 2 * threshold / (1 + threshold))) / math.pi
    below = 0.0
    for k in range(MAX_K + 1):
        below += math.comb(64, k) * p**k * (1 - p) ** (64 - k)
        if below >= find:
            return k
    raise ValueError(
        f"a Jaccard threshold of {threshold} needs more than {MAX_K} bits (the index's most)"
    )


def _check_k(k: int) -> int:
    if not 0 <= k <= MAX_K:
        raise ConfigError(f"near-duplicate index: k must be 0..{MAX_K}, not {k}")
    return k


def _query_distance(k: int | None, limit: int) -> int:
    """The distance a query asks for: the index's ``k`` by default, never more."""
    k = limit if k is None else k
    if not 0 <= k <= limit:
        raise ValueError(f"query distance {k} is outside 0..{limit} (the index's k)")
    return k


def _encode_key(key: str) -> bytes:
    data = key.encode("utf-8", "surrogatepass")
    if len(data) > MAX_KEY:
        raise ValueError(f"near-duplicate index key of {len(data):,} bytes (over {MAX_KEY:,})")
    return data


def _pairs(keys: Sequence[str], fps: Sequence[int]) -> list[tuple[bytes, int]]:
    if len(keys) != len(fps):
        raise ValueError(f"{len(keys)} keys but {len(fps)} fingerprints")
    return [(_encode_key(key), int(fp) & MASK64) for key, fp in zip(keys, fps, strict=True)]


class _Tables:
    """The in-memory tables both local backends query."""

    def __init__(self, k: int, blocks: int | None = None) -> None:
        self.k = _check_k(k)
        self.layout = Layout(k, blocks)
        self._keys: list[str] = []
        self._fps = array("Q")
        self._arrays: tuple[U64, list[_Sorted]] | None = None
        # Compiled: the tables are built in C from _fps (nd_build), the documents added
        # since are scanned until TAIL; pure Python: one dict per table, kept as keys come.
        self._compiled = speedups
        self._tables: list[dict[int, list[int]]] = (
            [] if self._compiled is not None else [{} for _ in self.layout.tables]
        )
        self._built: Any = None
        self._built_n = 0

    def _insert(self, key: str, fp: int) -> None:
        doc = len(self._keys)
        self._keys.append(key)
        self._fps.append(fp)
        if self._compiled is not None:
            return
        for table, value in zip(self._tables, self.layout.keys(fp), strict=True):
            bucket = table.get(value)
            if bucket is None:
                table[value] = [doc]
            else:
                bucket.append(doc)

    def _distance(self, k: int | None) -> int:
        return _query_distance(k, self.k)

    def _rebuild(self) -> Any:
        """The compiled tables of every document so far."""
        assert self._compiled is not None
        n = len(self._fps)
        self._built = self._compiled.nd_build(self._fps, n, self.layout.fields)
        self._built_n = n
        return self._built

    def _lookup(self, fp: int, k: int) -> list[Match]:
        compiled = self._compiled
        if compiled is None:
            return self._lookup_py(fp, k)
        fps = self._fps
        n = len(fps)
        built = self._built
        tail = n - self._built_n
        if built is None or (tail > TAIL and tail > self._built_n >> 6):
            built = self._rebuild()
        # (key, distance) pairs, sorted as _lookup_py sorts them, made in C
        found: list[Match] = compiled.nd_query(built, fp, k, fps, n, self._keys)
        return found

    def _lookup_py(self, fp: int, k: int) -> list[Match]:
        """:meth:`_lookup` on the dict tables (the reference of the compiled walk)."""
        fp &= MASK64
        fps = self._fps
        keys = self._keys
        out: list[Match] = []
        seen: set[int] = set()
        for table, key in zip(self._tables, self.layout.keys(fp), strict=True):
            bucket = table.get(key)
            if bucket is None:
                continue
            for doc in bucket:
                distance = (fps[doc] ^ fp).bit_count()
                if distance <= k and doc not in seen:
                    seen.add(doc)
                    out.append((keys[doc], distance))
        if len(out) > 1:
            out.sort(key=_order)
        return out

    # ------------------------------------------------------------- batch path
    def _sorted_tables(self) -> tuple[U64, list[_Sorted]]:
        """Per table: the block values sorted, the documents in that order, and (for
        blocks of up to 20 bits) where each block value's run starts (cached)."""
        cached = self._arrays
        if cached is not None and len(cached[0]) == len(self._fps):
            return cached
        fps = np.frombuffer(self._fps, dtype=np.uint64).copy()
        tables = []
        for table, (_, width) in enumerate(self.layout.tables):
            values = self.layout.keys_array(table, fps)
            order = np.argsort(values, kind="stable")
            values = values[order]
            starts = None
            if width <= DIRECT_BITS:  # direct addressing: two gathers instead of two searches
                starts = np.searchsorted(values, np.arange((1 << width) + 1, dtype=np.uint64))
            tables.append(_Sorted(values, order, starts))
        self._arrays = (fps, tables)
        return self._arrays

    def _lookup_many(self, queries: Sequence[int], k: int) -> list[list[Match]]:
        """Every query at once: candidate ranges by binary search, distances vectorised."""
        if len(queries) < BATCH_MIN or not self._fps or self._compiled is not None:
            return [self._lookup(int(q), k) for q in queries]
        fps, tables = self._sorted_tables()
        if isinstance(queries, np.ndarray) and queries.dtype == np.uint64:
            q = queries
        else:
            q = np.array([int(v) & MASK64 for v in queries], dtype=np.uint64)
        which, docs = [], []
        for table, (values, order, offsets) in enumerate(tables):
            wanted = self.layout.keys_array(table, q)
            if offsets is not None:
                lo = offsets[wanted]
                counts = offsets[wanted + np.uint64(1)] - lo
            else:
                lo = np.searchsorted(values, wanted, side="left")
                counts = np.searchsorted(values, wanted, side="right") - lo
            total = int(counts.sum())
            if not total:
                continue
            starts = np.repeat(lo - (np.cumsum(counts) - counts), counts)
            which.append(np.repeat(np.arange(len(q)), counts))
            docs.append(order[starts + np.arange(total)])
        if not which:
            return [[] for _ in queries]
        qi, di = np.concatenate(which), np.concatenate(docs)
        distance = bit_counts(fps[di] ^ q[qi])
        keep = distance <= k
        pair = np.unique(qi[keep].astype(np.int64) * len(fps) + di[keep])  # one per (query, doc)
        qi, di = pair // len(fps), pair % len(fps)
        distance = bit_counts(fps[di] ^ q[qi])
        out: list[list[Match]] = [[] for _ in queries]
        keys = self._keys
        for query, doc, dist in zip(qi.tolist(), di.tolist(), distance.tolist(), strict=True):
            out[query].append((keys[doc], dist))
        for matches in out:
            if len(matches) > 1:
                matches.sort(key=_order)
        return out


BATCH_MIN = 64  # below this many queries, the per-query path is faster
DIRECT_BITS = 18  # table keys this wide or narrower are addressed directly in the batch path


class _Sorted(NamedTuple):
    values: U64
    order: npt.NDArray[np.intp]
    starts: npt.NDArray[np.intp] | None


def _order(match: Match) -> tuple[int, str]:
    return match[1], match[0]


class MemoryIndex(_Tables, ClosingStore):
    """The index in this process's memory; ``k`` is the largest distance a query may ask."""

    def __init__(self, k: int = 3, *, blocks: int | None = None) -> None:
        super().__init__(k, blocks)
        self._closed = False

    def _live(self) -> None:
        if self._closed:
            raise StoreClosed("near-duplicate index: closed")

    def add(self, key: str, fp: int) -> None:
        self.add_many([key], [fp])

    def add_many(self, keys: Sequence[str], fps: Sequence[int]) -> None:
        self._live()
        for data, fp in _pairs(keys, fps):
            self._insert(data.decode("utf-8", "surrogatepass"), fp)

    def query(self, fp: int, k: int | None = None) -> list[Match]:
        if self._closed:
            self._live()
        return self._lookup(fp, self.k if k is None else self._distance(k))

    def query_many(self, fps: Sequence[int], k: int | None = None) -> list[list[Match]]:
        self._live()
        return self._lookup_many(fps, self._distance(k))

    def __len__(self) -> int:
        return len(self._keys)

    def flush(self) -> None:
        self._live()

    def close(self) -> None:
        self._closed = True

    def __repr__(self) -> str:
        return f"MemoryIndex(k={self.k}, blocks={self.layout.blocks}, {len(self)} keys)"


# ---------------------------------------------------------------- the shared file

MAGIC = b"urlsieve-nd-log\n"  # 16 bytes
_HEADER = struct.Struct("<16sIII")  # magic, format version, k, blocks
_RECORD = struct.Struct("<QI")  # fingerprint, key length; then the key, then crc32
_CRC = struct.Struct("<I")
FORMAT = 1


class FileIndex(_Tables, ClosingStore):
    """An append-only record log shared by processes; each keeps the tables in memory.

    Writers append whole batches under an exclusive ``flock`` (``O_APPEND``);
    readers replay records appended since their last look before every query,
    without a lock: a record still being written is a torn tail, left for the
    next look. :meth:`flush` makes what was added durable (``fsync``).
    """

    def __init__(
        self, path: str | os.PathLike[str], *, k: int = 3, blocks: int | None = None
    ) -> None:
        super().__init__(k, blocks)
        self.path = Path(path)
        self._closed = False
        self._offset = _HEADER.size
        try:
            self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        except OSError as exc:
            raise os_error(exc, self.path, "opening the near-duplicate index") from exc
        try:
            self._start()
        except BaseException:
            os.close(self._fd)
            raise

    def _start(self) -> None:
        with self._locked():
            size = os.fstat(self._fd).st_size
            if size == 0:
                self._write(_HEADER.pack(MAGIC, FORMAT, self.k, self.layout.blocks))
                return
        head = os.pread(self._fd, _HEADER.size, 0)
        if len(head) < _HEADER.size or head[:16] != MAGIC:
            raise StoreCorrupt(
                f"{self.path}: not a urlsieve near-duplicate index (bad magic); "
                "point the spec at another path or delete the file"
            )
        _, version, k, blocks = _HEADER.unpack(head)
        if version != FORMAT:
            raise StoreCorrupt(f"{self.path}: index format {version}, this urlsieve reads {FORMAT}")
        if k != self.k:
            raise ConfigError(
                f"{self.path} was built with k={k}, not k={self.k}: open it with k={k}"
            )
        if blocks != self.layout.blocks:
            raise ConfigError(
                f"{self.path} was built with blocks={blocks}, not {self.layout.blocks}: "
                f"open it with blocks={blocks}"
            )
        self._catch_up()

    def _locked(self) -> _Flock:
        return _Flock(self._fd, self.path)

    def _write(self, data: bytes) -> None:
        try:
            view = memoryview(data)
            while view:
                written = os.write(self._fd, view)
                view = view[written:]
        except OSError as exc:
            raise os_error(exc, self.path, "appending to the near-duplicate index") from exc

    def _catch_up(self) -> bool:
        """Replay the records appended since the last look; True when a torn tail remains."""
        size = os.fstat(self._fd).st_size
        if size < self._offset:
            raise StoreCorrupt(
                f"{self.path}: the file shrank to {size:,} bytes under this process "
                f"(it had read {self._offset:,}); it was truncated or replaced: reopen the index"
            )
        if size == self._offset:
            return False
        data = os.pread(self._fd, size - self._offset, self._offset)
        pos, end = 0, len(data)
        while pos < end:
            if end - pos < _RECORD.size:
                break
            fp, length = _RECORD.unpack_from(data, pos)
            if length > MAX_KEY:
                raise self._corrupt(self._offset + pos, f"a key length of {length:,}")
            stop = pos + _RECORD.size + length
            if end - stop < _CRC.size:
                break
            (crc,) = _CRC.unpack_from(data, stop)
            if crc != zlib.crc32(data[pos:stop]):
                raise self._corrupt(self._offset + pos, "a record whose checksum does not match")
            key = data[pos + _RECORD.size : stop].decode("utf-8", "surrogatepass")
            self._insert(key, fp)
            pos = stop + _CRC.size
        self._offset += pos
        return pos < end

    def _corrupt(self, offset: int, what: str) -> StoreCorrupt:
        return StoreCorrupt(
            f"{self.path}: {what} at byte {offset:,}; the records before it are intact: "
            f"keep them with `truncate -s {offset} {self.path}`, or delete the file"
        )

    def _live(self) -> None:
        if self._closed:
            raise StoreClosed(f"near-duplicate index {self.path}: closed")

    def add(self, key: str, fp: int) -> None:
        self.add_many([key], [fp])

    def add_many(self, keys: Sequence[str], fps: Sequence[int]) -> None:
        self._live()
        pairs = _pairs(keys, fps)
        if not pairs:
            return
        records = bytearray()
        for data, fp in pairs:
            head = _RECORD.pack(fp, len(data)) + data
            records += head + _CRC.pack(zlib.crc32(head))
        with self._locked():
            if self._catch_up():  # a writer died mid-record: cut its torn tail
                os.ftruncate(self._fd, self._offset)
            self._write(bytes(records))
            for data, fp in pairs:
                self._insert(data.decode("utf-8", "surrogatepass"), fp)
            self._offset += len(records)

    def query(self, fp: int, k: int | None = None) -> list[Match]:
        self._live()
        k = self._distance(k)
        self._catch_up()
        return self._lookup(fp, k)

    def query_many(self, fps: Sequence[int], k: int | None = None) -> list[list[Match]]:
        self._live()
        k = self._distance(k)
        self._catch_up()
        return self._lookup_many(fps, k)

    def __len__(self) -> int:
        self._live()
        self._catch_up()
        return len(self._keys)

    def flush(self) -> None:
        self._live()
        try:
            os.fsync(self._fd)
        except OSError as exc:
            raise os_error(exc, self.path, "syncing the near-duplicate index") from exc

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            os.close(self._fd)

    def __repr__(self) -> str:
        return f"FileIndex({str(self.path)!r}, k={self.k})"


class _Flock:
    def __init__(self, fd: int, path: Path) -> None:
        self.fd, self.path = fd, path

    def __enter__(self) -> None:
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX)
        except OSError as exc:
            raise os_error(exc, self.path, "locking the near-duplicate index") from exc

    def __exit__(self, *exc: object) -> None:
        fcntl.flock(self.fd, fcntl.LOCK_UN)


# ---------------------------------------------------------------- Valkey / Redis

_PREFIX = re.compile(r"[A-Za-z0-9_.\-]{1,128}")


class ValkeyIndex(ClosingStore):
    """The tables on Valkey/Redis: one set per (table, block value), members ``fp || key``.

    An add is ``k + 1`` ``SADD`` (idempotent, so safe to resend); a query is
    one pipelined round of ``k + 1`` ``SMEMBERS``, checked here by popcount.
    Keys are ``{prefix:nd<t>:<block hex>}`` (spread over a cluster's slots) and
    ``{prefix}:ndmeta`` (the index's ``k``, fixed by the first client).
    """

    def __init__(
        self,
        url: str,
        *,
        prefix: str = "urlsieve",
        k: int = 3,
        blocks: int | None = None,
        timeout: float = 5.0,
        retries: int = 3,
    ) -> None:
        from urlsieve.store.valkey.router import Cmd, Router

        if not _PREFIX.fullmatch(prefix):
            raise ConfigError(
                f"prefix={prefix!r}: must be 1-128 letters, digits, '_', '-' or '.' "
                "(no ':' or braces: they would let two indexes share keys)"
            )
        self.k = _check_k(k)
        self.prefix = prefix
        self.layout = Layout(k, blocks)
        self._cmd = Cmd
        self._router = Router(url, timeout=timeout, retries=retries)
        self._closed = False
        meta = f"{{{prefix}}}:ndmeta"
        self._count_key = f"{{{prefix}}}:ndcount"
        layout = f"{k}/{self.layout.blocks}"
        _, stored = self._router.execute(
            [Cmd(meta, ("HSETNX", meta, "layout", layout)), Cmd(meta, ("HGET", meta, "layout"))],
            idempotent=True,
        )
        stored = stored.decode() if isinstance(stored, bytes) else str(stored)
        if stored != layout:
            self._router.close()
            stored_k, _, stored_blocks = stored.partition("/")
            raise ConfigError(
                f"{self._router.url} prefix {prefix!r} holds an index with k={stored_k}, "
                f"blocks={stored_blocks}, not k={k}, blocks={self.layout.blocks}: open it with "
                f"k={stored_k}&blocks={stored_blocks} or use another prefix"
            )

    def _buckets(self, fp: int) -> list[str]:
        return [
            f"{{{self.prefix}:nd{table}:{key:x}}}" for table, key in enumerate(self.layout.keys(fp))
        ]

    def _live(self) -> None:
        if self._closed:
            raise StoreClosed(f"near-duplicate index on {self._router.url}: closed")

    def add(self, key: str, fp: int) -> None:
        self.add_many([key], [fp])

    def add_many(self, keys: Sequence[str], fps: Sequence[int]) -> None:
        self._live()
        pairs = _pairs(keys, fps)
        cmds = []
        for data, fp in pairs:
            member = fp.to_bytes(8, "big") + data
            for bucket in self._buckets(fp):
                cmds.append(self._cmd(bucket, ("SADD", bucket, member)))
        if not cmds:
            return
        replies = self._router.execute(cmds, idempotent=True)
        tables = len(self.layout.tables)
        new = sum(1 for i in range(0, len(replies), tables) if int(replies[i]) == 1)
        if new:
            key = self._count_key
            self._router.execute([self._cmd(key, ("INCRBY", key, new))], idempotent=False)

    def _decode(self, members: Iterable[bytes], fp: int, k: int) -> list[Match]:
        out = []
        for member in set(members):
            distance = (int.from_bytes(member[:8], "big") ^ fp).bit_count()
            if distance <= k:
                out.append((member[8:].decode("utf-8", "surrogatepass"), distance))
        out.sort(key=lambda m: (m[1], m[0]))
        return out

    def query(self, fp: int, k: int | None = None) -> list[Match]:
        return self.query_many([fp], k)[0]

    def query_many(self, fps: Sequence[int], k: int | None = None) -> list[list[Match]]:
        self._live()
        k = _query_distance(k, self.k)
        values = [int(fp) & MASK64 for fp in fps]
        tables = len(self.layout.tables)
        cmds = []
        for fp in values:
            for bucket in self._buckets(fp):
                cmds.append(self._cmd(bucket, ("SMEMBERS", bucket)))
        replies = self._router.execute(cmds, idempotent=True) if cmds else []
        out = []
        for i, fp in enumerate(values):
            members: list[bytes] = []
            for reply in replies[i * tables : (i + 1) * tables]:
                members.extend(reply)
            out.append(self._decode(members, fp, k))
        return out

    def __len__(self) -> int:
        self._live()
        key = self._count_key
        (value,) = self._router.execute([self._cmd(key, ("GET", key))], idempotent=True)
        return int(value or 0)

    def flush(self) -> None:
        self._live()  # every add returned after the server's reply

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._router.close()

    def __repr__(self) -> str:
        return f"ValkeyIndex({self._router.url!r}, prefix={self.prefix!r}, k={self.k})"


_LOCAL_PARAMS: dict[str, type] = {"k": int, "blocks": int}
_SERVER_PARAMS: dict[str, type] = {
    "k": int,
    "blocks": int,
    "prefix": str,
    "timeout": float,
    "retries": int,
}


def open_memory(location: str, **options: Any) -> MemoryIndex:
    """``memory:``: an index in this process (the location is not used)."""
    return MemoryIndex(**options)


def open_file(location: str, **options: Any) -> FileIndex:
    """``file:PATH``: an index in a file shared by processes."""
    if not location:
        raise ConfigError("near-duplicate index spec: write file:PATH")
    return FileIndex(location, **options)


#: Near-duplicate index backends by spec prefix (register third-party ones here).
INDEX_BACKENDS: Registry[MemoryIndex | FileIndex | ValkeyIndex] = Registry(
    "near-duplicate index spec",
    {
        "memory": Backend("urlsieve.neardup.index:open_memory", _LOCAL_PARAMS),
        "file": Backend("urlsieve.neardup.index:open_file", _LOCAL_PARAMS),
        **{
            scheme: Backend("urlsieve.neardup.index:ValkeyIndex", _SERVER_PARAMS, server=True)
            for scheme in SERVER_SCHEMES
        },
    },
)


def open_index(spec: str, **overrides: Any) -> MemoryIndex | FileIndex | ValkeyIndex:
    """A near-duplicate index from a spec: ``memory:``, ``file:PATH``, ``valkey://…``.

    Parameters: ``k`` (every backend; default 3), ``blocks`` (default ``k + 1``:
    more blocks make more tables and faster queries at a larger ``k``), and for
    servers ``prefix``, ``timeout`` and ``retries``; keyword ``overrides`` win.
    """
    return INDEX_BACKENDS.open(spec, **overrides)
