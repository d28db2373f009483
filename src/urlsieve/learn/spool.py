"""The disk buffer between the crawler and the classifier: WARC segments on disk.

The crawler (one writer per directory) appends pages to a :class:`Spool`; each page is
one WARC/1.1 ``response`` record, compressed as its own gzip member (the layout every
WARC tool expects: ``warcio index``, ``warcio check``, pywb, wget's readers).
:meth:`Spool.append` returns once the record is written, flushed and ``fsync``-ed: an
acknowledged page is never lost. :meth:`Spool.extend` does the same for several pages
with one ``fsync`` (group commit).

Segments are named ``<ns-since-epoch>-<pid>.warc.gz`` (their order is the order they
were written). A segment being written is ``*.warc.gz.open``; it is renamed (atomically)
to ``*.warc.gz`` when it passes ``segment_bytes``, is older than ``segment_seconds``
(checked on every append and by :meth:`Spool.rotate_if_due`, which an idle writer
calls), or the spool is closed. A writer killed mid-write leaves a ``.open`` segment:
the next :class:`Spool` on that directory keeps its complete records, cuts the torn tail
and closes it. Past ``max_bytes`` of unconsumed segments, appends raise
:class:`SpoolFull` (the total may pass the bound by the one record that reached it).

Consumers (other processes, any number) never touch ``.open`` segments:
:func:`claim_next` takes the oldest ready segment by renaming it to
``*.warc.gz.reading`` while holding an ``flock`` on it, so two consumers never read the
same segment and a consumer that dies leaves a ``.reading`` segment whose lock is gone,
which the next :func:`claim_next` takes over. :meth:`Claim.done` deletes it.
:func:`read_segment` reads any segment strictly: a damaged one raises
:class:`~urlsieve.exceptions.SpoolCorrupt` naming the file, after yielding the records
before the damage.

What is stored: the HTTP block has the final response's status and headers as the
crawler got them (Latin-1) and the body *decoded*; so that WARC tools read it right,
``Content-Encoding``, ``Content-Length`` and ``Transfer-Encoding`` are renamed
``X-Urlsieve-Original-<name>`` and a ``Content-Length`` of the stored body is added
last (the reader restores the original list exactly). The :class:`Page` fields HTTP
has no place for are WARC headers: ``WARC-Urlsieve-Start-URI``, ``-Hops`` (JSON),
``-Fetched-At``, ``-Queued-At``, ``-Truncated``, ``-Job`` (the queue's key, escaped),
``-Note`` (escaped).
URLs are written as printable ASCII (other characters percent-escaped, which the
crawler's canonical URLs never have);
CR and LF in a header (no HTTP parser lets one through) become spaces.

The records are written here rather than with warcio's writer because warcio
percent-encodes non-ASCII header bytes (not reversible), compresses at level 9 (slow)
and its reader skips damage with a warning; the tests check every segment with warcio.
"""

from __future__ import annotations

import base64
import contextlib
import errno
import fcntl
import hashlib
import json
import os
import re
import threading
import time
import uuid
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import BinaryIO
from urllib.parse import quote, unquote

from urlsieve.exceptions import LearnError, SpoolCorrupt
from urlsieve.learn.page import Page
from urlsieve.store.base import ClosingStore
from urlsieve.store.files import fsync_dir

__all__ = [
    "Claim",
    "Spool",
    "SpoolBusy",
    "SpoolFull",
    "claim_next",
    "ready_segments",
    "read_segment",
]

READY = ".warc.gz"
OPEN = ".warc.gz.open"
READING = ".warc.gz.reading"
#: The largest record the reader accepts (header block + HTTP block), decompressed.
MAX_RECORD = 256 << 20
MAX_HEADER_BLOCK = 1 << 16
_LOCK = ".spool.lock"
_ORIGINAL = "X-Urlsieve-Original-"
_RENAMED = frozenset({"content-encoding", "content-length", "transfer-encoding"})
_NOT_PRINTABLE = re.compile(r"[^!-~]")
_READ = 1 << 20
_FEED = 1 << 14
#: zlib level 1: 3x the speed of level 6 (0.3 ms against 1 ms per 20 kB page, the whole
#: per-page budget at 500 pages/s) for a ratio of 0.36 against 0.31 on HTML.
_GZIP_LEVEL = 1


