"""What the gateway has learned: one row per URL, kept in SQLite (WAL) beside the queue.

A verdict comes from the classifier (``learned``), from the crawler (``redirect``: a
redirect hop the filter blocks) or from an operator (``override``: ``urlsieve learn
allow|block``). Overrides survive re-learning: a learned verdict never replaces one.
Each row keeps its evidence (score, top phrases, fetch time, content hash), which the
rendered lists carry as a provenance comment and ``urlsieve learn show`` prints.

The rows are rendered into ordinary list trees and compiled into the overlay snapshot
by :mod:`urlsieve.learn.overlay`.
"""

from __future__ import annotations

import json
import re
import sqlite3
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from urlsieve.exceptions import InvalidURL, LearnError, QueueCorrupt, QueueUnavailable
from urlsieve.gateway.learning import SOURCES
from urlsieve.store import sqlite
from urlsieve.store.spec import Backend, Registry
from urlsieve.store.valkey import SERVER_SCHEMES, is_server_url
from urlsieve.url import CRAWLER, canonicalize, parse_url

__all__ = [
    "SOURCES",
    "VERDICT_BACKENDS",
    "Learned",
    "VerdictStore",
    "Verdicts",
    "open_verdicts",
    "rule_key",
]

#: What a provenance comment must not carry (C0 and C1 controls, DEL).
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")

_SCHEMA_VERSION = 1
_SCHEMA = """
CREATE TABLE IF NOT EXISTS verdict (
    key TEXT PRIMARY KEY,        -- the rule as a list line: host/path?query, or host
    host TEXT NOT NULL,
    action TEXT NOT NULL,        -- block | allow
    category TEXT NOT NULL,
    source TEXT NOT NULL,        -- learned | redirect | override
    score INTEGER NOT NULL DEFAULT 0,
    evidence TEXT NOT NULL DEFAULT '[]',
    url TEXT NOT NULL,           -- the URL as queued
    final_url TEXT,
    content_hash TEXT,
    fetched_at REAL,
    first_seen REAL,
    decided_at REAL NOT NULL,
    note TEXT NOT NULL DEFAULT ''
);
CREATE INDEX IF NOT EXISTS verdict_host ON verdict(host);
CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value TEXT NOT NULL);
INSERT OR IGNORE INTO meta VALUES ('version', '0');
"""


def rule_key(url: str) -> tuple[str, str]:
    """``(key, host)`` of a URL: the list line that matches it (host, path and query,
    no scheme) and its host. A bare host (``example.com``) is a host rule's key.
    The query is read as the learner's queue reads it (the crawler profile: sorted, no
    tracking parameters), which is also how the gateway looks learned rules up
    (:func:`urlsieve.layered.learned_form`), so every spelling of a page has one key.
    :class:`InvalidURL` for what has no usable host."""
    text = url.strip()
    if "/" not in text and ":" not in text:  # a host name on its own: a host rule
        parsed = parse_url(f"http://{text}/")
        return parsed.host, parsed.host
    text = text if "://" in text else f"http://{text}"
    if "?" in text:
        text = canonicalize(text, profile=CRAWLER)
    parsed = parse_url(text)
    return parsed.location, parsed.host


@dataclass(frozen=True)
class Learned:
    """One learned (or overridden) verdict."""

    key: str
    host: str
    action: str
    category: str
    source: str
    score: int = 0
    evidence: tuple[tuple[str, int, int], ...] = ()  # (phrase, weight, count), strongest first
    url: str = ""
    final_url: str | None = None
    content_hash: str | None = None
    fetched_at: float | None = None
    first_seen: float | None = None
    decided_at: float = field(default_factory=time.time)
    note: str = ""

    @property
    def is_host(self) -> bool:
        """A host rule (``example.com``) rather than a URL rule."""
        return "/" not in self.key

    def provenance(self) -> str:
        """The comment line written above the rule in the learned lists."""
        parts = [f"{self.source}", f"{self.action}", f"category={self.category}"]
        if self.source != "override":
            parts.append(f"score={self.score}")
        if self.evidence:
            top = ",".join(
                f"{json.dumps(p, ensure_ascii=False)}x{n}" for p, _, n in self.evidence[:5]
            )
            parts.append(f"phrases={top}")
        if self.fetched_at is not None:
            parts.append(
                "fetched=" + time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.fetched_at))
            )
        if self.content_hash:
            parts.append(f"sha256={self.content_hash[:16]}")
        if self.note:
            parts.append(f"note={json.dumps(self.note, ensure_ascii=False)}")
        # One comment line, readable by the list reader: no line break, and no NUL (a list
        # file with a NUL byte is refused whole as binary) nor other control character.
        return _CONTROL.sub(" ", " ".join(parts))


