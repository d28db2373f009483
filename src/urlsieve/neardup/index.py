"""Near-duplicate index over 64-bit SimHashes: every key within ``k`` bits of a query.

Pigeonhole tables in the style of Manku, Jain & Das Sarma (WWW 2007): the 64
bits are cut into ``k + 1`` blocks; two fingerprints within ``k`` bits agree
exactly on at least one block (``k`` differing bits touch at most ``k``
blocks), so one table per block (block value → documents) yields every
candidate, and the popcount of the XOR keeps the true ones. The index is
exact: no fingerprint within ``k`` bits of a query is ever missed, and none
farther is returned. With ``k = 3`` the blocks are 16 bits wide, so at 10⁵
documents a random block value holds ~1.5 of them: a query looks at a few
candidates in four dictionaries.

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
import os
import re
import struct
import zlib
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, Protocol, Self, runtime_checkable

from urlsieve.exceptions import ConfigError, StoreClosed, StoreCorrupt
from urlsieve.seen._files import os_error
from urlsieve.seen.base import ClosingStore, parse_spec

__all__ = ["FileIndex", "MemoryIndex", "NearDupIndex", "ValkeyIndex", "open_index"]

MAX_K = 8
MAX_KEY = 8192  # bytes of UTF-8
MASK64 = (1 << 64) - 1

Match = tuple[str, int]


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


def _blocks(k: int) -> list[tuple[int, int]]:
    """(shift, mask) of ``k + 1`` near-equal blocks covering the 64 bits."""
    count = k + 1
    out, start = [], 0
    for i in range(count):
        width = 64 // count + (1 if i < 64 % count else 0)
        out.append((start, (1 << width) - 1))
        start += width
    return out


def _check_k(k: int) -> int:
    if not 0 <= k <= MAX_K:
        raise ConfigError(f"near-duplicate index: k must be 0..{MAX_K}, not {k}")
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

    def __init__(self, k: int) -> None:
        self.k = _check_k(k)
        self._blocks = _blocks(k)
        self._tables: list[dict[int, list[int]]] = [{} for _ in self._blocks]
        self._keys: list[str] = []
        self._fps: list[int] = []

    def _insert(self, key: str, fp: int) -> None:
        doc = len(self._keys)
        self._keys.append(key)
        self._fps.append(fp)
        for table, (shift, mask) in zip(self._tables, self._blocks, strict=True):
            bucket = table.get((fp >> shift) & mask)
            if bucket is None:
                table[(fp >> shift) & mask] = [doc]
            else:
                bucket.append(doc)

    def _distance(self, k: int | None) -> int:
        k = self.k if k is None else k
        if not 0 <= k <= self.k:
            raise ValueError(f"query distance {k} is outside 0..{self.k} (the index's k)")
        return k

    def _lookup(self, fp: int, k: int) -> list[Match]:
        fp &= MASK64
        fps = self._fps
        found: dict[int, int] = {}
        for table, (shift, mask) in zip(self._tables, self._blocks, strict=True):
            for doc in table.get((fp >> shift) & mask, ()):
                if doc not in found:
                    found[doc] = (fps[doc] ^ fp).bit_count()
        keys = self._keys
        out = [(keys[d], dist) for d, dist in found.items() if dist <= k]
        out.sort(key=lambda m: (m[1], m[0]))
        return out


class MemoryIndex(_Tables, ClosingStore):
    """The index in this process's memory; ``k`` is the largest distance a query may ask."""

    def __init__(self, k: int = 3) -> None:
        super().__init__(k)
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
        self._live()
        return self._lookup(fp, self._distance(k))

    def query_many(self, fps: Sequence[int], k: int | None = None) -> list[list[Match]]:
        self._live()
        k = self._distance(k)
        return [self._lookup(int(fp), k) for fp in fps]

    def __len__(self) -> int:
        return len(self._keys)

    def flush(self) -> None:
        self._live()

    def close(self) -> None:
        self._closed = True

    def __repr__(self) -> str:
        return f"MemoryIndex(k={self.k}, {len(self)} keys)"


# ---------------------------------------------------------------- the shared file

