"""Host name resolvers for seed 004's IP IDs: one protocol, a static map and real DNS.

A resolver answers ``resolve(host)`` with every address of the name (A and
AAAA), as a sorted tuple of canonical address strings (dotted quads,
compressed IPv6). An empty tuple means the name has no address (NXDOMAIN,
or no A/AAAA records); a DNS failure (timeout, SERVFAIL, refused) raises
:class:`~urlsieve.exceptions.ResolveError`, so a caller can tell "this site
has no address" from "we could not ask". An IP literal resolves to itself.

* :class:`StaticResolver` — a fixed table (tests, air-gapped crawls); it can
  be changed at run time (``set``) to model DNS that changes.
* :class:`DNSResolver` / :class:`AsyncDNSResolver` — real DNS through
  dnspython (the async one for crawlers on asyncio), with a cache that keeps
  each answer for its TTL (clamped to ``[min_ttl, max_ttl]``) and a negative
  answer for ``negative_ttl``, bounded in entries.

:func:`open_resolver` builds one from a spec: ``system:`` (``/etc/resolv.conf``),
``dns://127.0.0.1:5353?timeout=2``, or ``static:`` with a mapping.
"""

from __future__ import annotations

import ipaddress
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol, runtime_checkable
from urllib.parse import parse_qsl, urlsplit

from urlsieve.exceptions import ConfigError, ResolveError
from urlsieve.store.spec import cast_params

__all__ = [
    "AsyncDNSResolver",
    "DNSResolver",
    "Resolver",
    "StaticResolver",
    "open_resolver",
]

Addresses = tuple[str, ...]
Clock = Callable[[], float]
MAX_NAME = 253  # octets of a DNS name in text form


@runtime_checkable
class Resolver(Protocol):
    """Every address of a host name, sorted; ``()`` when the name has none."""

    def resolve(self, host: str) -> Addresses: ...


def _literal(host: str) -> Addresses | None:
    """An IP literal resolves to itself (brackets of an IPv6 host are dropped)."""
    text = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    try:
        return (str(ipaddress.ip_address(text)),)
    except ValueError:
        return None


def _normalise(addresses: Iterable[str]) -> Addresses:
    return tuple(sorted({str(ipaddress.ip_address(a)) for a in addresses}))


def _check_name(host: str) -> str:
    name = host.rstrip(".").lower()
    if not name or len(name) > MAX_NAME:
        raise ResolveError(host[:80], "not a host name (empty or over 253 characters)")
    return name


class StaticResolver:
    """A fixed name → addresses table; names it does not know have no address."""

    def __init__(self, table: Mapping[str, str | Iterable[str]] | None = None) -> None:
        self._table: dict[str, Addresses] = {}
        for host, addresses in (table or {}).items():
            self.set(host, addresses)

    def set(self, host: str, addresses: str | Iterable[str]) -> None:
        """Give ``host`` these addresses (replacing any), e.g. to model a DNS change."""
        values = [addresses] if isinstance(addresses, str) else list(addresses)
        self._table[host.rstrip(".").lower()] = _normalise(values)

    def remove(self, host: str) -> None:
        self._table.pop(host.rstrip(".").lower(), None)

    def resolve(self, host: str) -> Addresses:
        literal = _literal(host)
        if literal is not None:
            return literal
        return self._table.get(host.rstrip(".").lower(), ())

    def __repr__(self) -> str:
        return f"StaticResolver({len(self._table)} names)"


class _Cache:
    """Answers kept for their TTL; oldest entries dropped first beyond ``max_entries``."""

    def __init__(
        self, *, min_ttl: float, max_ttl: float, negative_ttl: float, max_entries: int, clock: Clock
    ) -> None:
        if not 0 <= min_ttl <= max_ttl:
            raise ConfigError(
                f"resolver TTLs: need 0 <= min_ttl <= max_ttl, got {min_ttl}, {max_ttl}"
            )
        if negative_ttl < 0 or max_entries < 1:
            raise ConfigError("resolver: negative_ttl must be >= 0 and max_entries >= 1")
        self.min_ttl, self.max_ttl, self.negative_ttl = min_ttl, max_ttl, negative_ttl
        self.max_entries = max_entries
        self.clock = clock
        self._entries: dict[str, tuple[float, Addresses]] = {}
        self.hits = self.misses = 0

    def get(self, name: str) -> Addresses | None:
        entry = self._entries.get(name)
        if entry is None or entry[0] <= self.clock():
            self.misses += 1
            return None
        self.hits += 1
        return entry[1]

    def put(self, name: str, addresses: Addresses, ttl: float | None) -> None:
        if ttl is None or not addresses:
            ttl = self.negative_ttl
        ttl = min(max(ttl, self.min_ttl), self.max_ttl)
        if ttl <= 0:
            return
        self._entries.pop(name, None)
        while len(self._entries) >= self.max_entries:
            del self._entries[next(iter(self._entries))]
        self._entries[name] = (self.clock() + ttl, addresses)

    def clear(self) -> None:
        self._entries.clear()


