"""The seen-store protocol, its statistics, and opening stores from a spec.

A *spec* is URL-like: ``memory:``, ``exact:/var/lib/crawl/seen.exact``,
``bloom:seen.bloom?capacity=10000000&error=0.001``, ``valkey://host:6379/0?kind=bloom``.
The part before the first ``:`` names the backend; each backend declares the
query parameters it takes and their types, so ``?capacity=ten`` or an unknown
parameter fails at once with a message naming the allowed ones. The spec grammar, the
registry and the store base live on the storage floor (:mod:`urlsieve.store`); the names
re-exported here stay importable from this module.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Protocol, Self, runtime_checkable

from urlsieve.exceptions import ConfigError
from urlsieve.store.base import ClosingStore
from urlsieve.store.spec import (
    Backend,
    Registry,
    StoreSpec,
    cast_param,
    cast_params,
    parse_spec,
    resolve_spec,
)
from urlsieve.url import FILTER, Profile
from urlsieve.url.profile import PROFILES

__all__ = [
    "BACKENDS",
    "Backend",
    "ClosingStore",
    "PROFILES",
    "SeenStore",
    "StoreSpec",
    "StoreStats",
    "cast_param",
    "cast_params",
    "open_seen",
    "parse_spec",
    "register_backend",
    "resolve_spec",
]


@dataclass(frozen=True)
class StoreStats:
    """What a store knows about itself.

    ``count`` is the number of URLs added as new (exact for exact stores,
    the insert count for approximate ones). ``false_positive_rate`` is the
    expected probability that a URL never added is reported as seen, at the
    current fill; ``expected_false_positives`` the expected number of URLs
    wrongly reported as seen so far (for a crawler: pages silently never fetched).
    """

    backend: str
    profile: str
    count: int
    exact: bool
    bytes_used: int
    capacity: int | None = None
    fill_ratio: float | None = None
    false_positive_rate: float = 0.0
    expected_false_positives: float = 0.0
    extra: Mapping[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        out = {k: getattr(self, k) for k in self.__dataclass_fields__ if k != "extra"}
        out.update(self.extra)
        return out


@runtime_checkable
class SeenStore(Protocol):
    """A set of URLs, by canonical fingerprint. Implementations are context managers."""

    @property
    def profile(self) -> Profile: ...

    def add(self, url: str) -> bool:
        """Add ``url``; True when it was not seen before (for Bloom kinds: not reported seen)."""
        ...

    def add_many(self, urls: Iterable[str]) -> list[bool]:
        """Add a batch; one flag per URL, in order. A URL repeated inside the batch is new once."""
        ...

    def __contains__(self, url: object) -> bool: ...

    def contains_many(self, urls: Iterable[str]) -> list[bool]: ...

    def __len__(self) -> int: ...

    def stats(self) -> StoreStats: ...

    def flush(self) -> None:
        """Make every add that has returned durable (persistent stores)."""
        ...

    def close(self) -> None: ...

    def __enter__(self) -> Self: ...

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None: ...


_SERVER_PARAMS: dict[str, type] = {
    "kind": str,
    "prefix": str,
    "batch": int,
    "timeout": float,
    "retries": int,
    "capacity": int,
    "error": float,
    "shards": int,
    "blocks": int,
    "leaf_bits": int,
    "fanout": int,
}

#: Backends by spec prefix. Add one with :func:`register_backend`.
BACKENDS: Registry[SeenStore] = Registry(
    "store spec",
    {
        "memory": Backend("urlsieve.seen.memory:MemoryStore", {}),
        "exact": Backend(
            "urlsieve.seen.exact:ExactStore", {"capacity": int, "readonly": bool, "locked": bool}
        ),
        "partitioned": Backend(
            "urlsieve.seen.partitioned:PartitionedStore",
            {"partitions": int, "capacity": int, "readonly": bool},
        ),
        "bloom": Backend(
            "urlsieve.seen.bloom:BloomStore",
            {"capacity": int, "error": float, "readonly": bool, "locked": bool},
        ),
        "bitmap": Backend(
            "urlsieve.seen.bitmap:BitmapStore", {"signature": str, "width": int, "readonly": bool}
        ),
        "buckets": Backend(
            "urlsieve.seen.buckets:BucketStore",
            {"buckets": int, "width": int, "slots": int, "growth": float, "readonly": bool},
        ),
        "dsbf": Backend(
            "urlsieve.seen.dsbf:DsbfStore",
            {
                "capacity": int,
                "error": float,
                "leaf_bits": int,
                "fanout": int,
                "ratio": float,
                "readonly": bool,
            },
        ),
        # Valkey/Redis, standalone or cluster (urlsieve.seen.valkey)
        "valkey": Backend("urlsieve.seen.valkey:open_valkey", _SERVER_PARAMS, extra="valkey"),
        "valkeys": Backend("urlsieve.seen.valkey:open_valkeys", _SERVER_PARAMS, extra="valkey"),
        "redis": Backend("urlsieve.seen.valkey:open_redis", _SERVER_PARAMS, extra="valkey"),
        "rediss": Backend("urlsieve.seen.valkey:open_rediss", _SERVER_PARAMS, extra="valkey"),
        "unix": Backend(
            "urlsieve.seen.valkey:open_unix", {**_SERVER_PARAMS, "db": int}, extra="valkey"
        ),
    },
)


def register_backend(name: str, backend: Backend) -> None:
    """Make ``name:`` specs open ``backend`` (also for third-party backends)."""
    BACKENDS.register(name, backend)


def open_seen(spec: str, *, profile: Profile | None = None, **overrides: Any) -> SeenStore:
    """Open the seen store a spec describes.

    ``profile`` (or ``?profile=filter|crawler`` in the spec) chooses the
    canonicalisation; keyword ``overrides`` win over spec parameters.
    """
    parsed = parse_spec(spec)
    backend = BACKENDS.backend(parsed)
    kwargs: dict[str, Any] = {}
    for key, value in parsed.params.items():
        if key == "profile":
            if value not in PROFILES:
                raise ConfigError(
                    f"store spec {spec!r}: unknown profile {value!r} "
                    f"(choose from {', '.join(sorted(PROFILES))})"
                )
            if profile is not None and profile is not PROFILES[value]:
                raise ConfigError(
                    f"store spec {spec!r} names profile {value!r} but another was passed"
                )
            profile = PROFILES[value]
            continue
        kind = backend.params.get(key)
        if kind is None:
            allowed = ", ".join(sorted(backend.params)) or "none"
            raise ConfigError(
                f"store spec {spec!r}: unknown parameter {key!r} for {parsed.backend} "
                f"(allowed: {allowed}, profile)"
            )
        kwargs[key] = cast_param(kind, key, value, spec)
    kwargs.update(overrides)
    store: SeenStore = backend.opener()(parsed.location, profile=profile or FILTER, **kwargs)
    return store