class SpoolFull(LearnError):
    """The spool holds ``max_bytes`` of unconsumed segments, or the disk is full: the page
    was not written (retry once the classifier has caught up)."""


class SpoolBusy(LearnError):
    """Another live writer holds the spool directory."""


# -- writing --------------------------------------------------------------------------------


def _uri(text: str) -> str:
    """A URL as printable ASCII (other characters percent-escaped as UTF-8)."""
    if _NOT_PRINTABLE.search(text) is None:
        return text
    return _NOT_PRINTABLE.sub(
        lambda m: "".join(f"%{b:02X}" for b in m.group().encode("utf-8", "surrogatepass")), text
    )


def _field(text: str, *, name: bool = False) -> bytes:
    text = text.replace("\r", " ").replace("\n", " ")
    if name:
        text = text.replace(":", "-") or "-"
    return text.encode("latin-1", "replace")


def _http_block(page: Page) -> bytes:
    lines = [f"HTTP/1.1 {page.status} -".encode("latin-1", "replace")]
    for name, value in page.headers:
        renamed = (
            _ORIGINAL + name if name.lower() in _RENAMED or name.startswith(_ORIGINAL) else name
        )
        lines.append(_field(renamed, name=True) + b": " + _field(value))
    lines.append(b"Content-Length: %d" % len(page.body))
    return b"\r\n".join(lines) + b"\r\n\r\n" + page.body


def _digest(data: bytes) -> str:
    return "sha1:" + base64.b32encode(hashlib.sha1(data).digest()).decode("ascii")


def _record(page: Page) -> bytes:
    """One WARC/1.1 response record, uncompressed."""
    block = _http_block(page)
    payload = block[block.index(b"\r\n\r\n") + 4 :]
    when = datetime.fromtimestamp(max(page.fetched_at, 0.0), UTC)
    headers = [
        ("WARC-Type", "response"),
        ("WARC-Record-ID", f"<urn:uuid:{uuid.uuid4()}>"),
        ("WARC-Date", when.strftime("%Y-%m-%dT%H:%M:%S.%fZ")),
        ("WARC-Target-URI", _uri(page.final_url)),
        ("Content-Type", "application/http;msgtype=response"),
        ("WARC-Block-Digest", _digest(block)),
        ("WARC-Payload-Digest", _digest(payload)),
        ("WARC-Urlsieve-Start-URI", _uri(page.url)),
        ("WARC-Urlsieve-Hops", json.dumps([_uri(h) for h in page.hops])),
        ("WARC-Urlsieve-Fetched-At", repr(float(page.fetched_at))),
        ("WARC-Urlsieve-Truncated", "yes" if page.truncated else "no"),
    ]
    if page.queued_at is not None:
        headers.append(("WARC-Urlsieve-Queued-At", repr(float(page.queued_at))))
    if page.job is not None:
        headers.append(("WARC-Urlsieve-Job", quote(page.job, safe="")))
    if page.note:
        headers.append(("WARC-Urlsieve-Note", quote(page.note, safe=" ")))
    headers.append(("Content-Length", str(len(block))))
    head = "WARC/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers) + "\r\n"
    return head.encode("ascii") + block + b"\r\n\r\n"


