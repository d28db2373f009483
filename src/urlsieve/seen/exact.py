"""``exact:PATH`` — every URL's 64-bit fingerprint in a memory-mapped open-addressing table.

The table is an array of buckets of 8 slots (one 64-byte cache line each)
after the 4 KiB header (see :mod:`urlsieve.seen._mapped`). A slot holds a
fingerprint or 0 for empty (the fingerprint 0 is stored as 1). A URL's home
bucket comes from the top 32 bits of its fingerprint (``(fp >> 32) * buckets
>> 32``); slots fill left to right and a full bucket overflows into the next
one (linear probing by buckets). Nothing is ever deleted, so a lookup stops at
the first bucket with an empty slot.

At 85 % load the table grows by 2× (4× while it is under 8 MiB, about 840,000
URLs): the writer holding the lock rehashes into a new file (space reserved
first, so a full disk fails before anything changes), syncs it, renames it over
the store and marks the old file *retired*; every other process notices (the
retired word, or a link count of 0 under the lock) and reopens; a lock-free add
that overlapped the growth is redone in the new file (see
:mod:`urlsieve.seen._mapped`). Between growths the load is 42–85 %, so the
store costs 9.4–19 bytes per URL (21–85 % and up to 38 bytes while under
8 MiB); growing from the default size to a million URLs rewrites the table
twice (1.5× growth did it seven times, and cost 4× a presized store's adds;
2× four times). The new table is built in memory and written with
one ``pwrite`` and one ``fsync`` (up to :data:`GROW_IN_MEMORY`; a bigger one
in the new file's mapping): the old table's keys are inserted in slot order,
which is nearly sorted by home bucket, by the compiled insert (numpy reference:
sort them and place them in one vectorised pass).

Batches are compiled (``urlsieve._speedups``: ``exact_lookup``, and
``exact_insert``, which adds a batch's keys in order, so the first of repeats is
the new one); :func:`probe`, vectorised numpy, is the reference they are tested
against.

Exact up to 64-bit fingerprint collisions: with n URLs the expected number of
colliding pairs is n²/2⁶⁵ (3·10⁻⁸ at a million URLs, 0.03 at a billion);
``stats().extra["expected_fingerprint_collisions"]`` reports it.
"""

from __future__ import annotations

import glob
import math
import mmap
import os
import struct
from collections.abc import Iterable

import numpy as np
import numpy.typing as npt

from urlsieve._accel import speedups
from urlsieve.exceptions import ConfigError, StoreCorrupt
from urlsieve.fingerprint import (
    fingerprint_array64,
    fingerprint_one64,
    key_function,
)
from urlsieve.seen._mapped import (
    HEADER_SIZE,
    U64,
    W_COUNT,
    W_RETIRED,
    CountAhead,
    MappedStore,
    forks,
    new_file,
    pack_static,
    rank_in_groups,
)
from urlsieve.seen._single import KIND_EXACT, SeenBase, bind_key
from urlsieve.seen.base import StoreStats
from urlsieve.store.files import fsync_dir, os_error
from urlsieve.url import FILTER, Profile

__all__ = ["ExactStore"]

SLOTS = 8  # per bucket: one cache line
MAX_LOAD = 0.85
GROWTH = 2.0
#: A table smaller than this grows by :data:`FAST_GROWTH` instead (fewer rewrites and
#: fsyncs while the store is small: from the default size to a million URLs, two).
FAST_GROWTH_BELOW = 8 << 20
FAST_GROWTH = 4.0
#: A grown table up to this size is built in memory and written once; a bigger one in
#: the new file's mapping (so that a huge store never needs its table twice in memory).
GROW_IN_MEMORY = 256 << 20
DEFAULT_CAPACITY = 1 << 16
_HW = HEADER_SIZE // 8  # header size in words
_PARAMS = struct.Struct("<Q")  # number of buckets
_ROW = struct.Struct(f"<{SLOTS}Q")

Flags = npt.NDArray[np.bool_]

#: One add under the file lock in one compiled call (None without the extension).
_exact_add_locked = getattr(speedups, "exact_add_locked", None)


class _Regrown(Exception):
    """Internal: the table was replaced by a grown one; retry the operation on it."""


def _buckets_for(urls: float) -> int:
    return max(64, math.ceil(urls / (MAX_LOAD * SLOTS)))


def _home(keys: U64, buckets: int) -> npt.NDArray[np.intp]:
    return (((keys >> np.uint64(32)) * np.uint64(buckets)) >> np.uint64(32)).astype(np.intp)


