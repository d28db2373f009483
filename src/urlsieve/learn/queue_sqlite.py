"""``sqlite:PATH`` — the default queue: one SQLite file shared by the processes of a machine.

Squid runs helpers as separate processes; each offers sightings while a learner claims. The
file is in WAL mode (readers never wait for the writer); every ``offer``, ``claim``,
``done`` and ``retry`` batch is one ``BEGIN IMMEDIATE`` transaction, so a process killed at
any point leaves either all of a batch or none of it, and writers queue behind each other
for up to ``busy_timeout`` seconds (default 10) before :class:`QueueUnavailable`.

``synchronous=normal`` (default) survives any process crash; power loss can lose the last
transactions but never damages the file; ``synchronous=full`` syncs every transaction.
``max_bytes`` caps the file (SQLite's ``max_page_count``): a write that would grow it
past the cap fails like a full disk.

Errors: a file that is not a queue database (another SQLite file, not SQLite at all,
damaged, or written by a newer urlsieve) raises :class:`QueueCorrupt` naming the file and
what to do; a full disk (or the cap), a lock held too long or an I/O error raise
:class:`QueueUnavailable` — the batch was rolled back, nothing queued before is lost.

Layout: one row per URL (``urls``; done and failed rows stay ``recheck`` seconds so the
URL is not queued again, then are purged), the hosts that have a verdict (``hosts``), and
shared counters (``counters``). The file is marked with ``PRAGMA application_id`` and the
schema version with ``PRAGMA user_version``.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from urlsieve.exceptions import ConfigError, QueueCorrupt, QueueUnavailable
from urlsieve.learn.queue import (
    BURST_WINDOW,
    DEFAULT_MAX_ATTEMPTS,
    DEFAULT_RECHECK,
    MAX_CLIENTS,
    MAX_SITE,
    MAX_URL_BYTES,
    ClosingQueue,
    Job,
    QueueStats,
    Sighting,
    band,
    check_claim,
    check_options,
    decode_url,
    encode_url,
    group,
    host_of,
)
from urlsieve.store import sqlite

__all__ = ["APPLICATION_ID", "SCHEMA_VERSION", "SqliteQueue"]

#: ``PRAGMA application_id`` of a queue file ("UQ01").
APPLICATION_ID = 0x55513031
#: The schema this module writes; a file with a higher ``user_version`` is refused.
SCHEMA_VERSION = 1

_WAITING, _LEASED, _DONE, _FAILED = 0, 1, 2, 3
_COUNTERS = ("done", "failed", "stale", "dropped", "sightings", "queued")

_SCHEMA = """
CREATE TABLE urls (
    id INTEGER PRIMARY KEY,
    url BLOB NOT NULL UNIQUE,
    host BLOB NOT NULL,
    state INTEGER NOT NULL,          -- 0 waiting, 1 leased, 2 done, 3 failed
    gen INTEGER NOT NULL,            -- bumped each time the URL is queued again
    lease INTEGER NOT NULL,          -- bumped on each claim
    prio INTEGER NOT NULL,           -- band(): 4 x new host + demand level
    first_seen REAL NOT NULL,
    requests INTEGER NOT NULL,
    clients BLOB NOT NULL,           -- up to MAX_CLIENTS 8-byte client digests
    attempts INTEGER NOT NULL,
    ready_at REAL NOT NULL,          -- waiting: claimable from then (retry delay)
    until REAL NOT NULL,             -- leased: lease end; done/failed: when
    consumer TEXT
);
CREATE INDEX urls_waiting ON urls (prio DESC, requests DESC, first_seen, id) WHERE state = 0;
CREATE INDEX urls_leased ON urls (until) WHERE state = 1;
CREATE INDEX urls_finished ON urls (until) WHERE state >= 2;
CREATE INDEX urls_host ON urls (host) WHERE state < 2;
CREATE TABLE hosts (host BLOB PRIMARY KEY, judged_at REAL NOT NULL) WITHOUT ROWID;
CREATE TABLE counters (name TEXT PRIMARY KEY, value INTEGER NOT NULL) WITHOUT ROWID;
"""

# Not part of the versioned schema: made by the first ``admit`` (a gateway's), read by no
# one else, so a queue file of an older urlsieve gains it without a migration.
_BURST = (
    "CREATE TABLE IF NOT EXISTS bursts (site BLOB PRIMARY KEY, passed INTEGER NOT NULL, "
    "since REAL NOT NULL) WITHOUT ROWID"
)
# One statement: count the request when the site is under its limit (or its count is
# older than the window, which starts it again); a change means the request passes.
_ADMIT = (
    "INSERT INTO bursts VALUES (?1, 1, ?2) ON CONFLICT(site) DO UPDATE SET "
    "passed = CASE WHEN since <= ?2 - ?4 THEN 1 ELSE passed + 1 END, "
    "since = CASE WHEN since <= ?2 - ?4 THEN ?2 ELSE since END "
    "WHERE passed < ?3 OR since <= ?2 - ?4"
)

_MOVE_AWAY = "move the file away (a new queue is created in its place) or point the spec elsewhere"


def _statements(script: str) -> list[str]:
    """The statements of a script (``--`` comments removed), to run inside one transaction."""
    text = "\n".join(line.split("--", 1)[0] for line in script.splitlines())
    return [part.strip() for part in text.split(";") if part.strip()]


class SqliteQueue(ClosingQueue):
    """An :class:`~urlsieve.learn.queue.UnknownQueue` in one SQLite file (WAL mode)."""

    def __init__(
        self,
        location: str,
        *,
        recheck: float = DEFAULT_RECHECK,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
        max_url: int = MAX_URL_BYTES,
        busy_timeout: float = 10.0,
        synchronous: str = "normal",
        max_bytes: int | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        check_options(recheck, max_attempts, max_url)
        if not location:
            raise ConfigError("queue spec 'sqlite:' needs a path: sqlite:/var/lib/urlsieve/q.db")
        if synchronous.lower() not in ("normal", "full"):
            raise ConfigError(f"synchronous={synchronous!r}: choose normal or full")
        if not busy_timeout > 0:
            raise ConfigError(f"busy_timeout={busy_timeout!r}: must be > 0 seconds")
        self.path = location
        self.recheck = recheck
        self.max_attempts = max_attempts
        self.max_url = max_url
        self._clock = clock
        self._lock = threading.Lock()
        self._db: sqlite3.Connection | None = None
        self._bursts_ready = False
        # The journal mode is set by _setup, after the file is known to be a queue.
        db = sqlite.connect(
            location,
            what="learning queue",
            timeout=busy_timeout,
            wal=False,
            unavailable=QueueUnavailable,
            corrupt=QueueCorrupt,
        )
        try:
            self._setup(db, synchronous.upper(), max_bytes)
        except BaseException:
            db.close()
            raise
        self._db = db

    # ------------------------------------------------------------------ opening

    def _setup(self, db: sqlite3.Connection, synchronous: str, max_bytes: int | None) -> None:
        with self._errors("open"):
            app, version, tables = self._identity(db)
            if app != APPLICATION_ID and (app != 0 or tables):
                raise QueueCorrupt(
                    self.path,
                    f"not a urlsieve queue database (application_id {app:#x}, "
                    f"{tables} tables): {_MOVE_AWAY}",
                )
            if version > SCHEMA_VERSION:
                raise QueueCorrupt(
                    self.path,
                    f"queue schema version {version} is newer than this urlsieve reads "
                    f"({SCHEMA_VERSION}): upgrade urlsieve, or {_MOVE_AWAY}",
                )
            db.execute("PRAGMA journal_mode=WAL")
            db.execute(f"PRAGMA synchronous={synchronous}")
            if max_bytes is not None:
                page = int(db.execute("PRAGMA page_size").fetchone()[0])
                db.execute(f"PRAGMA max_page_count={max(8, int(max_bytes) // page)}")
            if app == 0:
                db.execute("BEGIN IMMEDIATE")
                try:
                    if self._identity(db)[0] == 0:  # another process may have just made it
                        for statement in _statements(_SCHEMA):
                            db.execute(statement)
                        db.execute(f"PRAGMA application_id={APPLICATION_ID}")
                        db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
                    db.execute("COMMIT")
                except BaseException:
                    if db.in_transaction:
                        db.execute("ROLLBACK")
                    raise
            missing = {"urls", "hosts", "counters"} - {
                row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type='table'")
            }
            if missing:
                raise QueueCorrupt(
                    self.path, f"damaged queue: tables {sorted(missing)} missing: {_MOVE_AWAY}"
                )

    @staticmethod
    def _identity(db: sqlite3.Connection) -> tuple[int, int, int]:
        app = int(db.execute("PRAGMA application_id").fetchone()[0])
        version = int(db.execute("PRAGMA user_version").fetchone()[0])
        tables = int(db.execute("SELECT count(*) FROM sqlite_master").fetchone()[0])
        return app, version, tables

    # ------------------------------------------------------------------ plumbing

    @contextmanager
    def _errors(self, what: str) -> Iterator[None]:
        """Translate SQLite errors: damage is :class:`QueueCorrupt`, the rest unavailable."""
        try:
            yield
        except sqlite3.Error as exc:
            code = getattr(exc, "sqlite_errorcode", None)
            primary = None if code is None else code & 0xFF
            text = str(exc)
            if primary in (sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB) or (
                primary is None and "malformed" in text
            ):
                raise QueueCorrupt(
                    self.path, f"damaged queue database ({text}): {_MOVE_AWAY}"
                ) from exc
            if primary == sqlite3.SQLITE_ERROR and "no such" in text:
                raise QueueCorrupt(
                    self.path, f"damaged queue database ({text}): {_MOVE_AWAY}"
                ) from exc
            if primary == sqlite3.SQLITE_FULL:
                raise QueueUnavailable(
                    f"{self.path}: {what}: disk full or max_bytes reached ({text}); nothing was "
                    "written and nothing queued is lost: free space (or raise max_bytes) and retry"
                ) from exc
            raise QueueUnavailable(f"{self.path}: {what} failed ({text}); retry") from exc

    @contextmanager
    def _transaction(self, what: str, *, write: bool = True) -> Iterator[sqlite3.Connection]:
        """One transaction (``BEGIN IMMEDIATE`` to write: writers queue for the lock)."""
        with self._lock, self._errors(what):
            db = self._db
            if db is None:
                raise QueueUnavailable(f"{self.path}: the queue is closed")
            db.execute("BEGIN IMMEDIATE" if write else "BEGIN")
            try:
                yield db
                db.execute("COMMIT")
            except BaseException:
                if db.in_transaction:
                    db.execute("ROLLBACK")
                raise

    @staticmethod
    def _count(db: sqlite3.Connection, **counts: int) -> None:
        rows = [(name, n) for name, n in counts.items() if n]
        if rows:
            db.executemany(
                "INSERT INTO counters (name, value) VALUES (?, ?) "
                "ON CONFLICT(name) DO UPDATE SET value = value + excluded.value",
                rows,
            )

    @staticmethod
    def _judged(db: sqlite3.Connection, host: bytes) -> bool:
        return db.execute("SELECT 1 FROM hosts WHERE host = ?", (host,)).fetchone() is not None

    # ------------------------------------------------------------------ the protocol

    def offer(self, sightings: Sequence[Sighting]) -> int:
        now = self._clock()
        batch = group(sightings, now, self.max_url)
        queued = 0
        with self._transaction("offer") as db:
            for raw, seen in batch.urls.items():
                row = db.execute(
                    "SELECT id, state, gen, until, requests, clients, first_seen, host, prio "
                    "FROM urls WHERE url = ?",
                    (raw,),
                ).fetchone()
                if row is not None and row[1] <= _LEASED:
                    rid, _, _, _, requests, clients, first, _, prio = row
                    have = {clients[i : i + 8] for i in range(0, len(clients), 8)}
                    for digest in seen.clients:
                        if len(have) < MAX_CLIENTS and digest not in have:
                            have.add(digest)
                            clients += digest
                    requests += seen.requests
                    new_prio = band(prio >= 4, requests, len(clients) // 8)
                    db.execute(
                        "UPDATE urls SET requests = ?, clients = ?, first_seen = ?, prio = ? "
                        "WHERE id = ?",
                        (requests, clients, min(first, seen.first), new_prio, rid),
                    )
                    continue
                if row is not None and now - row[3] < self.recheck:
                    continue  # done (or failed) recently: not queued again yet
                host = host_of(raw)
                clients = b"".join(seen.clients)
                prio = band(not self._judged(db, host), seen.requests, len(seen.clients))
                values = (seen.first, seen.requests, clients, prio, now)
                if row is None:
                    # A row id can be reused once its row is purged: the generation of a
                    # new row is the queue's running count of URLs queued (plus one), so a
                    # job of the purged row never matches the new one.
                    db.execute(
                        "INSERT INTO urls (url, host, state, gen, lease, first_seen, requests, "
                        "clients, prio, ready_at, attempts, until) "
                        "VALUES (?, ?, 0, 1 + ? + COALESCE((SELECT value FROM counters "
                        "WHERE name = 'queued'), 0), 0, ?, ?, ?, ?, ?, 0, 0)",
                        (raw, host, queued, *values),
                    )
                else:
                    db.execute(
                        "UPDATE urls SET state = 0, gen = gen + 1, lease = 0, first_seen = ?, "
                        "requests = ?, clients = ?, prio = ?, ready_at = ?, attempts = 0, "
                        "until = 0, consumer = NULL WHERE id = ?",
                        (*values, row[0]),
                    )
                queued += 1
            self._count(db, dropped=batch.dropped, sightings=batch.sightings, queued=queued)
        return queued

    def claim(self, consumer: str, count: int, *, lease: float = 60.0) -> list[Job]:
        check_claim(consumer, lease)
        if count <= 0:
            return []
        now = self._clock()
        with self._transaction("claim") as db:
            # leases that ran out (the learner died): back to waiting, a failed attempt each
            expired = db.execute(
                "SELECT id, attempts FROM urls WHERE state = 1 AND until <= ? LIMIT 1000", (now,)
            ).fetchall()
            failed = [(now, rid) for rid, att in expired if att + 1 >= self.max_attempts]
            if failed:
                db.executemany(
                    "UPDATE urls SET state = 3, attempts = attempts + 1, until = ?, clients = x'' "
                    "WHERE id = ?",
                    failed,
                )
            retried = [(now, rid) for rid, att in expired if att + 1 < self.max_attempts]
            if retried:
                db.executemany(
                    "UPDATE urls SET state = 0, attempts = attempts + 1, ready_at = ? WHERE id = ?",
                    retried,
                )
            self._count(db, failed=len(failed))
            rows = db.execute(
                "SELECT id, url, gen, lease, first_seen, requests, length(clients) / 8, attempts "
                "FROM urls WHERE state = 0 AND ready_at <= ? "
                "ORDER BY prio DESC, requests DESC, first_seen, id LIMIT ?",
                (now, count),
            ).fetchall()
            db.executemany(
                "UPDATE urls SET state = 1, lease = lease + 1, until = ?, consumer = ? "
                "WHERE id = ?",
                [(now + lease, consumer, row[0]) for row in rows],
            )
        return [
            Job(
                url=decode_url(url),
                key=f"{rid}:{gen}:{lease_no + 1}",
                first_seen=first,
                requests=requests,
                clients=clients,
                attempts=attempts,
            )
            for rid, url, gen, lease_no, first, requests, clients, attempts in rows
        ]

    @staticmethod
    def _parse(job: Job) -> tuple[int, int, int] | None:
        parts = str(job.key).split(":")
        if len(parts) != 3:
            return None
        try:
            rid, gen, lease = (int(p) for p in parts)
        except ValueError:
            return None
        return rid, gen, lease

    def _job_row(
        self, db: sqlite3.Connection, job: Job
    ) -> tuple[tuple[int, int, int], tuple[Any, ...]] | None:
        """The job's key and its row ``(state, gen, lease, attempts, host)``, or None when
        the job names no row of this queue holding its URL."""
        key = self._parse(job)
        if key is None:
            return None
        row = db.execute(
            "SELECT state, gen, lease, attempts, host, url FROM urls WHERE id = ?", (key[0],)
        ).fetchone()
        if row is None or row[5] != encode_url(job.url, self.max_url):
            return None
        return key, tuple(row)

    def done(self, jobs: Sequence[Job]) -> int:
        now = self._clock()
        completed = 0
        with self._transaction("done") as db:
            for job in jobs:
                found = self._job_row(db, job)
                if found is None or found[1][1] != found[0][1] or found[1][0] > _LEASED:
                    self._count(db, stale=1)
                    continue
                key, row = found
                db.execute(
                    "UPDATE urls SET state = 2, until = ?, clients = x'', consumer = NULL "
                    "WHERE id = ?",
                    (now, key[0]),
                )
                host = row[4]
                if not self._judged(db, host):
                    db.execute("INSERT INTO hosts (host, judged_at) VALUES (?, ?)", (host, now))
                    db.execute(  # the host has a verdict now: its other URLs drop a band
                        "UPDATE urls SET prio = prio - 4 WHERE host = ? AND state < 2 "
                        "AND prio >= 4",
                        (host,),
                    )
                completed += 1
            self._count(db, done=completed)
            db.execute(  # forget URLs done long enough ago to be queued again anyway
                "DELETE FROM urls WHERE id IN "
                "(SELECT id FROM urls WHERE state >= 2 AND until <= ? LIMIT 256)",
                (now - self.recheck,),
            )
        return completed

    def retry(self, jobs: Sequence[Job], *, delay: float = 30.0) -> int:
        now = self._clock()
        taken = failed = 0
        with self._transaction("retry") as db:
            for job in jobs:
                found = self._job_row(db, job)
                if found is None or found[1][0] != _LEASED or found[1][1:3] != found[0][1:]:
                    self._count(db, stale=1)
                    continue
                key, row = found
                taken += 1
                if row[3] + 1 >= self.max_attempts:
                    failed += 1
                    db.execute(
                        "UPDATE urls SET state = 3, attempts = attempts + 1, until = ?, "
                        "clients = x'', consumer = NULL WHERE id = ?",
                        (now, key[0]),
                    )
                else:
                    db.execute(
                        "UPDATE urls SET state = 0, attempts = attempts + 1, ready_at = ?, "
                        "consumer = NULL WHERE id = ?",
                        (now + max(0.0, delay), key[0]),
                    )
            self._count(db, failed=failed)
        return taken

    def admit(self, site: str, limit: int, window: float = BURST_WINDOW) -> bool:
        if limit <= 0:
            return False
        now = self._clock()
        with self._lock, self._errors("admit"):
            db = self._db
            if db is None:
                raise QueueUnavailable(f"{self.path}: the queue is closed")
            if not self._bursts_ready:
                db.execute(_BURST)
                self._bursts_ready = True
            name = str(site).encode("utf-8", "surrogatepass")[:MAX_SITE]
            cursor = db.execute(_ADMIT, (name, now, limit, window))
            return cursor.rowcount > 0

    def _states(self, db: sqlite3.Connection) -> tuple[int, int]:
        waiting = db.execute("SELECT count(*) FROM urls WHERE state = 0").fetchone()[0]
        leased = db.execute("SELECT count(*) FROM urls WHERE state = 1").fetchone()[0]
        return int(waiting), int(leased)

    def depth(self) -> int:
        with self._transaction("depth", write=False) as db:
            return sum(self._states(db))

    def stats(self) -> QueueStats:
        with self._transaction("stats", write=False) as db:
            waiting, leased = self._states(db)
            counts = dict.fromkeys(_COUNTERS, 0)
            for name, value in db.execute("SELECT name, value FROM counters"):
                if name in counts:
                    counts[name] = int(value)
            size = os.path.getsize(self.path) if os.path.exists(self.path) else 0
        return QueueStats(
            backend="sqlite",
            waiting=waiting,
            leased=leased,
            extra={"path": self.path, "bytes": size},
            **counts,
        )

    def close(self) -> None:
        with self._lock:
            if self._db is not None:
                self._db.close()
                self._db = None