def _gzip(data: bytes) -> bytes:
    compressor = zlib.compressobj(_GZIP_LEVEL, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    return compressor.compress(data) + compressor.flush()


def _segment_name(ns: int) -> str:
    return f"{ns:020d}-{os.getpid()}"


class Spool(ClosingStore):
    """The writer side: append pages to rotating WARC segments in ``directory``.

    One writer per directory (an ``flock`` on ``.spool.lock``; a second one gets
    :class:`SpoolBusy`). Thread-safe, blocking: call it from an executor thread in an
    event loop (``await asyncio.to_thread(spool.append, page)``).
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        segment_bytes: int = 64 << 20,
        max_bytes: int = 1 << 30,
        segment_seconds: float = 2.0,
    ) -> None:
        if segment_bytes < 1 or max_bytes < 1 or segment_seconds <= 0:
            raise ValueError("spool: segment_bytes, max_bytes and segment_seconds must be > 0")
        self.directory = Path(directory)
        self.segment_bytes = segment_bytes
        self.max_bytes = max_bytes
        self.segment_seconds = segment_seconds
        self._lock = threading.Lock()
        self._file: int | None = None  # fd of the open segment
        self._path: Path | None = None
        self._size = 0
        self._opened_at = 0.0
        self._last_ns = 0
        self.directory.mkdir(parents=True, exist_ok=True)
        self._lock_fd = os.open(self.directory / _LOCK, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(self._lock_fd)
            raise SpoolBusy(f"{self.directory}: another writer holds this spool") from None
        self.recovered = [recover_segment(p) for p in sorted(self.directory.glob("*" + OPEN))]
        self._unconsumed = self._scan()

    def _scan(self) -> int:
        total = 0
        for path in self.directory.iterdir():
            if path.name.endswith((READY, OPEN, READING)):
                with contextlib.suppress(FileNotFoundError):
                    total += path.stat().st_size
        return total

    def append(self, page: Page) -> None:
        """Write ``page``; returns once it is on disk (fsync). :class:`SpoolFull` if not."""
        self.extend((page,))

    def extend(self, pages: Iterable[Page]) -> None:
        """Write ``pages`` with one fsync; returns once all are on disk."""
        data = b"".join(_gzip(_record(page)) for page in pages)
        if not data:
            return
        with self._lock:
            if self._unconsumed >= self.max_bytes:
                self._unconsumed = self._scan()
                if self._unconsumed >= self.max_bytes:
                    raise SpoolFull(
                        f"{self.directory}: {self._unconsumed} bytes of segments wait for the "
                        f"classifier (max_bytes={self.max_bytes}); the page was not written"
                    )
            if self._file is None or self._due():
                self._rotate()
                self._open_segment()
            assert self._file is not None and self._path is not None
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(self._file, view) :]
                os.fsync(self._file)
            except OSError as exc:
                with contextlib.suppress(OSError):
                    os.ftruncate(self._file, self._size)  # no torn record left behind
                if exc.errno in (errno.ENOSPC, errno.EDQUOT):
                    raise SpoolFull(f"{self._path}: the disk is full: {exc}") from exc
                raise LearnError(f"{self._path}: cannot write the spool: {exc}") from exc
            self._size += len(data)
            self._unconsumed += len(data)
            if self._size >= self.segment_bytes:
                self._rotate()

    def _due(self) -> bool:
        return time.monotonic() - self._opened_at >= self.segment_seconds

    def rotate_if_due(self) -> None:
        """Close the open segment when it is older than ``segment_seconds`` (call it when
        idle, so that the classifier sees the last pages without waiting for more)."""
        with self._lock:
            if self._file is not None and self._due():
                self._rotate()

    def rotate(self) -> None:
        """Close the open segment now (an empty one is removed)."""
        with self._lock:
            self._rotate()

    def _open_segment(self) -> None:
        ns = max(time.time_ns(), self._last_ns + 1)
        self._last_ns = ns
        path = self.directory / (_segment_name(ns) + OPEN)
        self._file = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o644)
        self._path = path
        self._size = 0
        self._opened_at = time.monotonic()
        fsync_dir(self.directory)

    def _rotate(self) -> None:
        if self._file is None or self._path is None:
            return
        os.close(self._file)
        path, size = self._path, self._size
        self._file = self._path = None
        if size == 0:
            path.unlink(missing_ok=True)
        else:
            path.rename(path.with_name(path.name[: -len(".open")]))
        fsync_dir(self.directory)

    def close(self) -> None:
        """Close the open segment (it becomes ready) and release the directory."""
        with self._lock:
            self._rotate()
            if self._lock_fd >= 0:
                os.close(self._lock_fd)
                self._lock_fd = -1

    def __repr__(self) -> str:
        return f"Spool({str(self.directory)!r}, {self._unconsumed} bytes unconsumed)"


# -- reading --------------------------------------------------------------------------------


class _Damage(Exception):
    def __init__(self, offset: int, reason: str) -> None:
        super().__init__(reason)
        self.offset = offset
        self.reason = reason


def _members(fh: BinaryIO) -> Iterator[tuple[int, int, bytes]]:
    """``(start, end, data)`` of every gzip member of ``fh``; :class:`_Damage` on damage.

    The decoder is fed at most :data:`_FEED` bytes at a time: at a member's end zlib
    copies the rest of its input (``unused_data``), so feeding it a whole read would copy
    the read once per member (quadratic in the members of a read)."""
    read = fh.read
    offset = 0  # compressed bytes consumed before the current member
    start = 0
    decoder: zlib._Decompress | None = None
    out: list[bytes] = []
    size = 0
    buffer = b""
    at = 0  # bytes of ``buffer`` consumed
    while True:
        if at >= len(buffer):
            buffer, at = read(_READ), 0
            if not buffer:
                break
        if decoder is None:
            decoder = zlib.decompressobj(16 + zlib.MAX_WBITS)
            start, out, size = offset, [], 0
        piece = buffer[at : at + _FEED]
        try:
            chunk = decoder.decompress(piece, MAX_RECORD + 1 - size)
        except zlib.error as exc:
            raise _Damage(start, f"not gzip data ({exc})") from None
        out.append(chunk)
        size += len(chunk)
        if size > MAX_RECORD:
            raise _Damage(start, f"a record larger than {MAX_RECORD} bytes")
        left = decoder.unused_data if decoder.eof else decoder.unconsumed_tail
        used = len(piece) - len(left)
        at += used
        offset += used
        if decoder.eof:
            decoder = None
            yield start, offset, b"".join(out)
    if decoder is not None:
        raise _Damage(start, "the file ends inside a gzip member (a torn write)")


def _headers(block: bytes) -> list[tuple[str, str]]:
    pairs = []
    for line in block.split(b"\r\n"):
        name, colon, value = line.partition(b":")
        if not colon:
            raise ValueError(f"header line without ':' ({line[:60]!r})")
        text = value.decode("latin-1")
        pairs.append((name.decode("latin-1"), text[1:] if text.startswith(" ") else text))
    return pairs


def _page(data: bytes) -> Page | None:
    """The Page of one record (None for a record that is not a response); ValueError."""
    head_end = data.find(b"\r\n\r\n", 0, MAX_HEADER_BLOCK)
    if not data.startswith(b"WARC/1.") or head_end < 0:
        raise ValueError("not a WARC record")
    rest = data[:head_end].partition(b"\r\n")[2]
    warc = {k.lower(): v for k, v in _headers(rest)}
    length_text = warc.get("content-length", "")
    if not length_text.isdigit() or len(length_text) > 12:
        raise ValueError("a WARC record without a valid Content-Length")
    length = int(length_text)
    block = data[head_end + 4 : head_end + 4 + length]
    if len(block) != length or data[head_end + 4 + length :] != b"\r\n\r\n":
        raise ValueError("the record's length does not match its Content-Length")
    if warc.get("warc-type") != "response":
        return None
    http_end = block.find(b"\r\n\r\n")
    if http_end < 0:
        raise ValueError("the HTTP block has no end of headers")
    status_line, _, header_bytes = block[:http_end].partition(b"\r\n")
    parts = status_line.split(b" ", 2)
    if len(parts) < 2 or not parts[0].startswith(b"HTTP/") or not parts[1].isdigit():
        raise ValueError(f"bad HTTP status line {status_line[:60]!r}")
    headers = _headers(header_bytes) if header_bytes else []
    if headers and headers[-1][0] == "Content-Length":
        headers.pop()  # the one the writer added
    restored = tuple(
        (name[len(_ORIGINAL) :] if name.startswith(_ORIGINAL) else name, value)
        for name, value in headers
    )
    target = warc.get("warc-target-uri", "")
    hops = json.loads(warc.get("warc-urlsieve-hops", "[]"))
    if not isinstance(hops, list) or not all(isinstance(h, str) for h in hops):
        raise ValueError("WARC-Urlsieve-Hops is not a list of URLs")
    queued = warc.get("warc-urlsieve-queued-at")
    job = warc.get("warc-urlsieve-job")
    return Page(
        url=warc.get("warc-urlsieve-start-uri", target),
        final_url=target,
        status=int(parts[1][:6]),
        headers=restored,
        body=block[http_end + 4 :],
        fetched_at=float(warc.get("warc-urlsieve-fetched-at", "0")),
        truncated=warc.get("warc-urlsieve-truncated") == "yes",
        hops=tuple(hops),
        queued_at=None if queued is None else float(queued),
        job=None if job is None else unquote(job),
        note=unquote(warc.get("warc-urlsieve-note", "")),
    )


def _records(fh: BinaryIO) -> Iterator[tuple[int, Page | None]]:
    """``(end offset, page)`` of every record; :class:`_Damage` at the first bad one."""
    for start, end, data in _members(fh):
        try:
            page = _page(data)
        except (ValueError, UnicodeError, OverflowError) as exc:
            raise _Damage(start, f"a damaged WARC record ({exc})") from None
        yield end, page


def read_segment(path: str | os.PathLike[str]) -> Iterator[Page]:
    """Every page of a segment, in order.

    A damaged segment yields the pages before the damage, then raises
    :class:`~urlsieve.exceptions.SpoolCorrupt` with the file, the offset and what to do.
    """
    where = Path(path)
    count = 0
    try:
        with where.open("rb") as fh:
            for _, page in _records(fh):
                if page is not None:
                    count += 1
                    yield page
    except _Damage as damage:
        raise SpoolCorrupt(
            str(where),
            f"byte {damage.offset}: {damage.reason}; the {count} pages before it were read. "
            "Check it with 'warcio check', then move it out of the spool directory "
            "(its pages are lost for the classifier; re-queue their URLs if they matter)",
        ) from None
    except OSError as exc:
        raise SpoolCorrupt(str(where), f"cannot read the segment: {exc}") from exc


def recover_segment(path: str | os.PathLike[str]) -> Path | None:
    """Close a segment a dead writer left open: keep its complete records, cut the torn
    tail, rename it ready. Returns the ready path, or None when nothing was worth keeping."""
    where = Path(path)
    good = 0
    with where.open("rb") as fh, contextlib.suppress(_Damage):
        for end, _ in _records(fh):
            good = end
    if good == 0:
        where.unlink(missing_ok=True)
        fsync_dir(where.parent)
        return None
    with where.open("r+b") as fh:
        fh.truncate(good)
        fh.flush()
        os.fsync(fh.fileno())
    ready = where.with_name(where.name.removesuffix(".open"))
    where.rename(ready)
    fsync_dir(where.parent)
    return ready


# -- consuming ------------------------------------------------------------------------------


def ready_segments(directory: str | os.PathLike[str]) -> list[Path]:
    """Closed segments not claimed by a consumer, oldest first."""
    return sorted(p for p in Path(directory).glob("*" + READY) if p.is_file())


@dataclass
class Claim:
    """A segment one consumer holds (renamed ``.reading``, locked); see :func:`claim_next`."""

    path: Path
    _fd: int

    def pages(self) -> Iterator[Page]:
        """The pages of the segment (:func:`read_segment`)."""
        return read_segment(self.path)

    def done(self) -> None:
        """The pages are classified: delete the segment."""
        self.path.unlink(missing_ok=True)
        self._close()

    def release(self) -> None:
        """Give the segment back (ready again) without consuming it."""
        with contextlib.suppress(FileNotFoundError):
            self.path.rename(self.path.with_name(self.path.name.removesuffix(".reading")))
        self._close()

    def _close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> Claim:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Leaving without :meth:`done` releases the segment for another try."""
        if self._fd >= 0:
            self.release()


def _lock(path: Path) -> int | None:
    """An fd of ``path`` holding its exclusive flock, or None (gone, or held by another)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        # The holder may have deleted or renamed it before letting go: same file still?
        if os.fstat(fd).st_ino != path.stat().st_ino:
            raise FileNotFoundError(path)
    except OSError:
        os.close(fd)
        return None
    return fd


def claim_next(directory: str | os.PathLike[str]) -> Claim | None:
    """Claim the oldest segment no live consumer holds, or None when there is none.

    A ``.reading`` segment whose consumer died (its lock is gone) is taken over first.
    """
    where = Path(directory)
    orphans = sorted(where.glob("*" + READING))
    for path in orphans:
        fd = _lock(path)
        if fd is not None:
            return Claim(path, fd)
    for path in ready_segments(where):
        fd = _lock(path)
        if fd is None:
            continue
        reading = path.with_name(path.name + ".reading")
        try:
            path.rename(reading)
        except FileNotFoundError:
            os.close(fd)
            continue
        return Claim(reading, fd)
    return None