class VerdictStore:
    """The learned verdicts of one gateway (or fleet learner), in a SQLite file."""

    def __init__(self, path: str | Path) -> None:
        self.path = str(path)
        self._lock = threading.RLock()
        # One connection shared by the learner's threads, serialised by a lock.
        self._db = sqlite.connect(
            self.path,
            what="verdict store",
            timeout=30,
            unavailable=QueueUnavailable,
            corrupt=QueueCorrupt,
        )
        try:
            self._db.executescript(_SCHEMA)
            found = self._db.execute("SELECT value FROM meta WHERE name='schema'").fetchone()
            if found is None:
                self._db.execute(
                    "INSERT OR IGNORE INTO meta VALUES ('schema', ?)", (str(_SCHEMA_VERSION),)
                )
            elif found[0] != str(_SCHEMA_VERSION):
                raise QueueCorrupt(
                    self.path,
                    f"verdict database schema {found[0]}, this urlsieve reads "
                    f"{_SCHEMA_VERSION}: upgrade urlsieve or move the file away",
                )
        except sqlite3.DatabaseError as exc:
            raise _damaged(self.path, exc) from exc

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def __enter__(self) -> VerdictStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _write(self, sql: str, rows: Sequence[tuple[Any, ...]]) -> None:
        with self._lock:
            try:
                self._db.execute("BEGIN IMMEDIATE")
                self._db.executemany(sql, rows)
                self._db.execute(
                    "UPDATE meta SET value = CAST(value AS INTEGER) + 1 WHERE name = 'version'"
                )
                self._db.execute("COMMIT")
            except (sqlite3.Error, UnicodeEncodeError) as exc:
                if self._db.in_transaction:
                    self._db.execute("ROLLBACK")
                if isinstance(exc, sqlite3.DatabaseError) and not isinstance(
                    exc, sqlite3.OperationalError | sqlite3.IntegrityError
                ):
                    raise _damaged(self.path, exc) from exc
                raise LearnError(f"{self.path}: cannot write the verdicts: {exc}") from exc

    def _read(self, sql: str, args: tuple[Any, ...] = ()) -> list[Any]:
        with self._lock:
            try:
                return self._db.execute(sql, args).fetchall()
            except sqlite3.OperationalError as exc:
                raise LearnError(f"{self.path}: cannot read the verdicts: {exc}") from exc
            except sqlite3.DatabaseError as exc:
                raise _damaged(self.path, exc) from exc

    def put(self, verdicts: Sequence[Learned]) -> None:
        """Store verdicts; an override is never replaced by a learned or redirect verdict."""
        rows = [
            (
                v.key,
                v.host,
                v.action,
                v.category,
                v.source,
                v.score,
                json.dumps(v.evidence, ensure_ascii=False),
                v.url,
                v.final_url,
                v.content_hash,
                v.fetched_at,
                v.first_seen,
                v.decided_at,
                v.note,
            )
            for v in verdicts
        ]
        self._write(
            "INSERT INTO verdict VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?) "
            "ON CONFLICT(key) DO UPDATE SET host=excluded.host, action=excluded.action, "
            "category=excluded.category, source=excluded.source, score=excluded.score, "
            "evidence=excluded.evidence, url=excluded.url, final_url=excluded.final_url, "
            "content_hash=excluded.content_hash, fetched_at=excluded.fetched_at, "
            "first_seen=COALESCE(verdict.first_seen, excluded.first_seen), "
            "decided_at=excluded.decided_at, note=excluded.note "
            "WHERE verdict.source != 'override' OR excluded.source = 'override'",
            rows,
        )

    def forget(self, keys: Sequence[str]) -> int:
        """Remove verdicts (overrides included); returns how many were there."""
        with self._lock:
            before = self.count()
            self._write("DELETE FROM verdict WHERE key = ?", [(k,) for k in keys])
            return before - self.count()

    def get(self, key: str) -> Learned | None:
        rows = self._read("SELECT * FROM verdict WHERE key = ?", (key,))
        return _learned(rows[0]) if rows else None

    def find(self, url: str) -> Learned | None:
        """The verdict stored for ``url``'s rule key, else for its host."""
        try:
            key, host = rule_key(url)
        except InvalidURL:
            return None
        return self.get(key) or self.get(host)

    def all(self, *, source: str | None = None) -> Iterator[Learned]:
        sql = "SELECT * FROM verdict"
        args: tuple[str, ...] = ()
        if source is not None:
            sql += " WHERE source = ?"
            args = (source,)
        for row in self._read(sql + " ORDER BY host, key", args):
            yield _learned(row)

    def count(self) -> int:
        found: int = self._read("SELECT COUNT(*) FROM verdict")[0][0]
        return found

    def version(self) -> int:
        """Changes whenever a verdict is stored or forgotten (by any process)."""
        found = self._read("SELECT value FROM meta WHERE name = 'version'")
        return int(found[0][0]) if found else 0

    def counts(self) -> dict[tuple[str, str, str], int]:
        """``(source, action, category)`` → rows."""
        return {
            (s, a, c): n
            for s, a, c, n in self._read(
                "SELECT source, action, category, COUNT(*) FROM verdict GROUP BY 1, 2, 3"
            )
        }


