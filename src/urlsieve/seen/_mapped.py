"""What the memory-mapped stores (``exact:``, ``bloom:``) share: file header, creation, locking.

File layout (little-endian)::

    0     magic  b"URLSIEVE"
    8     kind   b"exact\\0\\0\\0" | b"bloom\\0\\0\\0"
    16    format version (u32), header size (u32)
    24    profile ident, 64 bytes, NUL-padded (``filter/1``)
    88    kind-specific parameters (160 bytes)
    252   CRC-32 of bytes 0..251                       -- the static header ends here
    256   dynamic words (u64): dirty, retired, count, … -- written while the store is used
    512   kind-specific dynamic area (bloom: the layer table)
    4096  data

The static header is written once, when the file is created, and is checked
on every open. The dynamic words are single aligned 8-byte stores, so a
process killed between two of them never leaves a torn word behind.

**Concurrency.** Writers take an exclusive ``flock`` on the file for the
duration of one batch, a growth or a repair (fingerprints are computed
before, so the critical section is only the table update). ``flock`` belongs
to the open file description, so two store objects in one process exclude
each other too, and a forked child reopens the file instead of sharing its
parent's lock. A writer sets the *dirty* word when it takes the lock and
clears it when it is done; a writer that finds it set knows the previous
one died mid-update and repairs what the store needs repaired.

**Lock-free single adds.** One ``add`` (compiled) takes no lock by default: it
writes with atomics only (exact: a compare-and-swap into an empty slot, then
the count + 1; Bloom: the count + 1, then an atomic OR per word), between two
reads of the *sequence* word, which every locked section makes odd (a new
value, then a full fence) when it starts and even when it ends. An add that
saw the same even value before and after was complete before any section that
it did not see started: that section sees it. An add that saw it change is
redone under the lock (idempotent; exact recounts first, since the section's
plain count write may have lost its + 1). Lock-free adds register in the
*adding* word (``epoch << 32 | in flight``); a locked section, its sequence
odd (new adds give up and take the lock), waits up to 2 ms for the
registered ones to leave, takes those that stay for dead (killed mid-add),
repairs what they may have left (the dirty word's repair) and opens a new
epoch. The whole argument is in ``_speedups.c`` (``store_session``). The
store option ``locked`` (``?locked=1``) takes the lock for every add instead:
then, of several processes adding one URL at once, exactly one is told it is
new (lock-free: exact, the same unless a batch or a growth overlaps the add;
Bloom, each may be). Every process sharing a file must follow this protocol:
a urlsieve from before it writes without the sequence. Without the compiled
extension every add is locked.

**Creation** is atomic: the file is written under a temporary name, with
its space reserved (``posix_fallocate``, so a full disk is an error at once
and never a ``SIGBUS`` on a page fault later), synced, and linked into place.
"""

from __future__ import annotations

import errno
import fcntl
import mmap
import os
import struct
import threading
import time
import zlib
from contextlib import suppress
from types import TracebackType
from typing import ClassVar

import numpy as np
import numpy.typing as npt

from urlsieve._accel import speedups
from urlsieve._bits import bit_counts, popcount
from urlsieve.exceptions import (
    StoreClosed,
    StoreCorrupt,
    StoreError,
    StoreReadOnly,
    UrlsieveError,
)
from urlsieve.store.base import ClosingStore
from urlsieve.store.files import check_profile, fsync_dir, os_error
from urlsieve.url import FILTER, Profile

__all__ = [
    "HEADER_SIZE",
    "IN_FLIGHT",
    "VERIFY_ON_OPEN_BYTES",
    "MappedStore",
    "bit_counts",
    "popcount",
    "rank_in_groups",
]

HEADER_SIZE = 4096
#: Stores with at most this much data are checked against their header on every open.
VERIFY_ON_OPEN_BYTES = 256 << 20
MAGIC = b"URLSIEVE"
PARAMS_OFFSET = 88
VERSION_OFFSET = 16
PARAMS_SIZE = 160
CRC_OFFSET = 252
_STATIC = struct.Struct("<8s8sII64s")