class _DNSBase:
    """What the blocking and the async DNS resolvers share: options, cache, error mapping."""

    def __init__(
        self,
        nameservers: Iterable[str] | None = None,
        *,
        port: int = 53,
        timeout: float = 3.0,
        ipv6: bool = True,
        min_ttl: float = 0.0,
        max_ttl: float = 3600.0,
        negative_ttl: float = 60.0,
        max_entries: int = 100_000,
        clock: Clock = time.monotonic,
    ) -> None:
        if timeout <= 0:
            raise ConfigError(f"resolver timeout must be positive, got {timeout}")
        self.nameservers = (
            None if nameservers is None else [str(ipaddress.ip_address(n)) for n in nameservers]
        )
        self.port = port
        self.timeout = timeout
        self.ipv6 = ipv6
        self.cache = _Cache(
            min_ttl=min_ttl,
            max_ttl=max_ttl,
            negative_ttl=negative_ttl,
            max_entries=max_entries,
            clock=clock,
        )

    def _configure(self, resolver: Any) -> Any:
        if self.nameservers is not None:
            resolver.nameservers = list(self.nameservers)
            resolver.port = self.port
        resolver.timeout = self.timeout
        resolver.lifetime = self.timeout
        resolver.cache = None  # ours keeps A and AAAA together
        return resolver

    @property
    def _types(self) -> tuple[str, ...]:
        return ("A", "AAAA") if self.ipv6 else ("A",)

    def _begin(self, host: str) -> tuple[str, Addresses | None]:
        """The name to ask for, and the answer when no query is needed (a literal, cached)."""
        literal = _literal(host)
        if literal is not None:
            return host, literal
        name = _check_name(host)
        return name, self.cache.get(name)

    def _finish(self, name: str, answers: list[Any]) -> Addresses:
        """Every address of the A/AAAA answers, cached for the smallest TTL among them."""
        found: list[str] = []
        ttls: list[float] = []
        for answer in answers:
            rrset = answer.rrset
            if rrset is not None:
                found += [r.to_text() for r in rrset]
                ttls.append(float(rrset.ttl))
        addresses = _normalise(found)
        self.cache.put(name, addresses, min(ttls) if ttls else None)
        return addresses

    @staticmethod
    def _failure(host: str, exc: Exception) -> ResolveError:
        import dns.exception
        import dns.resolver

        if isinstance(exc, dns.exception.Timeout):
            reason = "timed out"
        elif isinstance(exc, dns.resolver.NoNameservers):
            reason = "no name server answered (SERVFAIL or refused)"
        else:
            reason = f"{type(exc).__name__}: {exc}"
        return ResolveError(host, reason)

    def __repr__(self) -> str:
        where = "system" if self.nameservers is None else f"{self.nameservers}:{self.port}"
        return f"{type(self).__name__}({where}, timeout={self.timeout})"


class DNSResolver(_DNSBase):
    """Real DNS (dnspython), blocking; every A and AAAA address, cached for its TTL.

    ``nameservers=None`` reads the system configuration (``/etc/resolv.conf``).
    """

    def __init__(self, nameservers: Iterable[str] | None = None, **options: Any) -> None:
        super().__init__(nameservers, **options)
        import dns.resolver

        self._resolver = self._configure(dns.resolver.Resolver(configure=nameservers is None))

    def resolve(self, host: str) -> Addresses:
        name, known = self._begin(host)
        if known is not None:
            return known
        import dns.exception
        import dns.resolver

        try:
            answers = [
                self._resolver.resolve(name, rdtype, search=False, raise_on_no_answer=False)
                for rdtype in self._types
            ]
        except dns.resolver.NXDOMAIN:
            answers = []
        except dns.exception.DNSException as exc:
            raise self._failure(host, exc) from exc
        return self._finish(name, answers)


class AsyncDNSResolver(_DNSBase):
    """Real DNS on asyncio (dnspython's async resolver); ``await resolver.aresolve(host)``."""

    def __init__(self, nameservers: Iterable[str] | None = None, **options: Any) -> None:
        super().__init__(nameservers, **options)
        import dns.asyncresolver

        self._resolver = self._configure(dns.asyncresolver.Resolver(configure=nameservers is None))

    async def aresolve(self, host: str) -> Addresses:
        name, known = self._begin(host)
        if known is not None:
            return known
        import dns.exception
        import dns.resolver

        try:
            answers = [
                await self._resolver.resolve(name, rdtype, search=False, raise_on_no_answer=False)
                for rdtype in self._types
            ]
        except dns.resolver.NXDOMAIN:
            answers = []
        except dns.exception.DNSException as exc:
            raise self._failure(host, exc) from exc
        return self._finish(name, answers)


_DNS_PARAMS: dict[str, type] = {
    "timeout": float,
    "min_ttl": float,
    "max_ttl": float,
    "negative_ttl": float,
    "max_entries": int,
}


def open_resolver(
    spec: str, *, table: Mapping[str, str | Iterable[str]] | None = None
) -> DNSResolver | StaticResolver:
    """A resolver from a spec: ``system:``, ``dns://HOST[:PORT]?timeout=2``, ``static:``.

    ``static:`` takes its names from ``table``; the DNS specs accept
    ``timeout``, ``min_ttl``, ``max_ttl``, ``negative_ttl`` and ``max_entries``.
    """
    scheme, sep, rest = spec.partition(":")
    scheme = scheme.lower()
    if not sep:
        raise ConfigError(
            f"resolver spec {spec!r}: write 'system:', 'dns://HOST:PORT' or 'static:'"
        )
    if scheme == "static":
        return StaticResolver(table)
    if scheme not in ("system", "dns"):
        raise ConfigError(f"resolver spec {spec!r}: unknown kind {scheme!r} (system, dns, static)")
    location, _, query = rest.partition("?")
    pairs = parse_qsl(query, keep_blank_values=True)
    options = cast_params(pairs, _DNS_PARAMS, spec, what="resolver spec", backend=scheme)
    if scheme == "system":
        return DNSResolver(None, **options)
    parts = urlsplit(f"dns:{location}")
    try:
        host, port = parts.hostname, parts.port or 53
        if host is None:
            raise ValueError("no name server address")
        return DNSResolver([host], port=port, **options)
    except ValueError as exc:
        raise ConfigError(f"resolver spec {spec!r}: {exc} (write dns://127.0.0.1:5353)") from None
