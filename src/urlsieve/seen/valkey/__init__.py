"""Seen stores on Valkey/Redis, standalone or cluster (``valkey://``, ``redis://``, ``rediss://``, ``unix://``).

Specs::

    valkey://127.0.0.1:6379/0?kind=exact&prefix=crawl1
    redis://:secret@cache:6379/2?kind=bloom&capacity=100000000&error=0.001
    rediss://cache.example:6380/0?kind=dsbf
    unix:///run/valkey.sock?db=0&kind=exact

Kinds: ``exact`` (default; 64-bit fingerprints, ~8–11 B/URL), ``bloom`` (bits
split over many keys) and ``dsbf`` (seed 003's dynamic splittable Bloom
filter). A cluster is detected from the server (``INFO cluster``); the same
spec works against a standalone server and a cluster. See each kind's module
for its layout and guarantees, and :mod:`urlsieve.store.valkey.router` for errors and retries.
"""

from __future__ import annotations

from typing import Any

from urlsieve.exceptions import ConfigError
from urlsieve.seen.valkey._store import ValkeyStore
from urlsieve.seen.valkey.bloom import ValkeyBloomStore
from urlsieve.seen.valkey.dsbf import ValkeyDsbfStore
from urlsieve.seen.valkey.exact import ValkeyExactStore
from urlsieve.store.valkey.router import BatchInterrupted, Router
from urlsieve.url import FILTER, Profile

__all__ = [
    "KINDS",
    "BatchInterrupted",
    "ValkeyBloomStore",
    "ValkeyDsbfStore",
    "ValkeyExactStore",
    "ValkeyStore",
    "open_redis",
    "open_rediss",
    "open_server",
    "open_unix",
    "open_valkey",
    "open_valkeys",
]

KINDS: dict[str, type[ValkeyStore]] = {
    "exact": ValkeyExactStore,
    "bloom": ValkeyBloomStore,
    "dsbf": ValkeyDsbfStore,
}


def open_server(
    url: str,
    *,
    profile: Profile = FILTER,
    kind: str = "exact",
    prefix: str = "urlsieve",
    batch: int = 1000,
    timeout: float = 5.0,
    retries: int = 3,
    **params: Any,
) -> ValkeyStore:
    """Open a store on the server at ``url`` (any scheme valkey-py takes).

    ``batch``: URLs per pipelined request chunk (default 1000; the next chunk
    is in flight while the last one's replies are read). ``timeout``: socket
    timeout in seconds. ``retries``: how often a safe retry is tried.
    Other ``params`` are the kind's sizes (``capacity``, ``error``, …),
    fixed when the store is first created and read back by later clients.
    """
    store_class = KINDS.get(kind)
    if store_class is None:
        raise ConfigError(f"kind={kind!r}: choose from {', '.join(KINDS)}")
    params = {name: value for name, value in params.items() if value is not None}
    unknown = sorted(set(params) - set(store_class.config_keys))
    if unknown:
        raise ConfigError(
            f"kind={kind} takes no {', '.join(unknown)}"
            f" (its parameters: {', '.join(store_class.config_keys)})"
        )
    if timeout <= 0 or retries < 0:
        raise ConfigError(f"timeout={timeout}, retries={retries}: must be > 0 and >= 0")
    router = Router(url, timeout=timeout, retries=retries)
    return store_class(router, prefix=prefix, profile=profile, batch=batch, requested=params)


def _opener(scheme: str) -> Any:
    def open_scheme(location: str, *, profile: Profile = FILTER, **params: Any) -> ValkeyStore:
        if not location.startswith("//"):
            raise ConfigError(
                f"{scheme}:{location}: write {scheme}://host:port/db (or unix:///path.sock)"
            )
        url = f"{scheme}:{location}"
        db = params.pop("db", None)
        if db is not None:
            url += f"?db={db}"
        return open_server(url, profile=profile, **params)

    open_scheme.__name__ = f"open_{scheme}"
    open_scheme.__doc__ = f"Open a ``{scheme}://`` seen store (the registry's opener)."
    return open_scheme


open_valkey = _opener("valkey")
open_valkeys = _opener("valkeys")
open_redis = _opener("redis")
open_rediss = _opener("rediss")
open_unix = _opener("unix")
