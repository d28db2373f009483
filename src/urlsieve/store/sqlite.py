"""One SQLite connector for every store in a database file, with one error translation.

The learner's queue and verdicts and the warn grants keep their state in SQLite files
shared by the processes of one machine (Squid's helper children, the service, the
learner). :func:`connect` opens them alike: autocommit (transactions are explicit),
usable from the threads of a process (the caller serialises), WAL journal so readers never
wait for the writer, and a busy timeout instead of an immediate "database is locked".
:func:`sqlite_error` turns a ``sqlite3.Error`` into the store error it means.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Callable

from urlsieve.exceptions import (
    StoreCorrupt,
    StoreError,
    StoreFull,
    StoreReadOnly,
    StoreUnavailable,
)

__all__ = ["connect", "sqlite_error"]

# SQLite's primary result codes (https://sqlite.org/rescode.html).
_PERM, _BUSY, _LOCKED, _READONLY, _IOERR, _CORRUPT, _FULL, _CANTOPEN, _NOTADB = (
    3, 5, 6, 8, 10, 11, 13, 14, 26,
)  # fmt: skip


def sqlite_error(
    exc: sqlite3.Error,
    path: str | os.PathLike[str],
    doing: str,
    *,
    what: str,
    unavailable: type[StoreUnavailable] = StoreUnavailable,
    corrupt: Callable[[str, str], StoreCorrupt] | None = None,
) -> StoreError:
    """The store error ``exc`` (met while ``doing`` something to ``what`` at ``path``)
    means; raise it ``from exc``.

    A file that is not a database, or a damaged one: ``corrupt(path, reason)`` (default a
    :class:`StoreCorrupt` saying ``path: reason``; the learner passes its own). A full disk:
    :class:`StoreFull` (nothing was written). A file or directory it may not write:
    :class:`StoreReadOnly`. Locked past the busy timeout, an I/O error, a file that cannot
    be opened: ``unavailable`` (retry). Anything else: :class:`StoreError`.
    """
    code = getattr(exc, "sqlite_errorcode", None)
    primary = code & 0xFF if isinstance(code, int) else None
    reason = str(exc) or type(exc).__name__
    where = f"{what} {os.fspath(path)}"
    if primary in (_CORRUPT, _NOTADB):
        make = corrupt or (lambda at, why: StoreCorrupt(f"{at}: {why}"))
        return make(
            os.fspath(path),
            f"not a {what} database, or a damaged one ({reason}) while {doing}: move it "
            "away and let urlsieve start a new one",
        )
    if primary == _FULL:
        return StoreFull(f"{where}: no space left while {doing} ({reason}); nothing was written")
    if primary in (_READONLY, _PERM):
        return StoreReadOnly(
            f"{where}: cannot write while {doing} ({reason}): fix the permissions of the "
            "file and its directory"
        )
    if primary == _CANTOPEN:
        return unavailable(
            f"{where}: cannot open the database ({reason}): check that the directory exists "
            "and that this user may write there"
        )
    if primary in (_BUSY, _LOCKED, _IOERR) or isinstance(exc, sqlite3.OperationalError):
        return unavailable(
            f"{where}: {reason} while {doing} (check the path and permissions, then retry)"
        )
    return StoreError(f"{where}: {reason} while {doing}")


def connect(
    path: str | os.PathLike[str],
    *,
    what: str,
    timeout: float = 10.0,
    wal: bool = True,
    unavailable: type[StoreUnavailable] = StoreUnavailable,
    corrupt: Callable[[str, str], StoreCorrupt] | None = None,
) -> sqlite3.Connection:
    """A connection to the database at ``path`` (created when missing), set up as every
    store of urlsieve uses SQLite: autocommit, shared by the process's threads, WAL
    (``wal=False`` leaves the journal to a caller that checks the file first), and
    ``timeout`` seconds of waiting for a lock. Errors as :func:`sqlite_error` says."""
    try:
        db = sqlite3.connect(
            os.fspath(path), timeout=timeout, isolation_level=None, check_same_thread=False
        )
    except sqlite3.Error as exc:
        raise sqlite_error(
            exc, path, "opening", what=what, unavailable=unavailable, corrupt=corrupt
        ) from exc
    try:
        db.execute(f"PRAGMA busy_timeout={max(1, int(timeout * 1000))}")
        if wal:
            db.execute("PRAGMA journal_mode=WAL")
    except sqlite3.Error as exc:
        db.close()
        raise sqlite_error(
            exc, path, "opening", what=what, unavailable=unavailable, corrupt=corrupt
        ) from exc
    return db