# Dynamic header words (index into the file as an array of u64).
W_DIRTY = 32
W_RETIRED = 33
W_COUNT = 34
W_NLAYERS = 35
W_SEQ = 36  # the locked sections' sequence: odd while one runs
W_ADDING = 37  # epoch << 32 | lock-free adds in flight
# Lock-free adds taken for dead so far (locked sections add to it): one of them that was
# only slow may still raise the count once after the recount that took it for dead (and
# be killed before its redo), so the count may exceed the keys by at most this much.
W_STRAGGLERS = 38
IN_FLIGHT = 0xFFFFFFFF
_M64 = (1 << 64) - 1
#: How long a locked section waits for the lock-free adds in flight (the compiled wait's).
ADDING_WAIT = 0.002

U64 = npt.NDArray[np.uint64]


#: Bumped in a forked child, so that stores reopen their file there instead of sharing
#: the parent's descriptor (and with it the parent's lock).
forks = [0]


def _after_fork() -> None:
    forks[0] += 1


os.register_at_fork(after_in_child=_after_fork)


#: The locked sections' steps on the header words, compiled (atomics and fences; None
#: without the extension: then :func:`session_py`, and this process adds only locked).
_store_session = getattr(speedups, "store_session", None)


def session_py(mv: memoryview, op: int, word: int = W_DIRTY) -> int:
    """The reference of ``_speedups.store_session`` (plain stores: no fence; the words wrap
    at 2**64 as the C's do, whatever a damaged or hostile header holds)."""
    if op == 0:
        mv[W_SEQ] = ((mv[W_SEQ] + 2) | 1) & _M64
        deadline = time.monotonic() + ADDING_WAIT
        while mv[W_ADDING] & IN_FLIGHT and time.monotonic() < deadline:
            os.sched_yield()
        return int(bool(mv[W_ADDING] & IN_FLIGHT))
    if op == 1:
        mv[W_SEQ] = (mv[W_SEQ] + (mv[W_SEQ] & 1)) & _M64
    elif op == 2:
        mv[W_ADDING] = (((mv[W_ADDING] >> 32) + 1) << 32) & _M64
    else:
        mv[word] = (mv[word] + 1) & _M64
    return 0


def session(mv: memoryview, op: int, word: int = W_DIRTY) -> int:
    """A locked section's step (see ``_speedups.store_session``): 0 enter, 1 leave, 2 new
    epoch of the lock-free adds, 3 header word ``word`` + 1 atomically."""
    if _store_session is None:
        return session_py(mv, op, word)
    held: int = _store_session(mv, op, word)
    return held


class CountAhead(StoreCorrupt):
    """The count is above the keys by no more than the adds taken for dead may have left
    (:data:`W_STRAGGLERS`): not damage; :meth:`MappedStore.verify` recounts."""


class _Session:
    """``with store._reading:`` / ``with store._writing:`` (a class: cheaper than a generator)."""

    __slots__ = ("_store", "_write")

    def __init__(self, store: MappedStore, write: bool) -> None:
        self._store = store
        self._write = write

    def __enter__(self) -> None:
        store = self._store
        store._lock.acquire()
        try:
            if self._write:
                store._begin_write()
            else:
                store._begin_read()
        except BaseException:
            store._lock.release()
            raise

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        store = self._store
        try:
            if self._write:
                store._end_write(exc_type is None)
        finally:
            store._lock.release()


def pack_static(kind: bytes, version: int, profile: Profile, params: bytes) -> bytes:
    ident = profile.ident.encode("utf-8")
    if len(ident) > 64:
        raise StoreError(f"profile ident {profile.ident!r} is longer than 64 bytes")
    head = _STATIC.pack(MAGIC, kind, version, HEADER_SIZE, ident) + params.ljust(PARAMS_SIZE, b"\0")
    return sealed(head.ljust(CRC_OFFSET, b"\0"))


