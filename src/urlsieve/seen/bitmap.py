"""``bitmap:DIR?signature=crc32|md5|sha1&width=W`` — seed patent 002, faithfully.

Each URL gets a signature of its canonical form; the leading bits of the
signature name a file, the following bits index one bit inside it, and a
lookup tests and sets that bit in a memory-mapped file shared by every
process that opens the directory. One URL costs one bit; the result
survives restarts.

Layout (the patent's scheme, with a documented truncation rule):

* **crc32** (two levels, as in the patent's example): the first 8 bits name
  one of 256 files ``00``..``FF``; the remaining ``width - 8`` bits index a
  bit inside it. With the default ``width=32`` that is the patent's
  256 files of 2 MB (512 MB, created zeroed when the store is created).
* **md5 / sha1** (three levels, the patent's ``x21 + x22 + x23`` split): the
  first byte names a directory ``00``..``FF``, the second a file inside it,
  and the next ``width - 16`` bits index a bit. A 128- or 160-bit digest
  cannot index one bit per value (2^128 bits), so only the **leading
  ``width`` bits of the big-endian digest are used** and the rest is
  dropped. The default ``width=32`` gives the same 512 MB as CRC32 in
  65,536 files of 8 KB, created zeroed on first write; ``width`` up to 48
  lowers the false-positive floor at the cost of 2^width bits of disk.

Bits inside a byte are numbered from the least significant (bit ``b`` of a
file is ``byte[b >> 3] & (1 << (b & 7))``).

Whatever the signature, a store of ``2^width`` bits reports a URL it never
saw as seen with probability equal to the fraction of bits set, which for
``n`` distinct URLs is ``1 - exp(-n / 2^width)``: the *false-positive
floor* of the design (0.23 % at 10^7 URLs, 2.3 % at 10^8, 21 % at 10^9 for
``width=32``). :meth:`BitmapStore.stats` reports it.

Concurrency and crash safety. ``DIR/bitmap.hdr`` holds the parameters, the
profile and one 64-bit counter of new URLs per data file. A writer holds a
POSIX byte-range lock (``fcntl``) on that file's counter while it tests and
sets a bit and bumps the counter, so processes adding at once never lose a
bit (a plain read-modify-write of a byte would). Bits are written straight
into the shared page cache, so a process killed with SIGKILL loses nothing
that returned; :meth:`~BitmapStore.flush` (``msync``) makes it survive a
power loss too. Data files are allocated with ``posix_fallocate`` before the
first bit is set, so a full disk is a :class:`~urlsieve.StoreFull` at that
point instead of a ``SIGBUS`` later.
"""

from __future__ import annotations

import contextlib
import fcntl
import math
import mmap
import os
import struct
import threading
import zlib
from collections import OrderedDict
from collections.abc import Iterable
from pathlib import Path

from urlsieve.exceptions import ConfigError, StoreClosed, StoreCorrupt, StoreError, StoreReadOnly
from urlsieve.fingerprint import SIGNATURES, SignatureKind, signature
from urlsieve.seen.base import ClosingStore, StoreStats
from urlsieve.store.files import check_profile, fsync_dir, os_error, syncfs
from urlsieve.url import FILTER, Profile

__all__ = ["BitmapStore", "false_positive_floor"]

MAGIC = b"URLSBMP\x01"
FORMAT_VERSION = 1
HEADER_NAME = "bitmap.hdr"
#: magic, format version, signature code, width, name levels, reserved, profile, crc32
_HEAD = struct.Struct("<8sIBBBB64sI")
COUNTERS_OFFSET = 128
_KINDS: dict[str, int] = {"crc32": 1, "md5": 2, "sha1": 3}
_KIND_NAMES = {v: k for k, v in _KINDS.items()}
#: Allowed ``width`` per signature: (minimum, default, maximum).
WIDTHS: dict[str, tuple[int, int, int]] = {
    "crc32": (16, 32, 32),
    "md5": (24, 32, 48),
    "sha1": (24, 32, 48),
}


def false_positive_floor(n: float, width: int = 32) -> float:
    """Probability that a URL never added is reported seen after ``n`` distinct adds."""
    return -math.expm1(-n / 2.0**width)