class Verdicts(Protocol):
    """What the learner, the overlay build and the review commands need of a verdict
    store: :class:`VerdictStore` (SQLite, one machine) or
    :class:`~urlsieve.learn.verdicts_valkey.ValkeyVerdicts` (shared by a fleet)."""

    path: str

    def put(self, verdicts: Sequence[Learned]) -> None: ...
    def forget(self, keys: Sequence[str]) -> int: ...
    def get(self, key: str) -> Learned | None: ...
    def find(self, url: str) -> Learned | None: ...
    def all(self, *, source: str | None = None) -> Iterator[Learned]: ...
    def count(self) -> int: ...
    def counts(self) -> dict[tuple[str, str, str], int]: ...
    def version(self) -> int: ...
    def close(self) -> None: ...


#: Verdict store backends by spec prefix: ``sqlite:PATH`` (a bare path too) and the
#: Valkey family (loaded when named: no import circle, and only with the extra).
VERDICT_BACKENDS: Registry[Verdicts] = Registry(
    "verdict store spec",
    {
        "sqlite": Backend("urlsieve.learn.verdicts:VerdictStore", {}),
        **{
            scheme: Backend(
                "urlsieve.learn.verdicts_valkey:ValkeyVerdicts",
                {"prefix": str, "timeout": float},
                extra="valkey",
                server=True,
            )
            for scheme in SERVER_SCHEMES
        },
    },
)


def open_verdicts(spec: str | Path) -> Verdicts:
    """The verdict store ``spec`` names: a ``valkey://`` (``valkeys://``, ``redis://``,
    ``rediss://``, ``unix://``) URL shared by a fleet (``?prefix=``, default
    ``urlsieve:learned``), else a SQLite file: ``sqlite:PATH`` or the bare path."""
    text = str(spec)
    if is_server_url(text) or text.startswith("sqlite:"):
        return VERDICT_BACKENDS.open(text)
    return VerdictStore(text)


def _damaged(path: str, exc: sqlite3.DatabaseError) -> QueueCorrupt:
    return QueueCorrupt(
        path,
        f"not a urlsieve verdict database, or a damaged one ({exc}): move it away and let the "
        "learner start a new one (learned rules are lost, the lists it rendered stay)",
    )


def _learned(row: tuple[Any, ...]) -> Learned:
    (key, host, action, category, source, score, evidence, url, final_url, content_hash,
     fetched_at, first_seen, decided_at, note) = row  # fmt: skip
    return Learned(
        key=key,
        host=host,
        action=action,
        category=category,
        source=source,
        score=score,
        evidence=_evidence(evidence),
        url=url,
        final_url=final_url,
        content_hash=content_hash,
        fetched_at=fetched_at,
        first_seen=first_seen,
        decided_at=decided_at,
        note=note,
    )


def _evidence(text: str) -> tuple[tuple[str, int, int], ...]:
    """A row's evidence column; a damaged one (edited by hand, half written) reads as no
    evidence, so one bad row costs its provenance, not every other learned rule."""
    try:
        return tuple((str(p), int(w), int(n)) for p, w, n in json.loads(text))
    except (TypeError, ValueError):
        return ()