def sealed(head: bytes | bytearray) -> bytes:
    """The static header's first ``CRC_OFFSET`` bytes followed by their checksum."""
    return bytes(head) + struct.pack("<I", zlib.crc32(head))


def seal_holds(head: bytes) -> bool:
    """Whether a static header (``CRC_OFFSET + 4`` bytes) matches its checksum."""
    return bool(struct.unpack_from("<I", head, CRC_OFFSET)[0] == zlib.crc32(head[:CRC_OFFSET]))


def reserve(fd: int, offset: int, length: int, path: str, doing: str) -> None:
    """Allocate ``length`` bytes at ``offset`` for real (zeroed), or raise :class:`StoreFull`."""
    try:
        os.posix_fallocate(fd, offset, length)
    except OSError as exc:
        raise os_error(exc, path, doing) from exc


def new_file(tmp: str, size: int, path: str, doing: str) -> int:
    """Create ``tmp`` exclusively with ``size`` bytes reserved; its descriptor, or a store error."""
    try:
        fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        raise os_error(exc, path, doing) from exc
    try:
        reserve(fd, 0, size, path, doing)
    except BaseException:
        os.close(fd)
        os.unlink(tmp)
        raise
    return fd


class MappedStore(ClosingStore):
    """Base of the file-backed stores: one file, memory-mapped shared, locked per write."""

    KIND: ClassVar[bytes]
    NAME: ClassVar[str]
    #: 2: single adds are lock-free (the sequence and adding words, see the module). A
    #: version-1 file (written before) is read, and upgraded to 2 by the first read-write
    #: open, so that a urlsieve from before, which adds under the lock alone, refuses it
    #: from then on instead of writing beside lock-free adders.
    VERSION: ClassVar[int] = 2
    READS: ClassVar[tuple[int, ...]] = (1, 2)

    _file_version: int  # the format version the file's header holds
    _words: U64  # the whole file as u64 words (header included)
    _mv: memoryview  # the same as a memoryview of 'Q', for fast scalar access

    def __init__(self, location: str, *, profile: Profile = FILTER, readonly: bool = False) -> None:
        if not location:
            raise StoreError(
                f"{self.NAME}: needs a file path, "
                f"e.g. '{self.NAME}:/var/lib/crawl/seen.{self.NAME}'"
            )
        self._path = os.path.abspath(location)
        self._profile = profile
        self._readonly = readonly
        self._lock = threading.RLock()
        self._fd = -1
        self._mm: mmap.mmap | None = None
        self._generation = forks[0]
        self._reading = _Session(self, write=False)
        self._writing = _Session(self, write=True)
        self._attach()
        if not readonly and self._file_version != self.VERSION:
            self._upgrade()
        if os.fstat(self._fd).st_size - HEADER_SIZE <= VERIFY_ON_OPEN_BYTES:
            self.verify()
        elif not readonly:
            with self._writing:  # repairs what a writer killed mid-update left behind
                pass

    def verify(self) -> None:
        """Check the data area against the header; :class:`StoreCorrupt` when they disagree.

        Done on every open of a store of up to :data:`VERIFY_ON_OPEN_BYTES` of data (call
        it for a larger one). What it catches is the kind's (see ``_verify``): damage
        that empties or fills slots and bits, not one changed bit inside a used slot.
        """
        if not self._readonly:
            with self._writing:  # repairs what a writer killed mid-update left behind
                pass
        recount = False
        with self._reading:
            fcntl.flock(self._fd, fcntl.LOCK_SH)  # no writer changes it while it is counted
            try:
                # Lock-free adds may run meanwhile: a check they overlapped (an add in
                # flight, or the header words changed) says nothing; try again.
                for _ in range(20):
                    if self._mv[W_DIRTY]:  # a dead writer's leftovers are repaired on write
                        return
                    mark = bytes(self._mm[256:HEADER_SIZE])  # type: ignore[index]
                    try:
                        self._verify()
                        return
                    except CountAhead:
                        recount = True
                        break
                    except StoreCorrupt:
                        if self._mv[W_ADDING] & IN_FLIGHT == 0 and mark == bytes(
                            self._mm[256:HEADER_SIZE]  # type: ignore[index]
                        ):
                            raise
                    time.sleep(0.001)
            finally:
                fcntl.flock(self._fd, fcntl.LOCK_UN)
        if recount and not self._readonly:
            with self._writing:  # a straggler's late + 1: the count made right again
                self._recover()

    # ------------------------------------------------------------------ opening

    @property
    def profile(self) -> Profile:
        return self._profile

    @property
    def path(self) -> str:
        return self._path

    def _attach(self) -> None:
        """Open (creating if needed and allowed) the file at ``self._path`` and map it."""
        flags = os.O_RDONLY if self._readonly else os.O_RDWR
        for _ in range(100):
            try:
                fd = os.open(self._path, flags | os.O_CLOEXEC)
            except FileNotFoundError:
                if self._readonly:
                    raise StoreError(
                        f"{self._path}: no {self.NAME} store there; open it once without "
                        "?readonly=1 to create it"
                    ) from None
                self._create()
                continue
            except OSError as exc:
                raise os_error(exc, self._path, "opening") from exc
            try:
                self._fd = fd
                self._map()
            except BaseException:
                self._unmap()
                os.close(fd)
                self._fd = -1
                raise
            self._generation = forks[0]
            return
        raise StoreError(f"{self._path}: the file keeps changing while it is opened")

    def _map(self) -> None:
        size = os.fstat(self._fd).st_size
        magic = os.pread(self._fd, len(MAGIC), 0)
        if len(magic) == len(MAGIC) and magic != MAGIC:
            raise StoreCorrupt(
                f"{self._path}: not a urlsieve store (bad magic {magic!r}); pass another path, "
                "or delete the file if it is yours to replace"
            )
        if size < HEADER_SIZE or size % 64:
            raise StoreCorrupt(
                f"{self._path}: truncated or damaged ({size} bytes: a store has at least "
                f"{HEADER_SIZE}, in whole 64-byte blocks); restore it from a backup or delete "
                "it to start afresh"
            )
        access = mmap.ACCESS_READ if self._readonly else mmap.ACCESS_WRITE
        self._mm = mm = mmap.mmap(self._fd, size, access=access)
        head = bytes(mm[: CRC_OFFSET + 4])
        for _ in range(5):  # a version upgrade rewrites the header under the lock: read again
            if seal_holds(head):
                break
            time.sleep(0.001)
            head = bytes(mm[: CRC_OFFSET + 4])
        self._check_static(head)
        self._words = np.frombuffer(mm, dtype=np.uint64)
        self._mv = memoryview(mm).cast("Q")
        try:
            self._load(bytes(mm[PARAMS_OFFSET : PARAMS_OFFSET + PARAMS_SIZE]), size)
        except UrlsieveError:
            raise
        except (ValueError, OverflowError, IndexError, struct.error) as exc:
            # Parameters no writer wrote (the checksum matched by chance or by hand).
            raise StoreCorrupt(
                f"{self._path}: impossible parameters in the header ({exc}); restore it "
                "from a backup or delete it to start afresh"
            ) from exc

    def _check_static(self, head: bytes) -> None:
        magic, kind, version, header_size, ident = _STATIC.unpack_from(head)
        path, name = self._path, self.NAME
        if magic != MAGIC:
            raise StoreCorrupt(
                f"{path}: not a urlsieve store (bad magic {magic!r}); pass another path, "
                "or delete the file if it is yours to replace"
            )
        if kind != self.KIND:
            other = kind.rstrip(b"\0").decode("ascii", "replace")
            raise StoreCorrupt(
                f"{path}: holds a {other!r} store, not {name!r}: open it as '{other}:'"
            )
        if not seal_holds(head):
            raise StoreCorrupt(
                f"{path}: header checksum mismatch (the file is damaged); restore it from a "
                "backup or delete it to start afresh"
            )
        if version not in self.READS or header_size != HEADER_SIZE:
            reads = ", ".join(map(str, self.READS))
            raise StoreCorrupt(
                f"{path}: {name} format version {version} (this urlsieve reads {reads}); "
                "open it with the urlsieve that wrote it"
            )
        self._file_version = version
        check_profile(ident.rstrip(b"\0").decode("utf-8", "replace"), self._profile, path)

    def _upgrade(self) -> None:
        """Write this version into an older file's header, under the lock (its layout is
        the same: only the protocol of single adds is new)."""
        with self._writing:
            mm = self._mm
            assert mm is not None
            head = bytearray(mm[:CRC_OFFSET])
            if _STATIC.unpack_from(head)[2] != self.VERSION:  # (or another process did)
                struct.pack_into("<I", head, VERSION_OFFSET, self.VERSION)
                mm[: CRC_OFFSET + 4] = sealed(head)
            self._file_version = self.VERSION

    def _create(self) -> None:
        """Create the store file atomically (another process may be creating it too)."""
        size, params = self._initial_layout()
        directory = os.path.dirname(self._path)
        if directory and not os.path.isdir(directory):
            raise StoreError(f"{self._path}: directory {directory} does not exist; create it first")
        tmp = f"{self._path}.new-{os.getpid()}-{threading.get_ident()}.tmp"
        fd = new_file(tmp, size, self._path, f"creating the store ({size:,} bytes)")
        try:
            with mmap.mmap(fd, size, access=mmap.ACCESS_WRITE) as mm:
                mm[: CRC_OFFSET + 4] = pack_static(self.KIND, self.VERSION, self._profile, params)
                words = np.frombuffer(mm, dtype=np.uint64)
                self._init_dynamic(words)
                del words
                mm.flush()
            os.fsync(fd)
            try:
                os.link(tmp, self._path)
            except FileExistsError:
                pass  # another process won the race: open its file
            except OSError as exc:
                if exc.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP):
                    raise os_error(exc, self._path, "creating the store") from exc
                os.rename(tmp, self._path)  # no hard links here: plain rename
            fsync_dir(os.path.dirname(self._path) or ".")
        except OSError as exc:
            raise os_error(exc, self._path, "creating the store") from exc
        finally:
            os.close(fd)
            with suppress(FileNotFoundError):
                os.unlink(tmp)

    def _unmap(self) -> None:
        for name in ("_words", "_mv"):
            view = self.__dict__.pop(name, None)
            if isinstance(view, memoryview):
                view.release()
        self._drop_views()
        if self._mm is not None:
            with suppress(BufferError):  # a view survives (in a traceback): leave it to the GC
                self._mm.close()
            self._mm = None

    def _reattach(self) -> None:
        self._unmap()
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        self._attach()

    def _remap(self) -> None:
        """Map the file again at its current size (it grew)."""
        self._unmap()
        self._map()

    # --------------------------------------------------------- subclass hooks

    def _initial_layout(self) -> tuple[int, bytes]:
        """Size of a new file and its packed parameters."""
        raise NotImplementedError

    def _init_dynamic(self, words: U64) -> None:
        """Fill the dynamic header of a new file (zeroed already)."""

    def _load(self, params: bytes, size: int) -> None:
        """Read the parameters of an opened file, check its size, make the data views."""
        raise NotImplementedError

    def _drop_views(self) -> None:
        """Forget every view into the mapping (before it is closed)."""

    def _stale(self, locked: bool) -> bool:
        """True when the mapped file is no longer the store (replaced by a grown one).

        ``locked``: the caller holds the write lock and can afford a thorough check.
        """
        return False

    def _refresh(self) -> None:
        """Catch up with changes other processes made to the layout (new layers)."""

    def _recover(self) -> None:
        """Repair what a writer that died mid-update left behind (the dirty word was set)."""

    def _verify(self) -> None:
        """Raise :class:`StoreCorrupt` when the data disagrees with the header (lock held)."""

    def _count_ahead(self, count: int, keys: int) -> bool:
        """Whether a count above the keys is what stragglers may have left (see
        :data:`W_STRAGGLERS`): not damage, and a recount repairs it."""
        return 0 < count - keys <= int(self._mv[W_STRAGGLERS])

    def _damaged(self, what: str) -> StoreCorrupt:
        return StoreCorrupt(
            f"{self._path}: the data area is damaged ({what}); restore the file from a "
            "backup, or delete it to start afresh"
        )

    # ----------------------------------------------------------------- locking

    def _check_open(self) -> None:
        if self._mm is None:
            raise StoreClosed(f"{self._path}: the {self.NAME} store is closed")
        if self._generation != forks[0]:  # forked: never share the parent's descriptor and lock
            self._reattach()

    def _begin_read(self) -> None:
        self._check_open()
        if self._stale(locked=False):
            self._reattach()
        self._refresh()

    def _begin_write(self) -> None:
        if self._readonly:
            raise StoreReadOnly(
                f"{self._path}: opened read-only (?readonly=1); "
                "open it without readonly to add URLs"
            )
        self._check_open()
        while True:
            fcntl.flock(self._fd, fcntl.LOCK_EX)
            if not self._stale(locked=True):
                break
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            self._reattach()
        try:
            self._refresh()
            dead_adders = session(self._mv, 0)  # the sequence odd, the adds in flight gone
            if self._mv[W_DIRTY] or dead_adders:
                self._recover()
            if dead_adders:
                taken = self._mv[W_ADDING] & IN_FLIGHT
                self._mv[W_STRAGGLERS] = (self._mv[W_STRAGGLERS] + taken) & _M64
                session(self._mv, 2)
            self._mv[W_DIRTY] = 1
        except BaseException:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            raise

    def _end_write(self, ok: bool) -> None:
        """Release the write lock; the dirty word stays set when the update did not finish."""
        if ok and self._mm is not None:  # else the next writer repairs (odd sequence: the
            session(self._mv, 1)  # lock-free adds take the lock until then)
            self._mv[W_DIRTY] = 0
        if self._fd >= 0:
            fcntl.flock(self._fd, fcntl.LOCK_UN)

    # ------------------------------------------------------------ lifecycle

    def flush(self) -> None:
        """Write every add that has returned to disk (``msync`` + ``fsync``)."""
        with self._lock:
            if self._mm is None or self._readonly:
                return
            try:
                self._mm.flush()
                os.fsync(self._fd)
            except OSError as exc:
                raise os_error(exc, self._path, "flushing") from exc

    def close(self) -> None:
        """Unmap and close (without ``fsync``: call :meth:`flush` for durability)."""
        with self._lock:
            self._unmap()
            if self._fd >= 0:
                os.close(self._fd)
            self._fd = -1

    def __del__(self) -> None:
        with suppress(Exception):
            self.close()

    def __repr__(self) -> str:
        mode = ", readonly" if self._readonly else ""
        return f"<{type(self).__name__} {self._path!r} {self._profile.ident}{mode}>"


def rank_in_groups(values: npt.NDArray[np.intp]) -> npt.NDArray[np.intp]:
    """For each element, how many earlier elements have the same value (0 for the first)."""
    n = len(values)
    if n < 2:
        return np.zeros(n, dtype=np.intp)
    ramp = np.arange(n, dtype=np.int64)
    ordered = np.sort(values.astype(np.int64) * n + ramp)  # unique keys: position breaks ties
    sorted_values = ordered // n
    new_group = np.empty(n, dtype=bool)
    new_group[0] = True
    np.not_equal(sorted_values[1:], sorted_values[:-1], out=new_group[1:])
    starts = np.maximum.accumulate(np.where(new_group, ramp, 0))
    rank = np.empty(n, dtype=np.intp)
    rank[ordered % n] = ramp - starts
    return rank