def _rank(buckets: npt.NDArray[np.intp]) -> npt.NDArray[np.intp]:
    """How many earlier keys want the same bucket; cheap when the buckets are sorted."""
    n = len(buckets)
    if n > 1 and bool((buckets[1:] >= buckets[:-1]).all()):
        ramp = np.arange(n, dtype=np.intp)
        new_group = np.concatenate(([True], buckets[1:] != buckets[:-1]))
        ranks: npt.NDArray[np.intp] = ramp - np.maximum.accumulate(np.where(new_group, ramp, 0))
        return ranks
    return rank_in_groups(buckets)


def rebuild(table: U64, keys: U64) -> None:
    """Fill an empty ``table`` with sorted, distinct ``keys`` in one pass.

    Sorted keys have non-decreasing home buckets, so linear probing places key
    ``i`` at slot ``max(8·home[i], slot[i-1] + 1)``, a running maximum numpy
    computes at once. The few keys pushed past the end wrap around via probe().
    """
    slots_total = table.size
    ramp = np.arange(len(keys), dtype=np.int64)
    start = _home(keys, table.shape[0]).astype(np.int64) * SLOTS
    slot = np.maximum.accumulate(start - ramp) + ramp
    inside = slot < slots_total
    table.reshape(-1)[slot[inside]] = keys[inside]
    if not inside.all():
        probe(table, keys[~inside], insert=True)


def place(table: U64, keys: U64) -> None:
    """Fill an empty ``table`` with distinct, non-zero ``keys`` (a growing table's): compiled,
    in the order given (the old table's slot order, nearly sorted by home bucket, so the
    writes go forward through the new table), or :func:`rebuild` of the sorted keys."""
    if speedups is None:
        rebuild(table, np.sort(keys))
        return
    new = np.empty(len(keys), dtype=bool)
    if speedups.exact_insert(table, keys, new) < 0 or not new.all():
        raise StoreCorrupt("exact table: the keys do not fit the grown table (or repeat)")


def _write_all(fd: int, data: U64, offset: int) -> None:
    """``data``'s bytes to ``fd`` at ``offset`` (``pwrite`` until all of it is written)."""
    view = data.data.cast("B")
    done = 0
    while done < len(view):
        done += os.pwrite(fd, view[done : done + (64 << 20)], offset + done)


def probe(table: U64, keys: U64, insert: bool) -> Flags:
    """Look ``keys`` (distinct, non-zero) up in ``table`` (buckets × 8), inserting missing ones.

    Returns, per key, True when it was found (lookup) or newly inserted (insert).
    Every key advances one bucket per round; keys that want the same bucket in
    one round take its free slots in batch order. Sorted keys (as
    :meth:`ExactStore.add_fingerprints` passes them) have sorted home buckets,
    which makes that ranking a linear pass instead of a sort.
    """
    buckets = table.shape[0]
    n = len(keys)
    result = np.zeros(n, dtype=bool)
    at = _home(keys, buckets)
    todo = np.arange(n, dtype=np.intp)
    for _ in range(buckets + 1):
        if not todo.size:
            return result
        where = at[todo]
        wanted = keys[todo]
        rows = table.take(where, axis=0)
        hit = (rows == wanted[:, None]).any(axis=1)
        empty = rows == 0
        open_ = empty.any(axis=1)
        if insert:
            placed = np.zeros(len(todo), dtype=bool)
            cand = np.flatnonzero(~hit & open_)
            if cand.size:
                slot = empty[cand].argmax(axis=1) + _rank(where[cand])
                fits = slot < SLOTS
                go = cand[fits]
                table[where[go], slot[fits]] = wanted[go]
                result[todo[go]] = True
                placed[go] = True
            more = ~hit & ~placed
        else:
            result[todo[hit]] = True
            more = ~hit & ~open_
        todo = todo[more]
        at[todo] += 1
        at[todo[at[todo] == buckets]] = 0
    raise StoreCorrupt("exact table has no free slot (load accounting is wrong)")


