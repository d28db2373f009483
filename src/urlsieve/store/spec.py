"""Store specs: a URL-like string that names a backend and its typed parameters.

``memory:``, ``exact:/var/lib/crawl/seen.exact``, ``sqlite:state/queue.db?busy_timeout=5``,
``valkey://host:6379/0?prefix=crawl1``: the part before the first ``:`` names the backend,
the rest up to ``?`` is its location (a path, or the whole server URL), and each backend
declares the query parameters it takes and their types, so ``?capacity=ten`` or an unknown
parameter fails at once with a message naming the allowed ones.

Every family of stores (seen stores, the learner's queue and verdicts, the warn grants,
the near-duplicate index) keeps one :class:`Registry` of its backends; a backend's module
is imported only when a spec names it, so its dependencies (valkey-py) load only then.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar
from urllib.parse import parse_qsl

from urlsieve.exceptions import ConfigError

__all__ = [
    "Backend",
    "Registry",
    "StoreSpec",
    "cast_param",
    "cast_params",
    "parse_flag",
    "parse_spec",
    "resolve_spec",
]

T = TypeVar("T")


@dataclass(frozen=True)
class StoreSpec:
    """A parsed spec: backend name, location (path or server URL) and raw parameters."""

    raw: str
    backend: str
    location: str
    params: Mapping[str, str]


def parse_spec(spec: str, *, what: str = "store spec") -> StoreSpec:
    """Split ``backend:location?a=1&b=2``; server URLs (``valkey://…``) keep their whole form."""
    backend, sep, rest = spec.partition(":")
    if not sep or not backend:
        raise ConfigError(f"{what} {spec!r} has no backend: write e.g. 'memory:' or 'bloom:PATH'")
    location, _, query = rest.partition("?")
    try:
        pairs = parse_qsl(query, keep_blank_values=True, strict_parsing=bool(query))
    except ValueError as exc:
        raise ConfigError(f"{what} {spec!r}: malformed parameters ({exc})") from None
    params: dict[str, str] = {}
    for key, value in pairs:
        if key in params:
            raise ConfigError(f"{what} {spec!r}: parameter {key!r} given twice")
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


def parse_flag(text: str) -> bool | None:
    """A yes/no written as text (``1``/``true``/``yes``/``on`` and their opposites, any
    case): the spec parameters' and the environment's spelling of a boolean; None for
    anything else."""
    lowered = text.lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    return None


def cast_param(kind: type, key: str, value: str, spec: str, *, what: str = "store spec") -> Any:
    """A spec's ``key=value`` parameter as ``kind`` (bool, int, float or str), or a
    :class:`ConfigError` naming the spec (``what``: the kind of spec, for the message)."""
    try:
        if kind is bool:
            flag = parse_flag(value)
            if flag is None:
                raise ValueError(value)
            return flag
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
                f"(allowed: {', '.join(sorted(allowed)) or 'none'})"
            )
        options[key] = cast_param(kind, key, value, spec, what=what)
    return options


@dataclass(frozen=True)
class Backend:
    """A registered backend: where its opener lives and the parameters it accepts.

    ``target`` is ``"module:function"`` (or ``"module:Class"``), imported when a spec
    first names the backend, so that its heavy dependencies load only when used; ``extra``
    is the pip extra that provides them, named in the error when the import fails.
    ``server``: the opener takes the whole server URL (``valkey://host:6379/0``), scheme
    included, instead of the location after the prefix.
    """

    target: str
    params: Mapping[str, type]
    extra: str | None = None
    server: bool = False

    def opener(self) -> Callable[..., Any]:
        module_name, _, attr = self.target.partition(":")
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            hint = f" (pip install 'urlsieve[{self.extra}]')" if self.extra else ""
            raise ConfigError(f"backend {module_name} cannot be loaded: {exc}{hint}") from exc
        opener: Callable[..., Any] = getattr(module, attr)
        return opener


class Registry(Mapping[str, Backend], Generic[T]):
    """The backends of one family of stores, by spec prefix.

    ``open(spec)`` parses the spec, casts its parameters to the types the backend declares
    and calls the opener as ``opener(location, **typed_params, **overrides)``. A family
    with parameters of its own (the seen stores' ``profile``) looks the backend up with
    :meth:`backend` and casts with :func:`cast_params` itself.
    """

    def __init__(self, what: str, backends: Mapping[str, Backend]) -> None:
        self.what = what  # "store spec", "queue spec"…: how messages name a spec
        self._backends = {name.lower(): backend for name, backend in backends.items()}

    def __getitem__(self, name: str) -> Backend:
        return self._backends[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._backends)

    def __len__(self) -> int:
        return len(self._backends)

    def register(self, name: str, backend: Backend) -> None:
        """Make ``name:`` specs open ``backend`` (third-party backends too)."""
        self._backends[name.lower()] = backend

    def backend(self, parsed: StoreSpec) -> Backend:
        """The backend a parsed spec names, or a :class:`ConfigError` listing the known ones."""
        found = self._backends.get(parsed.backend)
        if found is None:
            known = ", ".join(sorted(self._backends))
            noun = self.what.removesuffix(" spec")
            raise ConfigError(
                f"unknown {noun} backend {parsed.backend!r} in {parsed.raw!r} (known: {known})"
            )
        return found

    def open(self, spec: str, **overrides: Any) -> T:
        """Open what ``spec`` names; keyword ``overrides`` win over the spec's parameters."""
        parsed = parse_spec(spec, what=self.what)
        backend = self.backend(parsed)
        kwargs = cast_params(
            parsed.params.items(), backend.params, spec, what=self.what, backend=parsed.backend
        )
        kwargs.update(overrides)
        location = parsed.location
        if backend.server:
            if not location.startswith("//"):
                raise ConfigError(
                    f"{self.what} {spec!r}: write {parsed.backend}://host:port/db "
                    "(or unix:///path.sock)"
                )
            location = f"{parsed.backend}:{location}"
        opened: T = backend.opener()(location, **kwargs)
        return opened
