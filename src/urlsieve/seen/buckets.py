"""``buckets:PATH?buckets=N&width=W&slots=P&growth=R`` — seed paper 001's hash table.

The paper's "improved hash table" keeps, beside every bucket, a bitmap of
``w`` bits and, instead of a linked list, one contiguous array of MD5
digests (16 bytes each) with room for ``p ≥ w`` digests:

* **insert** digest ``m``: bucket ``k = hash(m) % n``, slot ``i = H(m) % w``.
  Bit ``i`` clear means slot ``i`` is empty: write ``m`` there and set the
  bit. Otherwise scan the array from ``i`` to the first empty slot and
  write there; past the end, grow the array to ``p·r`` slots (``r > 1``),
  copy, and write at the first new slot.
* **lookup** digest ``q``: bit ``H(q) % w`` clear → absent without a single
  comparison; set → scan from that slot until ``q`` (present), an empty
  slot or the end (absent).

Nothing is ever deleted, so a scan may stop at the first empty slot. A
seen-store ``add`` is one pass of both: it stops at ``m`` (already seen) or
at the slot where it writes ``m``. The paper leaves ``hash`` and ``H``
open; here ``hash`` is the first 8 bytes of the digest and ``H`` the next
8 (big-endian), and the all-zero digest marks an empty slot (an MD5 of
zero has probability 2^-128).

:class:`ChainedHashTable` is the table it is compared with: the same
buckets, each a linked list of digest nodes.

Storage. The table lives in memory (the paper's setting); with a ``PATH`` it
is loaded from that file at open and written back by :meth:`flush` and
:meth:`close` into a temporary file that atomically replaces the old one,
so a crash leaves the last flushed table, never a torn one. One process
writes a file at a time (an exclusive lock on ``PATH.lock``); readers open it
with ``?readonly=1``. ``buckets:`` without a path is memory only. The bucket
count is fixed, as in the paper: a bucket scans linearly once its first
``w`` slots are taken, so choose ``buckets`` near the expected URLs / ``w``.
"""

from __future__ import annotations

import hashlib
import struct
import zlib
from collections.abc import Mapping

from urlsieve.exceptions import ConfigError, StoreCorrupt
from urlsieve.fingerprint import canonical_bytes
from urlsieve.seen._wholefile import WholeFileStore
from urlsieve.seen.base import StoreStats
from urlsieve.store.files import check_params, check_profile, pick
from urlsieve.url import FILTER, Profile

__all__ = ["BucketStore", "ChainedHashTable", "ImprovedHashTable", "md5_digest"]

DIGEST = 16
EMPTY = bytes(DIGEST)
MAGIC = b"URLSBKT\x01"
FORMAT_VERSION = 1
#: magic, version, buckets, width, slots, growth, count, profile
_HEAD = struct.Struct("<8sIIIIdQ64s")


#: Default buckets n, bitmap width w, initial slots p and growth factor r: 16 MB of
#: arrays at the start, efficient up to about n·w = 1M URLs.
DEFAULTS: tuple[int, int, int, float] = (16_384, 64, 64, 2.0)
PARAMS = ("buckets", "width", "slots", "growth")


def md5_digest(url: str, profile: Profile = FILTER) -> bytes:
    """The paper's key: the MD5 digest of the canonical URL."""
    return hashlib.md5(canonical_bytes(url, profile), usedforsecurity=False).digest()


def _bucket_of(digest: bytes, n: int) -> int:
    return int.from_bytes(digest[:8], "big") % n