class ExactStore(SeenBase, MappedStore):
    """Exact, persistent, shared by processes. ``capacity`` presizes a new file (URLs).

    ``add`` and ``in`` are one compiled call (the key and the lock-free add or lookup, see
    :mod:`urlsieve.seen._single`); ``_add_slow`` and ``_contains_slow`` are their reference
    and take what the compiled call leaves."""

    KIND = b"exact\0\0\0"
    NAME = "exact"

    _table: U64

    def __init__(
        self,
        location: str,
        *,
        profile: Profile = FILTER,
        capacity: int | None = None,
        readonly: bool = False,
        locked: bool = False,
    ) -> None:
        if capacity is not None and capacity < 1:
            raise ConfigError(f"exact:{location}: capacity must be at least 1, not {capacity}")
        self._locked = locked  # every add under the file lock (see seen._mapped)
        self._lockfree = not locked and not readonly  # single adds without the lock
        self._hint = capacity or DEFAULT_CAPACITY
        self._fp = fingerprint_one64(profile)
        self._key = key_function(profile, 64)  # the compiled key of a str, no Python frame
        self._buckets = 0
        self._limit = 0
        #: (words, buckets, limit) of the mapping, for the compiled lookup (None: unmapped)
        self._probe: tuple[memoryview, int, int] | None = None
        super().__init__(location, profile=profile, readonly=readonly)

    # ------------------------------------------------------------- file layout

    def _initial_layout(self) -> tuple[int, bytes]:
        buckets = _buckets_for(self._hint)
        return HEADER_SIZE + buckets * SLOTS * 8, _PARAMS.pack(buckets)

    def _load(self, params: bytes, size: int) -> None:
        (buckets,) = _PARAMS.unpack_from(params)
        need = HEADER_SIZE + buckets * SLOTS * 8
        if buckets < 1 or size < need:
            raise StoreCorrupt(
                f"{self._path}: truncated ({size:,} bytes, the header promises {need:,}); "
                "restore it from a backup or delete it to start afresh"
            )
        self._buckets = buckets
        self._limit = int(MAX_LOAD * buckets * SLOTS)
        self._table = self._words[_HW : _HW + buckets * SLOTS].reshape(buckets, SLOTS)
        if _exact_add_locked is not None:
            self._probe = (self._mv, buckets, self._limit)
            key = bind_key(self._profile)
            if key is not None:
                self._seen_bind(key, KIND_EXACT, self._mm, buckets, self._limit, self._lockfree)

    def _drop_views(self) -> None:
        self._seen_bind(None)
        self.__dict__.pop("_table", None)
        self._probe = None

    def _stale(self, locked: bool) -> bool:
        if not self._mv[W_RETIRED]:
            return False
        if locked and os.path.samestat(os.fstat(self._fd), os.stat(self._path)):
            # Retired, yet still the store: its grower died before the rename. Carry on here.
            self._mv[W_RETIRED] = 0
            return False
        return True

    def _recover(self) -> None:
        self._mv[W_COUNT] = int(np.count_nonzero(self._table))

    def _verify(self) -> None:
        used = int(np.count_nonzero(self._table))
        count = int(self._mv[W_COUNT])
        if used != count:
            if self._count_ahead(count, used):
                raise CountAhead(f"{self._path}: {count - used} ahead of the keys")
            raise self._damaged(f"{used:,} slots in use, the header counts {count:,}")

    # ----------------------------------------------------------------- growth

    def _grow(self, extra: int) -> None:
        """Rehash into a bigger file that holds ``extra`` more URLs; then :class:`_Regrown`."""
        flat = self._table.reshape(-1)
        keys = flat[flat != 0]
        # What the copy holds (a lock-free add that overlapped this section counted itself
        # in this file, or not yet: it redoes its add in the grown one).
        count = len(keys)
        growth = FAST_GROWTH if self._buckets * SLOTS * 8 < FAST_GROWTH_BELOW else GROWTH
        buckets = max(
            math.ceil(self._buckets * growth), _buckets_for((count + extra) * MAX_LOAD / 0.6)
        )
        for stale in glob.glob(glob.escape(self._path) + ".grow-*.tmp"):
            os.unlink(stale)  # left by a writer killed while growing (we hold the lock)
        tmp = f"{self._path}.grow-{os.getpid()}.tmp"
        size = HEADER_SIZE + buckets * SLOTS * 8
        fd = new_file(tmp, size, self._path, f"growing the table to {size:,} bytes")
        try:
            static = pack_static(self.KIND, self.VERSION, self._profile, _PARAMS.pack(buckets))
            if size <= GROW_IN_MEMORY:
                # Built in memory and written once (a new file's mapping faults each page
                # in, and msync walks it): the header, then the table.
                head = np.zeros(_HW, dtype=np.uint64)
                head.view(np.uint8)[: len(static)] = np.frombuffer(static, dtype=np.uint8)
                head[W_COUNT] = count
                table = np.zeros((buckets, SLOTS), dtype=np.uint64)
                place(table, keys)
                _write_all(fd, head, 0)
                _write_all(fd, table, HEADER_SIZE)
                del table
            else:  # too big to hold twice in memory: built in the new file's mapping
                with mmap.mmap(fd, size, access=mmap.ACCESS_WRITE) as mm:
                    mm[: len(static)] = static
                    words = np.frombuffer(mm, dtype=np.uint64)
                    place(words[_HW:].reshape(buckets, SLOTS), keys)
                    words[W_COUNT] = count
                    del words
                    mm.flush()
            os.fsync(fd)
            self._mv[W_RETIRED] = 1  # before the rename: readers must not miss the switch
            os.replace(tmp, self._path)
        except OSError as exc:
            raise os_error(exc, self._path, "growing the table") from exc
        finally:
            os.close(fd)
            if os.path.exists(tmp):
                os.unlink(tmp)
        try:
            fsync_dir(os.path.dirname(self._path) or ".")
        except OSError as exc:
            raise os_error(exc, self._path, "growing the table") from exc
        raise _Regrown

    # ------------------------------------------------------------ operations

    def _fingerprints(self, urls: Iterable[str]) -> U64:
        return fingerprint_array64(urls, self._profile)  # a 0 counts as 1: see add_fingerprints

    def _find(self, fp: int) -> tuple[bool, int]:
        """(found, word index of the slot holding ``fp`` or of the empty slot for it)."""
        mm = self._mm
        buckets = self._buckets
        bucket = ((fp >> 32) * buckets) >> 32
        for _ in range(buckets):
            row = _ROW.unpack_from(mm, HEADER_SIZE + bucket * SLOTS * 8)  # type: ignore[arg-type]
            if fp in row:
                return True, 0
            if 0 in row:
                return False, _HW + bucket * SLOTS + row.index(0)
            bucket += 1
            if bucket == buckets:
                bucket = 0
        raise StoreCorrupt(f"{self._path}: exact table has no free slot; rebuild the store")

    def _add_slow(self, url: str) -> bool:
        key = self._key
        fp = key(url) if key is not None and type(url) is str else None
        if fp is None:
            fp = self._fp(url)
        probe = self._probe  # inline, lock-free (a frame is a fifth of this call)
        if fp and probe is not None and self._lockfree and self._generation == forks[0]:
            held = _exact_add_locked(probe[0], -2, fp, probe[1], probe[2])  # type: ignore[misc]
            if held >= 0:
                if held == 2:  # added while a locked section ran: redone under the lock
                    self._add_locked(fp, recount=True)
                return bool(held != 1)
        return self.add_fingerprint(fp)

    def add_fingerprint(self, fp: int) -> bool:
        """Add one 64-bit fingerprint (0 counts as 1); True when it was new."""
        fp = fp or 1
        if _exact_add_locked is not None and not self._readonly:
            if self._locked:
                with self._lock:  # the lock, the header checks and the add in one call
                    probe = self._probe
                    held = -2
                    if probe is not None and self._generation == forks[0]:
                        held = _exact_add_locked(probe[0], self._fd, fp, probe[1], probe[2])
            else:  # lock-free (the GIL is held through the call: no thread remaps meanwhile)
                probe = self._probe
                held = -2
                if probe is not None and self._generation == forks[0]:
                    held = _exact_add_locked(probe[0], -2, fp, probe[1], probe[2])
            if held >= 0:
                if held == 2:  # added while a locked section ran: redone under the lock
                    self._add_locked(fp, recount=True)
                return held != 1
        return self._add_locked(fp)

    def _add_locked(self, fp: int, recount: bool = False) -> bool:
        """The add under the lock (the reference); ``recount``: first count the table again
        (a lock-free add overlapped a locked section, whose count write may have lost it)."""
        while True:
            try:
                with self._writing:
                    if recount:
                        self._recover()
                    found, slot = self._find(fp)
                    if found:
                        return False
                    if self._mv[W_COUNT] + 1 > self._limit:
                        self._grow(1)
                    self._mv[slot] = fp
                    self._mv[W_COUNT] += 1
                    return True
            except _Regrown:
                continue

    def add_many(self, urls: Iterable[str]) -> list[bool]:
        flags: list[bool] = self.add_fingerprints(self._fingerprints(urls)).tolist()
        return flags

    def add_fingerprints(self, keys: npt.ArrayLike) -> Flags:
        """Add 64-bit fingerprints (0 counts as 1); True where new, the first of repeats only."""
        keys = np.asarray(keys, dtype=np.uint64)
        if not len(keys):
            return np.zeros(0, dtype=bool)
        if not keys.all():  # 0 marks an empty slot
            keys = np.where(keys == 0, np.uint64(1), keys)
        if speedups is not None:  # compiled, in order: the first of repeats is the new one
            return self._insert(keys)
        out = np.zeros(len(keys), dtype=bool)
        order = np.argsort(keys)  # sorted keys have sorted home buckets: see probe()
        ordered = keys[order]
        starts = np.flatnonzero(np.concatenate(([True], ordered[1:] != ordered[:-1])))
        distinct = ordered[starts]
        # The earliest position of each distinct key (argsort is not stable).
        first = order if len(starts) == len(keys) else np.minimum.reduceat(order, starts)
        out[first[self._insert(distinct)]] = True
        return out

    def _insert(self, keys: U64) -> Flags:
        """Insert ``keys`` (distinct ones for the numpy reference); True for each new one.
        A batch that would pass the load limit grows the table first, so a full disk adds
        nothing of it."""
        while True:
            try:
                with self._writing:
                    count = int(self._mv[W_COUNT])
                    if count + len(keys) > self._limit:
                        missing = len(keys) - int(np.count_nonzero(self._lookup(keys)))
                        if count + missing > self._limit:  # repeats count more: grow early
                            self._grow(missing)
                    new = self._place(keys)
                    self._mv[W_COUNT] = count + int(np.count_nonzero(new))
                    return new
            except _Regrown:
                continue

    def _lookup(self, keys: U64) -> Flags:
        """Whether the table holds each key (the lock held): compiled, or :func:`probe`."""
        if speedups is None:
            return probe(self._table, keys, insert=False)
        found = np.empty(len(keys), dtype=bool)
        speedups.exact_lookup(self._table, keys, found)
        return found

    def _place(self, keys: U64) -> Flags:
        """Put the keys the table lacks in it (the lock held, the room checked); the new ones."""
        if speedups is None:
            return probe(self._table, keys, insert=True)
        new = np.empty(len(keys), dtype=bool)
        if speedups.exact_insert(self._table, keys, new) < 0:
            raise StoreCorrupt(f"{self._path}: exact table has no free slot; rebuild the store")
        return new

    def _contains_slow(self, url: object) -> bool:
        if not isinstance(url, str):
            return False
        key = self._key
        fp = key(url) if key is not None and type(url) is str else None
        fp = (self._fp(url) if fp is None else fp) or 1
        probe = self._probe  # one attribute: the views of one mapping (no lock needed)
        if probe is not None:  # the header check and the lookup in one call
            held = _exact_add_locked(probe[0], -1, fp, probe[1], probe[2])  # type: ignore[misc]
            if held >= 0:
                return bool(held)
        return self.contains_fingerprint(fp)

    def contains_fingerprint(self, fp: int) -> bool:
        """Membership of one 64-bit fingerprint (0 counts as 1)."""
        fp = fp or 1
        probe = self._probe
        if probe is not None:
            held = _exact_add_locked(probe[0], -1, fp, probe[1], probe[2])  # type: ignore[misc]
            if held >= 0:
                return bool(held)
        with self._reading:
            return self._find(fp)[0]

    def contains_many(self, urls: Iterable[str]) -> list[bool]:
        flags: list[bool] = self.contains_fingerprints(self._fingerprints(urls)).tolist()
        return flags

    def contains_fingerprints(self, keys: npt.ArrayLike) -> Flags:
        """Membership of 64-bit fingerprints (0 counts as 1)."""
        keys = np.asarray(keys, dtype=np.uint64)
        if not keys.all():  # 0 marks an empty slot
            keys = np.where(keys == 0, np.uint64(1), keys)
        with self._reading:
            return self._lookup(keys)

    def __len__(self) -> int:
        with self._reading:
            return int(self._mv[W_COUNT])

    def stats(self) -> StoreStats:
        with self._reading:
            count = int(self._mv[W_COUNT])
            slots = self._buckets * SLOTS
            size = HEADER_SIZE + slots * 8
            return StoreStats(
                backend=self.NAME,
                profile=self._profile.ident,
                count=count,
                exact=True,
                bytes_used=size,
                capacity=self._limit,
                fill_ratio=count / slots,
                extra={
                    "path": self._path,
                    "slots": slots,
                    "bytes_per_url": size / count if count else None,
                    "expected_fingerprint_collisions": count * (count - 1) / 2**65,
                },
            )
