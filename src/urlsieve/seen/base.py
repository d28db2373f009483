"""The seen-store protocol, its statistics, and opening stores from a spec.

A *spec* is URL-like: ``memory:``, ``exact:/var/lib/crawl/seen.exact``,
``bloom:seen.bloom?capacity=10000000&error=0.001``, ``valkey://host:6379/0?kind=bloom``.
The part before the first ``:`` names the backend; each backend declares the
query parameters it takes and their types, so ``?capacity=ten`` or an unknown
parameter fails at once with a message naming the allowed ones.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Protocol, Self, runtime_checkable
from urllib.parse import parse_qsl

from urlsieve.exceptions import ConfigError
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


class ClosingStore:
    """Base of the stores: a store is its own context manager, and leaving the block closes it."""

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


@dataclass(frozen=True)
class StoreSpec:
    """A parsed spec: backend name, location (path or server URL) and raw parameters."""

    raw: str
    backend: str
    location: str
    params: Mapping[str, str]


def parse_spec(spec: str) -> StoreSpec:
    """Split ``backend:location?a=1&b=2``; server URLs (``valkey://…``) keep their whole form."""
    backend, sep, rest = spec.partition(":")
    if not sep or not backend:
        raise ConfigError(
            f"store spec {spec!r} has no backend: write e.g. 'memory:' or 'bloom:PATH'"
        )
    location, _, query = rest.partition("?")
    try:
        pairs = parse_qsl(query, keep_blank_values=True, strict_parsing=bool(query))
    except ValueError as exc:
        raise ConfigError(f"store spec {spec!r}: malformed parameters ({exc})") from None
    params: dict[str, str] = {}
    for key, value in pairs:
        if key in params:
            raise ConfigError(f"store spec {spec!r}: parameter {key!r} given twice")
        params[key] = value
    return StoreSpec(spec, backend.lower(), location, params)


def resolve_spec(spec: str, base: str | os.PathLike[str] | None) -> str:
    """``spec`` with a relative file location (``sqlite:state/q.db``, ``bloom:seen.bf``)
    made relative to ``base`` (a config file's directory); server URLs and ``memory:``
    are left alone."""
    backend, sep, rest = spec.partition(":")
    if base is None or not sep or not rest or rest.startswith(("//", "?")):
        return spec
    location, mark, query = rest.partition("?")
    if os.path.isabs(location) or location.startswith("~"):
        return spec
    return f"{backend}:{os.path.join(base, location)}{mark}{query}"


def cast_param(kind: type, key: str, value: str, spec: str, *, what: str = "store spec") -> Any:
    """A spec's ``key=value`` parameter as ``kind`` (bool, int, float or str), or a
    :class:`ConfigError` naming the spec (``what``: the kind of spec, for the message)."""
    try:
        if kind is bool:
            lowered = value.lower()
            if lowered in ("1", "true", "yes", "on"):
                return True
            if lowered in ("0", "false", "no", "off"):
                return False
            raise ValueError(value)
        if kind is int:
            return int(float(value)) if "e" in value.lower() else int(value.replace("_", ""))
        return kind(value)
    except ValueError:
        raise ConfigError(
            f"{what} {spec!r}: parameter {key}={value!r} is not a valid {kind.__name__}"
        ) from None


def cast_params(
    pairs: Iterable[tuple[str, str]],
    allowed: Mapping[str, type],
    spec: str,
    *,
    what: str,
    backend: str,
) -> dict[str, Any]:
    """Every ``key=value`` of a spec as its declared type; an undeclared key is a
    :class:`ConfigError` listing the allowed ones."""
    options: dict[str, Any] = {}
    for key, value in pairs:
        kind = allowed.get(key)
        if kind is None:
            raise ConfigError(
                f"{what} {spec!r}: unknown parameter {key!r} for {backend} "
                f"(allowed: {', '.join(sorted(allowed))})"
            )
        options[key] = cast_param(kind, key, value, spec, what=what)
    return options


Opener = Callable[..., SeenStore]


@dataclass(frozen=True)
class Backend:
    """A registered backend: where its opener lives and the parameters it accepts.

    The opener is called as ``opener(location, profile=Profile, **typed_params)``.
    It is imported lazily, so that a backend's heavy dependencies load only when used.
    """

    target: str  # "module:function"
    params: Mapping[str, type]
    extra: str | None = None  # pip extra that provides its dependencies

    def opener(self) -> Opener:
        module_name, _, attr = self.target.partition(":")
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            hint = f" (pip install 'urlsieve[{self.extra}]')" if self.extra else ""
            raise ConfigError(f"backend {module_name} cannot be loaded: {exc}{hint}") from exc
        opener: Opener = getattr(module, attr)
        return opener


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
BACKENDS: dict[str, Backend] = {
    "memory": Backend("urlsieve.seen.memory:MemoryStore", {}),
    "exact": Backend("urlsieve.seen.exact:ExactStore", {"capacity": int, "readonly": bool}),
    "partitioned": Backend(
        "urlsieve.seen.partitioned:PartitionedStore",
        {"partitions": int, "capacity": int, "readonly": bool},
    ),
    "bloom": Backend(
        "urlsieve.seen.bloom:BloomStore", {"capacity": int, "error": float, "readonly": bool}
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
}


def register_backend(name: str, backend: Backend) -> None:
    """Make ``name:`` specs open ``backend`` (also for third-party backends)."""
    BACKENDS[name.lower()] = backend


def open_seen(spec: str, *, profile: Profile | None = None, **overrides: Any) -> SeenStore:
    """Open the seen store a spec describes.

    ``profile`` (or ``?profile=filter|crawler`` in the spec) chooses the
    canonicalisation; keyword ``overrides`` win over spec parameters.
    """
    parsed = parse_spec(spec)
    backend = BACKENDS.get(parsed.backend)
    if backend is None:
        known = ", ".join(sorted(BACKENDS))
        raise ConfigError(f"unknown store backend {parsed.backend!r} in {spec!r} (known: {known})")
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
    return backend.opener()(parsed.location, profile=profile or FILTER, **kwargs)