class ImprovedHashTable:
    """Seed 001's table: per bucket a ``w``-bit bitmap beside a contiguous digest array.

    ``comparisons`` counts digests compared with a key (empty slots included,
    since telling them apart reads the slot too); ``bit_tests`` counts bitmap
    probes. Both are there for the paper's experiment.
    """

    def __init__(
        self, buckets: int = 16_384, width: int = 64, slots: int = 64, growth: float = 2.0
    ) -> None:
        if buckets < 1:
            raise ConfigError(f"buckets={buckets}: need at least one bucket")
        if width < 1 or slots < width:
            raise ConfigError(
                f"width={width}, slots={slots}: the paper requires 1 <= w <= p (slots >= width)"
            )
        if not growth > 1:
            raise ConfigError(f"growth={growth}: the growth factor r must be > 1")
        self.buckets = buckets
        self.width = width
        self.slots = slots
        self.growth = growth
        self._bitmaps = [0] * buckets
        self._arrays = [bytearray(slots * DIGEST) for _ in range(buckets)]
        self.count = 0
        self.comparisons = 0
        self.bit_tests = 0
        self.growths = 0

    def _slot(self, digest: bytes) -> int:
        return int.from_bytes(digest[8:], "big") % self.width

    def add(self, digest: bytes) -> bool:
        """Insert ``digest`` unless present; True when it was new."""
        k = _bucket_of(digest, self.buckets)
        i = self._slot(digest)
        self.bit_tests += 1
        bitmap = self._bitmaps[k]
        arr = self._arrays[k]
        if not bitmap >> i & 1:  # slot i is empty: write there
            arr[i * DIGEST : (i + 1) * DIGEST] = digest
            self._bitmaps[k] = bitmap | 1 << i
            self.count += 1
            return True
        size = len(arr) // DIGEST
        j = i
        while j < size:
            self.comparisons += 1
            slot = arr[j * DIGEST : (j + 1) * DIGEST]
            if slot == digest:
                return False
            if slot == EMPTY:
                break
            j += 1
        else:  # no free slot up to the end: grow the array by r and write at the old end
            grown = bytearray(max(size + 1, int(size * self.growth)) * DIGEST)
            grown[: len(arr)] = arr
            self._arrays[k] = arr = grown
            self.growths += 1
        arr[j * DIGEST : (j + 1) * DIGEST] = digest
        if j < self.width:
            self._bitmaps[k] |= 1 << j
        self.count += 1
        return True

    def __contains__(self, digest: bytes) -> bool:
        k = _bucket_of(digest, self.buckets)
        i = self._slot(digest)
        self.bit_tests += 1
        if not self._bitmaps[k] >> i & 1:
            return False
        arr = self._arrays[k]
        for j in range(i, len(arr) // DIGEST):
            self.comparisons += 1
            slot = arr[j * DIGEST : (j + 1) * DIGEST]
            if slot == digest:
                return True
            if slot == EMPTY:
                return False
        return False

    def __len__(self) -> int:
        return self.count

    def nbytes(self) -> int:
        """Bytes of digest arrays and bitmaps."""
        return sum(len(a) for a in self._arrays) + self.buckets * ((self.width + 7) // 8)

    def longest_array(self) -> int:
        return max(len(a) for a in self._arrays) // DIGEST

    # -- serialisation (used by BucketStore) --------------------------------------------

    def dump(self) -> bytes:
        parts = []
        wbytes = (self.width + 7) // 8
        for bitmap, arr in zip(self._bitmaps, self._arrays, strict=True):
            parts.append(struct.pack("<I", len(arr) // DIGEST))
            parts.append(bitmap.to_bytes(wbytes, "little"))
            parts.append(bytes(arr))
        return b"".join(parts)

    def load(self, blob: memoryview, where: str) -> None:
        wbytes = (self.width + 7) // 8
        pos = 0
        try:
            for k in range(self.buckets):
                (size,) = struct.unpack_from("<I", blob, pos)
                pos += 4
                self._bitmaps[k] = int.from_bytes(blob[pos : pos + wbytes], "little")
                pos += wbytes
                if size < self.slots or pos + size * DIGEST > len(blob):
                    raise StoreCorrupt(f"{where}: bucket {k} is damaged")
                self._arrays[k] = bytearray(blob[pos : pos + size * DIGEST])
                pos += size * DIGEST
        except struct.error as exc:
            raise StoreCorrupt(f"{where}: truncated bucket table") from exc
        if pos != len(blob):
            raise StoreCorrupt(f"{where}: {len(blob) - pos} stray bytes after the buckets")


class ChainedHashTable:
    """The classic table seed 001 compares with: each bucket a linked list of digests."""

    def __init__(self, buckets: int = 100) -> None:
        if buckets < 1:
            raise ConfigError(f"buckets={buckets}: need at least one bucket")
        self.buckets = buckets
        # A node is [digest, next_node]; a bucket holds its head node (or None).
        self._heads: list[list[object] | None] = [None] * buckets
        self.count = 0
        self.comparisons = 0

    def add(self, digest: bytes) -> bool:
        k = _bucket_of(digest, self.buckets)
        node = self._heads[k]
        while node is not None:
            self.comparisons += 1
            if node[0] == digest:
                return False
            node = node[1]  # type: ignore[assignment]
        self._heads[k] = [digest, self._heads[k]]
        self.count += 1
        return True

    def __contains__(self, digest: bytes) -> bool:
        node = self._heads[_bucket_of(digest, self.buckets)]
        while node is not None:
            self.comparisons += 1
            if node[0] == digest:
                return True
            node = node[1]  # type: ignore[assignment]
        return False

    def __len__(self) -> int:
        return self.count


class BucketStore(WholeFileStore[ImprovedHashTable]):
    """A seen store on :class:`ImprovedHashTable` (exact, up to MD5 collisions)."""

    kind = "bucket"

    def __init__(
        self,
        location: str = "",
        *,
        profile: Profile = FILTER,
        buckets: int | None = None,
        width: int | None = None,
        slots: int | None = None,
        growth: float | None = None,
        readonly: bool = False,
    ) -> None:
        given = {"buckets": buckets, "width": width, "slots": slots, "growth": growth}
        super().__init__(location, profile, readonly, given)

    def _key(self, url: str) -> bytes:
        return md5_digest(url, self._profile)

    def _new(self, given: Mapping[str, float | None]) -> ImprovedHashTable:
        n, w, p, r = (pick(given, k, d) for k, d in zip(PARAMS, DEFAULTS, strict=True))
        return ImprovedHashTable(int(n), int(w), int(p), r)

    def _decode(
        self, data: bytes, where: str, given: Mapping[str, float | None]
    ) -> ImprovedHashTable:
        if len(data) < _HEAD.size + 4 or data[:8] != MAGIC:
            raise StoreCorrupt(f"{where}: not a urlsieve bucket store (bad magic or too short)")
        if zlib.crc32(data[:-4]) != int.from_bytes(data[-4:], "little"):
            raise StoreCorrupt(
                f"{where}: checksum mismatch (truncated or damaged); restore it or delete it"
            )
        _, version, n, w, p, r, count, ident = _HEAD.unpack_from(data)
        if version != FORMAT_VERSION:
            raise StoreCorrupt(f"{where}: unsupported bucket store format {version}")
        check_profile(ident.rstrip(b"\0").decode("ascii", "replace"), self._profile, where)
        check_params(where, given, dict(zip(PARAMS, (n, w, p, r), strict=True)))
        table = ImprovedHashTable(n, w, p, r)
        table.load(memoryview(data)[_HEAD.size : -4], where)
        table.count = count
        return table

    def _encode(self) -> bytes:
        t = self._table
        ident = self._profile.ident.encode("ascii")
        head = _HEAD.pack(
            MAGIC, FORMAT_VERSION, t.buckets, t.width, t.slots, t.growth, t.count, ident
        )
        body = head + t.dump()
        return body + zlib.crc32(body).to_bytes(4, "little")

    @property
    def table(self) -> ImprovedHashTable:
        return self._table

    def stats(self) -> StoreStats:
        t = self._table
        return StoreStats(
            backend="buckets",
            profile=self._profile.ident,
            count=t.count,
            exact=True,
            bytes_used=t.nbytes(),
            fill_ratio=t.count / (t.buckets * t.width),
            extra={
                "buckets": t.buckets,
                "width": t.width,
                "slots": t.slots,
                "growth": t.growth,
                "array_growths": t.growths,
                "longest_array": t.longest_array(),
                "comparisons": t.comparisons,
                "path": str(self._path) if self._path else None,
            },
        )
