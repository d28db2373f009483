"""One Valkey/Redis connector for every store on a server, with one error translation.

Seen stores, the learner's queue and verdicts, the warn grants and the near-duplicate
index all open their client with :func:`connect` and run their commands through
:func:`call` (or :func:`server_error` in a loop of their own), so a server that does not
answer is the same :class:`~urlsieve.exceptions.StoreUnavailable` everywhere (the learner
passes its own subclass, :class:`~urlsieve.exceptions.QueueUnavailable`), and a command the
server refuses for good is a :class:`~urlsieve.exceptions.StoreError` naming it.
The pipelined, cluster-aware :class:`~urlsieve.store.valkey.router.Router` of the seen
stores is built on the same translation.

valkey-py is imported when a server is first used: ``pip install 'urlsieve[valkey]'``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from urlsieve.exceptions import ConfigError, StoreError, StoreUnavailable, UrlsieveError

__all__ = ["SERVER_SCHEMES", "call", "connect", "is_server_url", "server_error"]

#: Spec prefixes of a server: ``valkey://``, ``valkeys://`` (TLS), ``redis://``,
#: ``rediss://`` and ``unix://`` (a socket path).
SERVER_SCHEMES = ("valkey", "valkeys", "redis", "rediss", "unix")

#: Reply codes of a server that is there but cannot serve now: retry later.
_BUSY_CODES = ("OOM", "READONLY", "LOADING", "MASTERDOWN", "CLUSTERDOWN", "TRYAGAIN", "BUSY")

R = TypeVar("R")


def is_server_url(spec: str) -> bool:
    """True for ``valkey://…`` and the other server schemes."""
    scheme, sep, rest = spec.partition(":")
    return bool(sep) and scheme.lower() in SERVER_SCHEMES and rest.startswith("//")


def _driver(what: str) -> Any:
    try:
        import valkey
    except ImportError:
        raise ConfigError(
            f"{what} on a server needs the [valkey] extra (pip install 'urlsieve[valkey]')"
        ) from None
    return valkey


def connect(url: str, *, what: str, timeout: float = 5.0, **options: Any) -> Any:
    """A ``valkey.Valkey`` client for ``url`` (connections are made when first used).

    ``what`` names the store in messages (``"warn grants"``, ``"the learning queue"``);
    ``timeout`` bounds connecting and every reply; ``options`` go to the driver. A URL the
    driver cannot read is a :class:`ConfigError`; the extra missing too.
    """
    if not timeout > 0:
        raise ConfigError(f"{what}: timeout={timeout!r} must be > 0 seconds")
    valkey = _driver(what)
    try:
        return valkey.Valkey.from_url(
            url, socket_timeout=timeout, socket_connect_timeout=timeout, **options
        )
    except ValueError as exc:
        raise ConfigError(f"{what}: bad server URL {url!r}: {exc}") from exc


def server_error(
    exc: Exception,
    *,
    where: str,
    doing: str,
    unavailable: type[StoreUnavailable] = StoreUnavailable,
    refused: type[UrlsieveError] = StoreError,
) -> UrlsieveError:
    """The store error a driver exception means (raise it ``from exc``).

    No connection, a timeout, a cluster that lost a slot, or a reply that says the server
    cannot serve now (``OOM``, ``READONLY``, ``LOADING``…) is ``unavailable``: nothing was
    done, retry later. Any other refusal is ``refused`` (a :class:`StoreError`; the learner
    passes its :class:`~urlsieve.exceptions.LearnError`) naming the command.
    """
    from valkey import exceptions as vx

    if isinstance(exc, vx.ConnectionError | vx.TimeoutError | OSError):
        return unavailable(f"{doing} on {where} failed: {exc} (retry)")
    if isinstance(exc, vx.ValkeyClusterException):
        return unavailable(f"{doing} on {where} failed: {exc} (retry)")
    text = str(exc)
    if isinstance(exc, vx.OutOfMemoryError | vx.ReadOnlyError | vx.BusyLoadingError) or (
        text.split(" ", 1)[0] in _BUSY_CODES
    ):
        return unavailable(f"{doing} on {where} refused: {text} (retry later)")
    return refused(f"{doing} on {where} refused: {text}")


def call(
    fn: Callable[[], R],
    *,
    where: str,
    doing: str,
    unavailable: type[StoreUnavailable] = StoreUnavailable,
    refused: type[UrlsieveError] = StoreError,
) -> R:
    """``fn()``, with every driver exception turned into a store error by
    :func:`server_error`."""
    from valkey import exceptions as vx

    try:
        return fn()
    except (vx.ValkeyError, OSError) as exc:
        raise server_error(
            exc, where=where, doing=doing, unavailable=unavailable, refused=refused
        ) from exc