MAGIC = b"urlsieve-nd-log\n"  # 16 bytes
_HEADER = struct.Struct("<16sII")  # magic, format version, k
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

    def __init__(self, path: str | os.PathLike[str], *, k: int = 3) -> None:
        super().__init__(k)
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
                self._write(_HEADER.pack(MAGIC, FORMAT, self.k))
                return
        head = os.pread(self._fd, _HEADER.size, 0)
        if len(head) < _HEADER.size or head[:16] != MAGIC:
            raise StoreCorrupt(
                f"{self.path}: not a urlsieve near-duplicate index (bad magic); "
                "point the spec at another path or delete the file"
            )
        _, version, k = _HEADER.unpack(head)
        if version != FORMAT:
            raise StoreCorrupt(f"{self.path}: index format {version}, this urlsieve reads {FORMAT}")
        if k != self.k:
            raise ConfigError(
                f"{self.path} was built with k={k}, not k={self.k}: open it with k={k}"
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
        return [self._lookup(int(fp), k) for fp in fps]

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
        timeout: float = 5.0,
        retries: int = 3,
    ) -> None:
        from urlsieve.seen.valkey._client import Cmd, Router

        if not _PREFIX.fullmatch(prefix):
            raise ConfigError(
                f"prefix={prefix!r}: must be 1-128 letters, digits, '_', '-' or '.' "
                "(no ':' or braces: they would let two indexes share keys)"
            )
        self.k = _check_k(k)
        self.prefix = prefix
        self._blocks = _blocks(k)
        self._cmd = Cmd
        self._router = Router(url, timeout=timeout, retries=retries)
        self._closed = False
        meta = f"{{{prefix}}}:ndmeta"
        self._count_key = f"{{{prefix}}}:ndcount"
        _, stored = self._router.execute(
            [Cmd(meta, ("HSETNX", meta, "k", k)), Cmd(meta, ("HGET", meta, "k"))], idempotent=True
        )
        if int(stored) != k:
            self._router.close()
            raise ConfigError(
                f"{self._router.url} prefix {prefix!r} holds an index with k={int(stored)}, "
                f"not k={k}: open it with k={int(stored)} or use another prefix"
            )

    def _bucket(self, table: int, fp: int) -> str:
        shift, mask = self._blocks[table]
        return f"{{{self.prefix}:nd{table}:{(fp >> shift) & mask:x}}}"

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
            for table in range(len(self._blocks)):
                bucket = self._bucket(table, fp)
                cmds.append(self._cmd(bucket, ("SADD", bucket, member)))
        if not cmds:
            return
        replies = self._router.execute(cmds, idempotent=True)
        tables = len(self._blocks)
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
        k = self.k if k is None else k
        if not 0 <= k <= self.k:
            raise ValueError(f"query distance {k} is outside 0..{self.k} (the index's k)")
        values = [int(fp) & MASK64 for fp in fps]
        tables = len(self._blocks)
        cmds = []
        for fp in values:
            for table in range(tables):
                bucket = self._bucket(table, fp)
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


_LOCAL_PARAMS: dict[str, type] = {"k": int}
_SERVER_PARAMS: dict[str, type] = {"k": int, "prefix": str, "timeout": float, "retries": int}
_SERVER_SCHEMES = ("valkey", "valkeys", "redis", "rediss", "unix")


def open_index(spec: str, **overrides: Any) -> MemoryIndex | FileIndex | ValkeyIndex:
    """A near-duplicate index from a spec: ``memory:``, ``file:PATH``, ``valkey://…``.

    Parameters: ``k`` (every backend; default 3), and for servers ``prefix``,
    ``timeout`` and ``retries``; keyword ``overrides`` win over the spec's.
    """
    parsed = parse_spec(spec)
    backend = parsed.backend
    if backend in ("memory", "file"):
        allowed = _LOCAL_PARAMS
    elif backend in _SERVER_SCHEMES:
        allowed = _SERVER_PARAMS
    else:
        raise ConfigError(
            f"near-duplicate index spec {spec!r}: unknown backend {backend!r} "
            f"(memory, file, {', '.join(_SERVER_SCHEMES)})"
        )
    options: dict[str, Any] = {}
    for key, value in parsed.params.items():
        kind = allowed.get(key)
        if kind is None:
            raise ConfigError(
                f"near-duplicate index spec {spec!r}: unknown parameter {key!r} for {backend} "
                f"(allowed: {', '.join(sorted(allowed))})"
            )
        try:
            options[key] = kind(value)
        except ValueError:
            raise ConfigError(
                f"near-duplicate index spec {spec!r}: {key}={value!r} "
                f"is not a valid {kind.__name__}"
            ) from None
    options.update(overrides)
    if backend == "memory":
        return MemoryIndex(**options)
    if backend == "file":
        if not parsed.location:
            raise ConfigError(f"near-duplicate index spec {spec!r}: write file:PATH")
        return FileIndex(parsed.location, **options)
    if not parsed.location.startswith("//"):
        raise ConfigError(f"{spec!r}: write {backend}://host:port/db (or unix:///path.sock)")
    return ValkeyIndex(f"{backend}:{parsed.location}", **options)
