"""Users' review requests ("this is wrong" on a block page), kept in SQLite.

One table; the console lists the open ones and closes each with what was done. The
block page's POST is rate-limited per client before it gets here; the store caps how
many open requests it keeps (the oldest open ones beyond :data:`MAX_OPEN` are closed as
``expired``) so no client can fill the disk.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from typing import Any

__all__ = ["MAX_NOTE", "ReviewStore"]

MAX_OPEN = 10_000
MAX_NOTE = 500
MAX_URL = 2048

_SCHEMA = """
CREATE TABLE IF NOT EXISTS review (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    url TEXT NOT NULL,
    client TEXT,
    category TEXT,
    reason TEXT,
    note TEXT NOT NULL DEFAULT '',
    asked_at REAL NOT NULL,
    closed_at REAL,
    outcome TEXT
);
CREATE INDEX IF NOT EXISTS review_open ON review (closed_at, id);
"""


class ReviewStore:
    """Review requests in a SQLite file (``":memory:"``: kept while the service runs)."""

    def __init__(self, path: str = ":memory:") -> None:
        self.path = path
        self._lock = threading.Lock()
        self._conn: sqlite3.Connection | None = None
        self.count_open()  # opened now: a bad path fails at start

    @property
    def _db(self) -> sqlite3.Connection:
        """The connection, opened again after :meth:`close` (a service started twice)."""
        if self._conn is None:
            db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
            db.execute("PRAGMA busy_timeout = 5000")
            if self.path != ":memory:":
                db.execute("PRAGMA journal_mode = WAL")
            db.executescript(_SCHEMA)
            self._conn = db
        return self._conn

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def add(
        self,
        url: str,
        *,
        client: str | None,
        category: str | None,
        reason: str | None,
        note: str = "",
        now: float | None = None,
    ) -> int:
        now = time.time() if now is None else now
        with self._lock:
            cur = self._db.execute(
                "INSERT INTO review (url, client, category, reason, note, asked_at) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                (url[:MAX_URL], client, category, (reason or "")[:1000], note[:MAX_NOTE], now),
            )
            rowid = int(cur.lastrowid or 0)
            self._db.execute(
                "UPDATE review SET closed_at = ?, outcome = 'expired' WHERE closed_at IS NULL "
                "AND id <= (SELECT id FROM review WHERE closed_at IS NULL "
                "ORDER BY id DESC LIMIT 1 OFFSET ?)",
                (now, MAX_OPEN),
            )
        return rowid

    def open(self, limit: int = 200) -> list[dict[str, Any]]:
        with self._lock:
            rows = self._db.execute(
                "SELECT id, url, client, category, reason, note, asked_at FROM review "
                "WHERE closed_at IS NULL ORDER BY id DESC LIMIT ?",
                (limit,),
            ).fetchall()
        names = ("id", "url", "client", "category", "reason", "note", "asked_at")
        return [dict(zip(names, row, strict=True)) for row in rows]

    def get(self, review_id: int) -> dict[str, Any] | None:
        with self._lock:
            row = self._db.execute(
                "SELECT id, url, client, category, reason, note, asked_at, outcome FROM review "
                "WHERE id = ?",
                (review_id,),
            ).fetchone()
        if row is None:
            return None
        names = ("id", "url", "client", "category", "reason", "note", "asked_at", "outcome")
        return dict(zip(names, row, strict=True))

    def close_request(self, review_id: int, outcome: str, now: float | None = None) -> bool:
        now = time.time() if now is None else now
        with self._lock:
            cur = self._db.execute(
                "UPDATE review SET closed_at = ?, outcome = ? WHERE id = ? AND closed_at IS NULL",
                (now, outcome[:40], review_id),
            )
        return cur.rowcount > 0

    def count_open(self) -> int:
        with self._lock:
            (n,) = self._db.execute(
                "SELECT COUNT(*) FROM review WHERE closed_at IS NULL"
            ).fetchone()
        return int(n)
