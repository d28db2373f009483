"""``warn``: a pass-list entry written ``?category`` shows a warning page instead of
blocking, and a client that chooses to continue is let through to that site for a while.

A *grant* is (who, site) → an expiry: who is the user when Squid sends one, else the
client address; the site is the registrable domain of the URL's host (``news.example.co.uk``
for ``a.b.news.example.co.uk``), so "continue" covers the site, not one page. Grants live
in a store every helper child shares:

- ``sqlite:/var/lib/urlsieve/grants.db`` (one machine: the helper children and the
  service; SQLite in WAL mode, so readers never wait for the writer);
- ``valkey://host:6379/0`` (a fleet: every gateway sees a grant made through any of them;
  keys expire by themselves, ``SET … EX``);
- ``memory:`` (one process: tests).

A store that cannot be reached never lets a request through: the warning is shown again,
and the error is counted and logged by the caller.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

from urlsieve.exceptions import ConfigError, StoreUnavailable
from urlsieve.url.expressions import host_suffixes

__all__ = ["GrantStore", "MemoryGrants", "SqliteGrants", "ValkeyGrants", "grant_key", "open_grants"]

#: The longest grant (seconds): a day.
MAX_GRANT_SECONDS = 86_400


def site_of(host: str) -> str:
    """The registrable domain of a canonical host (an IP address is its own site)."""
    if host.startswith("[") or host.replace(".", "").isdigit():
        return host
    return host_suffixes(host)[-1]


def grant_key(who: str, host: str) -> str:
    return f"{who}\x00{site_of(host)}"


class GrantStore(Protocol):
    def granted(self, key: str) -> bool: ...

    def grant(self, key: str, seconds: int) -> None: ...

    def close(self) -> None: ...


class MemoryGrants:
    """Grants of one process (tests, a single service)."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._until: dict[str, float] = {}
        self._clock = clock
        self._lock = threading.Lock()

    def granted(self, key: str) -> bool:
        with self._lock:
            until = self._until.get(key)
            return until is not None and until > self._clock()

    def grant(self, key: str, seconds: int) -> None:
        with self._lock:
            if len(self._until) > 1 << 16:  # drop what has expired
                now = self._clock()
                self._until = {k: u for k, u in self._until.items() if u > now}
            self._until[key] = self._clock() + seconds

    def close(self) -> None:
        pass


class SqliteGrants:
    """Grants in an SQLite file shared by the processes of one machine."""

    def __init__(self, path: str, clock: Callable[[], float] = time.time) -> None:
        self.path = path
        self._clock = clock
        self._lock = threading.Lock()
        try:
            self._db = sqlite3.connect(
                path, timeout=2.0, check_same_thread=False, isolation_level=None
            )
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute(
                "CREATE TABLE IF NOT EXISTS grants (key TEXT PRIMARY KEY, until REAL NOT NULL)"
            )
        except sqlite3.Error as exc:
            raise StoreUnavailable(
                f"warn grants {path}: {exc} (check the path and permissions)"
            ) from exc

    def granted(self, key: str) -> bool:
        try:
            with self._lock:
                row = self._db.execute("SELECT until FROM grants WHERE key = ?", (key,)).fetchone()
        except sqlite3.Error as exc:
            raise StoreUnavailable(f"warn grants {self.path}: {exc}") from exc
        return row is not None and row[0] > self._clock()

    def grant(self, key: str, seconds: int) -> None:
        now = self._clock()
        try:
            with self._lock:
                self._db.execute(
                    "INSERT INTO grants (key, until) VALUES (?, ?) "
                    "ON CONFLICT(key) DO UPDATE SET until = excluded.until",
                    (key, now + seconds),
                )
                self._db.execute("DELETE FROM grants WHERE until < ?", (now - 3600,))
        except sqlite3.Error as exc:
            raise StoreUnavailable(f"warn grants {self.path}: {exc}") from exc

    def close(self) -> None:
        self._db.close()


class ValkeyGrants:
    """Grants on a Valkey (or Redis) server shared by a fleet; keys expire on the server."""

    def __init__(self, url: str, prefix: str = "urlsieve:grant:") -> None:
        try:
            import valkey
        except ImportError:
            raise ConfigError(
                "valkey:// grants need the [valkey] extra (pip install 'urlsieve[valkey]')"
            ) from None
        self._errors: tuple[type[Exception], ...] = (valkey.exceptions.ValkeyError, OSError)
        self._client: Any = valkey.Valkey.from_url(
            url, socket_timeout=1.0, socket_connect_timeout=1.0
        )
        self.url = url
        self.prefix = prefix

    def granted(self, key: str) -> bool:
        try:
            return bool(self._client.exists(self.prefix + key))
        except self._errors as exc:
            raise StoreUnavailable(f"warn grants {self.url}: {exc}") from exc

    def grant(self, key: str, seconds: int) -> None:
        try:
            self._client.set(self.prefix + key, b"1", ex=max(1, seconds))
        except self._errors as exc:
            raise StoreUnavailable(f"warn grants {self.url}: {exc}") from exc

    def close(self) -> None:
        self._client.close()


def open_grants(spec: str) -> GrantStore:
    """``memory:``, ``sqlite:PATH`` or ``valkey://…`` (``redis://`` too)."""
    if spec == "memory:":
        return MemoryGrants()
    if spec.startswith("sqlite:"):
        path = spec.removeprefix("sqlite:")
        if not path:
            raise ConfigError(
                "warn_store 'sqlite:' needs a path: sqlite:/var/lib/urlsieve/grants.db"
            )
        return SqliteGrants(path)
    if spec.startswith(("valkey://", "valkeys://", "redis://", "rediss://")):
        return ValkeyGrants(spec)
    raise ConfigError(f"warn_store {spec!r}: use memory:, sqlite:PATH or valkey://HOST:PORT/DB")
