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

import contextlib
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, Protocol

from urlsieve.exceptions import ConfigError
from urlsieve.store import sqlite
from urlsieve.store import valkey as valkey_store
from urlsieve.store.spec import Backend, Registry
from urlsieve.store.valkey import SERVER_SCHEMES
from urlsieve.url.expressions import host_suffixes

__all__ = [
    "GRANT_BACKENDS",
    "GrantStore",
    "MemoryGrants",
    "SqliteGrants",
    "ValkeyGrants",
    "grant_key",
    "open_grants",
]

_WHAT = "warn grants"

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
        if not path:
            raise ConfigError(
                "warn_store 'sqlite:' needs a path: sqlite:/var/lib/urlsieve/grants.db"
            )
        self.path = path
        self._clock = clock
        self._lock = threading.Lock()
        self._db = sqlite.connect(path, what=_WHAT, timeout=2.0)
        with self._errors("creating the table"):
            self._db.execute(
                "CREATE TABLE IF NOT EXISTS grants (key TEXT PRIMARY KEY, until REAL NOT NULL)"
            )

    @contextlib.contextmanager
    def _errors(self, doing: str) -> Iterator[None]:
        try:
            with self._lock:
                yield
        except sqlite3.Error as exc:
            raise sqlite.sqlite_error(exc, self.path, doing, what=_WHAT) from exc

    def granted(self, key: str) -> bool:
        with self._errors("reading a grant"):
            row = self._db.execute("SELECT until FROM grants WHERE key = ?", (key,)).fetchone()
        return row is not None and row[0] > self._clock()

    def grant(self, key: str, seconds: int) -> None:
        now = self._clock()
        with self._errors("writing a grant"):
            self._db.execute(
                "INSERT INTO grants (key, until) VALUES (?, ?) "
                "ON CONFLICT(key) DO UPDATE SET until = excluded.until",
                (key, now + seconds),
            )
            self._db.execute("DELETE FROM grants WHERE until < ?", (now - 3600,))

    def close(self) -> None:
        self._db.close()


class ValkeyGrants:
    """Grants on a Valkey (or Redis) server shared by a fleet; keys expire on the server."""

    def __init__(self, url: str, prefix: str = "urlsieve:grant:", timeout: float = 1.0) -> None:
        self._client: Any = valkey_store.connect(url, what=_WHAT, timeout=timeout)
        self.url = url
        self.prefix = prefix

    def granted(self, key: str) -> bool:
        found = valkey_store.call(
            lambda: self._client.exists(self.prefix + key), where=self.url, doing=_WHAT
        )
        return bool(found)

    def grant(self, key: str, seconds: int) -> None:
        valkey_store.call(
            lambda: self._client.set(self.prefix + key, b"1", ex=max(1, seconds)),
            where=self.url,
            doing=_WHAT,
        )

    def close(self) -> None:
        self._client.close()


def open_memory(location: str) -> MemoryGrants:
    """The ``memory:`` opener (takes no location)."""
    if location:
        raise ConfigError(f"warn_store 'memory:{location}': memory: takes no location")
    return MemoryGrants()


#: Grant stores by spec prefix: ``memory:``, ``sqlite:PATH``, ``valkey://…`` (and the
#: other server schemes).
GRANT_BACKENDS: Registry[GrantStore] = Registry(
    "warn_store",
    {
        "memory": Backend("urlsieve.policy.warn:open_memory", {}),
        "sqlite": Backend("urlsieve.policy.warn:SqliteGrants", {}),
        **{
            scheme: Backend(
                "urlsieve.policy.warn:ValkeyGrants",
                {"prefix": str, "timeout": float},
                extra="valkey",
                server=True,
            )
            for scheme in SERVER_SCHEMES
        },
    },
)


def open_grants(spec: str) -> GrantStore:
    """``memory:``, ``sqlite:PATH`` or ``valkey://…`` (``redis://`` too)."""
    return GRANT_BACKENDS.open(spec)