class BitmapStore(ClosingStore):
    """Signature-indexed bit files shared between processes (seed 002)."""

    def __init__(
        self,
        location: str,
        *,
        profile: Profile = FILTER,
        signature: str | None = None,
        width: int | None = None,
        readonly: bool = False,
        max_open: int = 1024,
    ) -> None:
        if not location:
            raise ConfigError("bitmap store needs a directory: write 'bitmap:DIR'")
        if signature is not None and signature not in _KINDS:
            raise ConfigError(
                f"bitmap:{location}: unknown signature {signature!r} (choose crc32, md5 or sha1)"
            )
        self._dir = Path(location)
        self._profile = profile
        self._readonly = readonly
        self._max_open = max(16, max_open)
        self._maps: OrderedDict[int, mmap.mmap] = OrderedDict()
        self._dirty: set[int] = set()
        self._tlock = threading.Lock()
        self._closed = False
        self._hdr_fd = -1
        self._hdr: mmap.mmap | None = None
        try:
            self._open_header(signature, width)
            if self._levels == 1 and not readonly:
                for index in range(self._nfiles):  # the patent creates every file at start
                    self._map(index, create=True)
        except BaseException:
            self._release()
            raise

    # -- opening -----------------------------------------------------------------------

    def _open_header(self, kind: str | None, width: int | None) -> None:
        path = self._dir / HEADER_NAME
        if not path.exists():
            if self._readonly:
                raise StoreError(f"{self._dir}: no bitmap store here (no {HEADER_NAME})")
            self._create_header(kind or "crc32", width)
        flags = os.O_RDONLY if self._readonly else os.O_RDWR
        try:
            self._hdr_fd = os.open(path, flags)
            size = os.fstat(self._hdr_fd).st_size
        except OSError as exc:
            raise os_error(exc, path, "opening") from exc
        if size < COUNTERS_OFFSET:
            raise StoreCorrupt(f"{path}: truncated bitmap header ({size} bytes)")
        head = os.pread(self._hdr_fd, _HEAD.size, 0)
        magic, version, code, stored_width, levels, _, ident, crc = _HEAD.unpack(head)
        if magic != MAGIC:
            raise StoreCorrupt(f"{path}: not a urlsieve bitmap header (bad magic)")
        if zlib.crc32(head[:-4]) != crc:
            raise StoreCorrupt(f"{path}: bitmap header checksum mismatch (damaged file)")
        if version != FORMAT_VERSION or code not in _KIND_NAMES:
            raise StoreCorrupt(f"{path}: unsupported bitmap format {version}/{code}")
        stored_kind = _KIND_NAMES[code]
        if kind is not None and kind != stored_kind:
            raise ConfigError(
                f"{self._dir} is a bitmap store with signature={stored_kind}, not {kind}: "
                "drop ?signature= or use another directory"
            )
        if width is not None and width != stored_width:
            raise ConfigError(
                f"{self._dir} is a bitmap store with width={stored_width}, not {width}: "
                "drop ?width= or use another directory"
            )
        check_profile(ident.rstrip(b"\0").decode("ascii", "replace"), self._profile, path)
        self._set_layout(stored_kind, stored_width)
        if levels != self._levels:
            raise StoreCorrupt(f"{path}: inconsistent layout ({levels} levels)")
        expected = COUNTERS_OFFSET + 8 * self._nfiles
        if size != expected:
            raise StoreCorrupt(
                f"{path}: bitmap header is {size} bytes, expected {expected} (truncated or "
                "damaged); restore it or delete the directory to start afresh"
            )
        access = mmap.ACCESS_READ if self._readonly else mmap.ACCESS_WRITE
        self._hdr = mmap.mmap(self._hdr_fd, expected, access=access)
        self._counters = memoryview(self._hdr)[COUNTERS_OFFSET:].cast("Q")

    def _set_layout(self, kind: str, width: int) -> None:
        low, _, high = WIDTHS[kind]
        if not low <= width <= high:
            raise ConfigError(
                f"bitmap:{self._dir}: width={width} is out of range for {kind} "
                f"(choose {low}..{high})"
            )
        self._kind: SignatureKind = kind  # type: ignore[assignment]
        self._width = width
        self._shift = SIGNATURES[kind] - width
        self._levels = 1 if kind == "crc32" else 2
        self._content_bits = width - 8 * self._levels
        self._nfiles = 1 << (8 * self._levels)
        self._file_bytes = max(1, (1 << self._content_bits) // 8)
        self._bit_mask = (1 << self._content_bits) - 1

    def _create_header(self, kind: str, width: int | None) -> None:
        default = WIDTHS[kind][1]
        width = default if width is None else width
        self._set_layout(kind, width)
        try:
            self._dir.mkdir(parents=True, exist_ok=True)
            strays = [p.name for p in self._dir.iterdir() if not p.name.startswith(HEADER_NAME)]
        except OSError as exc:
            raise os_error(exc, self._dir, "creating the store directory") from exc
        if strays and (self._dir / HEADER_NAME).exists():
            return  # a concurrent creator linked its header first and made its data files
        if strays:
            raise StoreCorrupt(
                f"{self._dir}: has files ({', '.join(sorted(strays)[:3])}…) but no "
                f"{HEADER_NAME}: not a bitmap store; choose an empty directory"
            )
        ident = self._profile.ident.encode("ascii")
        if len(ident) > 64:
            raise ConfigError(f"profile ident {self._profile.ident!r} is longer than 64 bytes")
        head = _HEAD.pack(MAGIC, FORMAT_VERSION, _KINDS[kind], width, self._levels, 0, ident, 0)
        head = head[:-4] + struct.pack("<I", zlib.crc32(head[:-4]))
        blob = head.ljust(COUNTERS_OFFSET, b"\0") + bytes(8 * self._nfiles)
        path = self._dir / HEADER_NAME
        tmp = self._dir / f"{HEADER_NAME}.tmp.{os.getpid()}.{threading.get_ident()}"
        try:
            with open(tmp, "wb") as fh:
                fh.write(blob)
                fh.flush()
                os.fsync(fh.fileno())
            with contextlib.suppress(FileExistsError):  # a concurrent creator won
                os.link(tmp, path)  # atomic create-if-absent
            fsync_dir(self._dir)
        except OSError as exc:
            raise os_error(exc, path, "creating the header") from exc
        finally:
            with contextlib.suppress(OSError):
                tmp.unlink()

    def _file_path(self, index: int) -> Path:
        if self._levels == 1:
            return self._dir / f"{index:02X}"
        return self._dir / f"{index >> 8:02X}" / f"{index & 0xFF:02X}"

    def _map(self, index: int, *, create: bool) -> mmap.mmap | None:
        """The mapping of data file ``index``; None when it does not exist and ``create`` is off."""
        mm = self._maps.get(index)
        if mm is not None:
            self._maps.move_to_end(index)
            return mm
        path = self._file_path(index)
        size = self._file_bytes
        try:
            if create:
                if self._levels == 2:
                    path.parent.mkdir(exist_ok=True)
                fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
            else:
                fd = os.open(path, os.O_RDONLY if self._readonly else os.O_RDWR)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise os_error(exc, path, "opening") from exc
        try:
            actual = os.fstat(fd).st_size
            if actual > size or (actual < size and self._counters[index]):
                raise StoreCorrupt(
                    f"{path}: bitmap file is {actual} bytes, expected {size} (truncated or "
                    "damaged); restore it or delete the directory to start afresh"
                )
            if actual < size:
                if self._readonly:
                    return None  # a creation that never finished holds no bits yet
                # Zeroed and allocated before any bit is set: no SIGBUS on a full disk later.
                os.posix_fallocate(fd, 0, size)
            access = mmap.ACCESS_READ if self._readonly else mmap.ACCESS_WRITE
            mm = mmap.mmap(fd, size, access=access)
        except OSError as exc:
            raise os_error(exc, path, "allocating") from exc
        finally:
            os.close(fd)  # the mapping stays valid, as in the patent
        self._maps[index] = mm
        if len(self._maps) > self._max_open:
            _, old_mm = self._maps.popitem(last=False)
            old_mm.close()  # dirty pages stay in the page cache; flush() fsyncs the file
        return mm

    # -- the store ---------------------------------------------------------------------

    @property
    def profile(self) -> Profile:
        return self._profile

    @property
    def directory(self) -> Path:
        return self._dir

    def _values(self, urls: Iterable[str]) -> list[int]:
        kind, shift, profile = self._kind, self._shift, self._profile
        return [int.from_bytes(signature(u, kind, profile), "big") >> shift for u in urls]

    def _check_writable(self) -> None:
        if self._closed:
            raise StoreClosed(f"bitmap store {self._dir} is closed")
        if self._readonly:
            raise StoreReadOnly(
                f"bitmap store {self._dir} was opened read-only; open it without ?readonly=1 to add"
            )

    def _test_and_set(self, index: int, bits: list[int]) -> list[bool]:
        """Test and set ``bits`` of file ``index`` under its lock; True where a bit was clear."""
        mm = self._map(index, create=True)
        if mm is None:  # pragma: no cover - create=True always maps or raises
            raise StoreError(f"{self._file_path(index)}: cannot be created")
        # A set bit is never cleared: when every bit is set already, no lock is needed.
        if all(mm[bit >> 3] & (1 << (bit & 7)) for bit in bits):
            return [False] * len(bits)
        counters = self._counters
        offset = COUNTERS_OFFSET + 8 * index
        out: list[bool] = []
        fcntl.lockf(self._hdr_fd, fcntl.LOCK_EX, 8, offset, os.SEEK_SET)
        try:
            new = 0
            for bit in bits:
                pos = bit >> 3
                mask = 1 << (bit & 7)
                byte = mm[pos]
                if byte & mask:
                    out.append(False)
                else:
                    mm[pos] = byte | mask
                    new += 1
                    out.append(True)
            if new:
                counters[index] += new
        finally:
            fcntl.lockf(self._hdr_fd, fcntl.LOCK_UN, 8, offset, os.SEEK_SET)
        self._dirty.add(index)
        return out

    def add(self, url: str) -> bool:
        value = self._values((url,))[0]
        with self._tlock:
            self._check_writable()
            return self._test_and_set(value >> self._content_bits, [value & self._bit_mask])[0]

    def add_many(self, urls: Iterable[str]) -> list[bool]:
        values = self._values(urls)  # every URL valid before any is added
        groups: dict[int, list[int]] = {}
        cb, bm = self._content_bits, self._bit_mask
        for pos, value in enumerate(values):
            groups.setdefault(value >> cb, []).append(pos)
        out = [False] * len(values)
        with self._tlock:
            if values:
                self._check_writable()
            for index, positions in groups.items():
                flags = self._test_and_set(index, [values[p] & bm for p in positions])
                for p, flag in zip(positions, flags, strict=True):
                    out[p] = flag
        return out

    def _lookup(self, values: list[int]) -> list[bool]:
        if self._closed:
            raise StoreClosed(f"bitmap store {self._dir} is closed")
        cb, bm = self._content_bits, self._bit_mask
        out = []
        with self._tlock:
            for value in values:
                mm = self._map(value >> cb, create=False)
                bit = value & bm
                out.append(mm is not None and bool(mm[bit >> 3] & (1 << (bit & 7))))
        return out

    def __contains__(self, url: object) -> bool:
        return isinstance(url, str) and self._lookup(self._values((url,)))[0]

    def contains_many(self, urls: Iterable[str]) -> list[bool]:
        return self._lookup(self._values(urls))

    def __len__(self) -> int:
        """URLs added as new, by every process (a bit collision counts once)."""
        return sum(self._counters)

    def stats(self) -> StoreStats:
        bits = 1 << self._width
        count = len(self)
        fill = count / bits
        # ``count`` bits are set; n distinct URLs set 2^w(1 - e^(-n/2^w)) of them on average.
        distinct = -bits * math.log1p(-fill) if fill < 1 else float("inf")
        files = sum(1 for i in range(self._nfiles) if self._counters[i]) or len(self._maps)
        return StoreStats(
            backend="bitmap",
            profile=self._profile.ident,
            count=count,
            exact=False,
            bytes_used=COUNTERS_OFFSET + 8 * self._nfiles + files * self._file_bytes,
            capacity=bits,
            fill_ratio=fill,
            false_positive_rate=fill,
            expected_false_positives=max(0.0, distinct - count),
            extra={
                "signature": self._kind,
                "width": self._width,
                "files": self._nfiles,
                "file_bytes": self._file_bytes,
                "directory": str(self._dir),
            },
        )

    def flush(self) -> None:
        """``msync`` every file written since the last flush, and the counters."""
        with self._tlock:
            if self._closed or self._readonly:
                return
            evicted = [i for i in sorted(self._dirty) if i not in self._maps]
            for index in sorted(self._dirty):
                mm = self._maps.get(index)
                if mm is not None:
                    mm.flush()
            if evicted:  # written, then evicted from the open maps: sync their files
                self._sync_files(evicted)
            self._dirty.clear()
            if self._hdr is not None:
                self._hdr.flush()

    def _sync_files(self, indices: list[int]) -> None:
        try:
            if len(indices) > 64 and syncfs(self._hdr_fd):
                return
            for index in indices:
                fd = os.open(self._file_path(index), os.O_RDONLY)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
        except OSError as exc:
            raise os_error(exc, self._dir, "syncing") from exc

    def _release(self) -> None:
        for mm in self._maps.values():
            mm.close()
        self._maps.clear()
        if self._hdr is not None:
            self._counters.release()
            self._hdr.close()
            self._hdr = None
        if self._hdr_fd >= 0:
            os.close(self._hdr_fd)
            self._hdr_fd = -1

    def close(self) -> None:
        if self._closed:
            return
        self.flush()
        with self._tlock:
            self._closed = True
            self._release()
