"""Change notices through a small counter file beside a file that is replaced by rename.

The learner replaces the overlay snapshot several times a second while it learns. A
gateway that found out by checking the snapshot's ``stat`` every ``reload_check_seconds``
(one second by default) would enforce a new verdict up to a second late; checking it before
every request costs a path lookup per request. Instead the writer bumps an 8-byte counter
in ``<file>.changed`` after each rename (:func:`notify_change`), and a reader
(:class:`ChangeNotice`) reads those 8 bytes from a descriptor it keeps open — one ``pread``,
no path lookup, no timer — before it answers the next request: a change is noticed by the
first request after it, whatever ``reload_check_seconds`` says. It is portable (no inotify,
no kqueue) and works across processes and users (the file is world-readable).
"""

from __future__ import annotations

import contextlib
import os
import struct
from pathlib import Path

__all__ = ["ChangeNotice", "notify_change", "notify_path"]

_COUNTER = struct.Struct("<Q")


def notify_path(path: str | Path) -> str:
    """The counter file of ``path``."""
    return f"{path}.changed"


def notify_change(path: str | Path) -> int:
    """Bump ``path``'s counter (create it as needed); returns the new value. Callers
    serialise their writes (the overlay build holds its lock)."""
    fd = os.open(notify_path(path), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        raw = os.pread(fd, _COUNTER.size, 0)
        value = (_COUNTER.unpack(raw)[0] + 1) & 0xFFFF_FFFF_FFFF_FFFF if len(raw) == 8 else 1
        os.pwrite(fd, _COUNTER.pack(value), 0)
        return value
    finally:
        os.close(fd)


class ChangeNotice:
    """Reads ``path``'s counter; :meth:`changed` is True once per bump (and the first time
    the counter is found). A missing or unreadable counter file reads as no change: the
    owner's ordinary ``stat`` checks still find the change, only later."""

    def __init__(self, path: str | Path) -> None:
        self.path = notify_path(path)
        self._fd: int | None = None
        self._seen: bytes | None = None

    def _open(self) -> int | None:
        if self._fd is None:
            try:
                self._fd = os.open(self.path, os.O_RDONLY)
            except OSError:
                return None
        return self._fd

    def value(self) -> bytes | None:
        """The counter's bytes now (None: no counter file yet)."""
        fd = self._open()
        if fd is None:
            return None
        try:
            return os.pread(fd, _COUNTER.size, 0)
        except OSError:
            self.close()
            return None

    def changed(self) -> bool:
        """Whether the counter moved since the last call (never raises)."""
        now = self.value()
        if now is None or now == self._seen:
            return False
        self._seen = now
        return True

    def close(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            with contextlib.suppress(OSError):
                os.close(fd)
