"""File plumbing of every store on disk, in one place.

OS errors are translated into the store exceptions here, at the boundary,
with the path and what to do (:func:`os_error`); the original stays visible as
``__cause__``. Directory syncs report their errors (:func:`fsync_dir`), one atomic write
serves every file that is replaced whole (:func:`write_atomic`: the data and the
directory entry both synced), one-writer locks are :func:`writer_lock` and shared or
exclusive locks of a lock file :func:`file_lock`; profile and parameter checks
(:func:`check_profile`, :func:`check_params`) word the refusal the same way for every
store, so every store fails the same way. Used by the seen stores, the snapshot writer, the
learner's spool and overlay, and the near-duplicate index.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import mmap
import os
import tempfile
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from urlsieve.exceptions import (
    ConfigError,
    ProfileMismatch,
    StoreError,
    StoreFull,
    StoreReadOnly,
)
from urlsieve.url import Profile

__all__ = [
    "check_params",
    "check_profile",
    "file_lock",
    "fsync_dir",
    "os_error",
    "pick",
    "syncfs",
    "write_atomic",
    "writer_lock",
]

_FULL = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG}
_DENIED = {errno.EACCES, errno.EPERM, errno.EROFS}


def os_error(exc: OSError, path: str | os.PathLike[str], doing: str) -> StoreError:
    """The store error an ``OSError`` met while ``doing`` something to ``path`` means
    (raise it ``from exc``)."""
    reason = exc.strerror or str(exc)
    if exc.errno in _FULL:
        return StoreFull(
            f"{path}: no space left while {doing} ({reason}); nothing was added: free disk "
            "space (or raise the size limit) and retry, or move the store elsewhere"
        )
    if exc.errno in _DENIED:
        return StoreReadOnly(
            f"{path}: cannot write while {doing} ({reason}): fix the permissions, or open "
            "the store with ?readonly=1 to look URLs up without adding"
        )
    return StoreError(f"{path}: {reason} while {doing}")


def check_profile(stored: str, profile: Profile, path: str | os.PathLike[str]) -> None:
    """Refuse to read a store written under another canonicalisation profile (or version)."""
    if stored != profile.ident:
        raise ProfileMismatch(
            f"{path}: written under profile {stored!r}, opened with {profile.ident!r}: open "
            f"it with ?profile={stored.split('/', maxsplit=1)[0]} (and the same urlsieve "
            "version), or use a new location for the new profile"
        )


def pick(given: Mapping[str, float | None], name: str, default: float) -> float:
    """A parameter as given, or its default when it was not."""
    value = given.get(name)
    return default if value is None else value


def check_params(where: str, given: Mapping[str, float | None], stored: Mapping[str, Any]) -> None:
    """Refuse parameters that contradict the ones a store was created with."""
    for name, value in given.items():
        if value is not None and value != stored[name]:
            raise ConfigError(
                f"{where} was created with {name}={stored[name]}, not {value}: drop ?{name}= "
                "or use another file"
            )


def fsync_dir(directory: str | os.PathLike[str]) -> None:
    """Make a rename or a new entry in ``directory`` durable; raises ``OSError`` (for
    :func:`os_error`), except where the filesystem cannot sync a directory at all."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    except OSError as exc:
        if exc.errno not in (errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP):
            raise
    finally:
        os.close(fd)


def syncfs(fd: int) -> bool:
    """Flush every dirty page of the filesystem holding ``fd`` (Linux ``syncfs``).

    One call instead of thousands of ``fsync`` when a store has written to
    many files. Returns False where ``syncfs`` is not available.
    """
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        call = libc.syncfs
    except (OSError, AttributeError):
        return False
    if call(fd) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return True


def writer_lock(path: Path, kind: str) -> int:
    """Take the one-writer lock of a store file (``PATH.lock``); returns the fd to close."""
    lock_path = path.with_name(path.name + ".lock")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        raise os_error(exc, lock_path, "locking") from exc
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise StoreError(
            f"{path} is open for writing in another process; a {kind} store has one writer "
            "at a time (open this one with ?readonly=1 to read it, or use bitmap: for a "
            "store shared by processes)"
        ) from None
    return fd


Translate = Callable[[OSError, Path, str], Exception]


def write_atomic(
    path: str | os.PathLike[str],
    data: bytes | bytearray | memoryview | mmap.mmap | str,
    *,
    mode: int = 0o644,
    durable: bool = True,
    translate: Translate | None = None,
) -> None:
    """Replace ``path`` by ``data`` so that a crash leaves the old or the new file, never
    half, and the new one survives a power cut once this returns: a temporary file in the
    same directory, its data synced, renamed over ``path``, the directory synced.

    ``str`` data is written as UTF-8. ``mode`` is the new file's permission bits (0o644:
    gateways often read as another user, Squid's). ``durable=False`` keeps the atomic
    replacement but skips both syncs: for files rebuilt from a store that is itself durable
    (the learned lists, re-rendered from the verdicts on every build). An ``OSError`` becomes
    ``translate(exc, path, "writing")`` (default :func:`os_error`: a store error naming
    the path and the fix); the temporary file never stays behind.
    """
    target = Path(path)
    blob = data.encode("utf-8") if isinstance(data, str) else data
    convert = translate or os_error
    tmp: str | None = None
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
        with os.fdopen(fd, "wb") as fh:
            fh.write(blob)
            if durable:
                fh.flush()
                os.fsync(fh.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, target)
        tmp = None
        if durable:
            fsync_dir(target.parent)
    except OSError as exc:
        raise convert(exc, target, "writing") from exc
    finally:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)


@contextlib.contextmanager
def file_lock(path: str | os.PathLike[str], *, shared: bool = False) -> Iterator[int]:
    """Hold an ``flock`` on the lock file ``path`` (created when missing) for the
    ``with`` block: exclusive by default, ``shared=True`` for readers. It waits for the
    holder; the lock goes with the process, so a crash never leaves it taken."""
    where = Path(path)
    try:
        fd = os.open(where, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        raise os_error(exc, where, "locking") from exc
    try:
        fcntl.flock(fd, fcntl.LOCK_SH if shared else fcntl.LOCK_EX)
        yield fd
    finally:
        os.close(fd)  # closing the last fd of the file releases the flock
