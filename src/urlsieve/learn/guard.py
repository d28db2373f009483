"""The crawler's SSRF guard: which IP addresses it may connect to.

Unknown URLs come from LAN clients, so a URL may name (or a name may resolve to) the
gateway itself, the LAN, a cloud metadata service or a multicast group. The guard
refuses every address that is not globally routable unless a network of
``allow_networks`` contains it, and says why in one line that names the address and the
setting that would allow it: ``10.0.0.1 is private (RFC 1918) (not fetched unless
learn.crawl.allow_networks holds it)``; a port outside ``ports`` of a public address is
refused the same way, naming ``learn.crawl.ports``.

Refused: unspecified, "this network" (0/8), loopback, private (RFC 1918),
unique-local (fc00::/7), link-local (169.254/16, fe80::/10), site-local (fec0::/10),
multicast, broadcast, shared address space (CGNAT 100.64/10), reserved (240/4), the
IETF, documentation and benchmarking blocks, discard-only (100::/64), Teredo,
local-use NAT64 (64:ff9b:1::/48), deprecated IPv4-compatible IPv6 (::/96) and
anything else Python's registry says is not global. IPv6 forms that carry an IPv4
address — IPv4-mapped (::ffff:0:0/96), NAT64 (64:ff9b::/96) and 6to4 (2002::/16) —
are judged by the IPv4 address inside.

URL hosts are read as the URL canonicaliser reads them (``0x7f000001``, ``127.1`` and
``0177.0.0.1`` are all ``127.0.0.1``). Host names are checked *after* resolution, on
every address of the name: :class:`GuardedResolver` is an aiohttp resolver that
resolves (a static map first, then DNS), refuses the name when **any** of its
addresses is forbidden (a name that mixes public and private addresses is a DNS
rebinding trick more often than a mistake), and hands aiohttp only the addresses it
checked, so the address checked is the address connected to. aiohttp does not call a
resolver for IP-literal hosts: the crawler checks those with :meth:`Guard.check_host`
before every request.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterable, Mapping, Sequence
from typing import TypeAlias

from aiohttp.abc import AbstractResolver, ResolveResult

from urlsieve.exceptions import ConfigError, InvalidURL
from urlsieve.url.host import is_ipv4, normalise_ipv4

__all__ = ["AddressRefused", "Guard", "GuardedResolver", "forbidden"]

Address: TypeAlias = ipaddress.IPv4Address | ipaddress.IPv6Address
Network: TypeAlias = ipaddress.IPv4Network | ipaddress.IPv6Network


def _nets(*pairs: tuple[str, str]) -> tuple[tuple[Network, str], ...]:
    return tuple((ipaddress.ip_network(net), why) for net, why in pairs)


# Checked in order: the first network that holds an address gives the reason.
_V4 = _nets(
    ("0.0.0.0/32", "unspecified"),
    ("0.0.0.0/8", '"this network" (0.0.0.0/8)'),
    ("10.0.0.0/8", "private (RFC 1918)"),
    ("100.64.0.0/10", "shared address space (CGNAT, RFC 6598)"),
    ("127.0.0.0/8", "loopback"),
    ("169.254.0.0/16", "link-local"),
    ("172.16.0.0/12", "private (RFC 1918)"),
    ("192.0.0.0/24", "IETF protocol assignments"),
    ("192.0.2.0/24", "documentation (TEST-NET-1)"),
    ("192.88.99.0/24", "6to4 relay anycast (deprecated)"),
    ("192.168.0.0/16", "private (RFC 1918)"),
    ("198.18.0.0/15", "benchmarking"),
    ("198.51.100.0/24", "documentation (TEST-NET-2)"),
    ("203.0.113.0/24", "documentation (TEST-NET-3)"),
    ("224.0.0.0/4", "multicast"),
    ("255.255.255.255/32", "broadcast"),
    ("240.0.0.0/4", "reserved"),
)
_V6 = _nets(
    ("::/128", "unspecified"),
    ("::1/128", "loopback"),
    ("::/96", "IPv4-compatible (deprecated, RFC 4291)"),
    ("64:ff9b:1::/48", "local-use NAT64 (RFC 8215)"),
    ("100::/64", "discard-only"),
    ("2001::/32", "Teredo tunnelling"),
    ("2001:2::/48", "benchmarking"),
    ("2001:db8::/32", "documentation"),
    ("fc00::/7", "unique local (private)"),
    ("fe80::/10", "link-local"),
    ("fec0::/10", "site-local (deprecated)"),
    ("ff00::/8", "multicast"),
)
#: Ends a refusal of an address: where an administrator would allow it.
_ALLOW_HINT = " (not fetched unless learn.crawl.allow_networks holds it)"

_MAPPED = ipaddress.ip_network("::ffff:0:0/96")
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_SIX_TO_FOUR = ipaddress.ip_network("2002::/16")
_GLOBAL_UNICAST = ipaddress.ip_network("2000::/3")


def _embedded_ipv4(address: ipaddress.IPv6Address) -> tuple[ipaddress.IPv4Address, str] | None:
    """The IPv4 address an IPv6 form carries (mapped, NAT64, 6to4), with the form's name."""
    if address in _MAPPED:
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF), "IPv4-mapped"
    if address in _NAT64:
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF), "NAT64"
    if address in _SIX_TO_FOUR:
        return ipaddress.IPv4Address((int(address) >> 80) & 0xFFFFFFFF), "6to4"
    return None


def forbidden(address: Address) -> str | None:
    """Why the crawler must not connect to ``address`` (``"loopback"``…), or None if it may.

    The reason does not repeat the address; :meth:`Guard.check` adds it.
    """
    if isinstance(address, ipaddress.IPv6Address):
        if address.scope_id is not None:
            address = ipaddress.IPv6Address(address.compressed.partition("%")[0])
        embedded = _embedded_ipv4(address)
        if embedded is not None:
            inner, form = embedded
            why = forbidden(inner)
            return None if why is None else f"{form} form of {inner}, which is {why}"
        for net, why in _V6:
            if address in net:
                return why
        if address not in _GLOBAL_UNICAST:
            return "reserved (outside 2000::/3)"
    else:
        for net, why in _V4:
            if address in net:
                return why
    if not address.is_global:
        return "not globally routable (IANA special-purpose block)"
    return None


def _parse_address(text: str) -> Address:
    """An address from a resolver or a URL host (brackets and a zone dropped)."""
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    return ipaddress.ip_address(text.partition("%")[0])


class AddressRefused(OSError):
    """A connection the guard refused; aiohttp wraps it in ``ClientConnectorError``.

    An :class:`OSError` so that aiohttp treats it like any resolution failure.
    """

    def __init__(self, host: str, reason: str) -> None:
        self.host = host
        self.reason = reason
        super().__init__(reason)


class Guard:
    """Refuses the addresses of :func:`forbidden` unless ``allow_networks`` holds them.

    ``allow_networks`` are CIDR strings (``"127.0.0.0/8"``, ``"fd00::/8"``); an IPv6 form
    that carries an IPv4 address is allowed when the IPv4 address is.
    """

    def __init__(self, allow_networks: Iterable[str] = (), ports: Iterable[int] = ()) -> None:
        """``ports``: the only ports fetched from addresses outside ``allow_networks``
        (empty: any port), so that LAN clients cannot aim the crawler at other services
        (``http://mail.example:25/``)."""
        self.ports = frozenset(ports)
        nets: list[Network] = []
        for text in allow_networks:
            try:
                nets.append(ipaddress.ip_network(text, strict=False))
            except ValueError as exc:
                raise ConfigError(
                    f"allow_networks: {text!r} is not a network (write 127.0.0.0/8): {exc}"
                ) from None
        self.allow_networks: tuple[Network, ...] = tuple(nets)

    def _allowed(self, address: Address) -> bool:
        if any(address in net for net in self.allow_networks):
            return True
        if isinstance(address, ipaddress.IPv6Address):
            embedded = _embedded_ipv4(address)
            if embedded is not None:
                return any(embedded[0] in net for net in self.allow_networks)
        return False

    def _why(self, address: str | Address) -> tuple[str, str] | None:
        try:
            ip = _parse_address(address) if isinstance(address, str) else address
        except ValueError:
            return repr(address), "not an IP address"
        if self._allowed(ip):
            return None
        why = forbidden(ip)
        return None if why is None else (str(ip), why)

    def check(self, address: str | Address) -> str | None:
        """None when the crawler may connect to ``address``; else the reason, naming it and
        the setting that would allow it."""
        found = self._why(address)
        return None if found is None else f"{found[0]} is {found[1]}{_ALLOW_HINT}"

    def check_host(self, host: str) -> str | None:
        """Check a URL host that is an IP literal, in any spelling the canonicaliser reads
        (``0x7f000001``, ``127.1``, ``[::ffff:127.0.0.1]``); names pass (their addresses
        are checked by :class:`GuardedResolver`)."""
        text = host.rstrip(".").lower()
        if text.startswith("["):
            return self.check(text)
        try:
            if not is_ipv4(text):
                return None
            return self.check(normalise_ipv4(text))
        except InvalidURL as exc:
            return f"{host!r} is not a usable host ({exc.reason})"

    def check_port(self, host: str, port: int, addresses: Sequence[str]) -> str | None:
        """The reason to refuse ``port`` of ``host`` (resolved to ``addresses``): a port not
        in ``ports`` is fetched only from addresses ``allow_networks`` opens."""
        if not self.ports or port in self.ports:
            return None
        for address in addresses:
            try:
                ip = _parse_address(address)
            except ValueError:
                return f"{host}: {address!r} is not an IP address"
            if not self._allowed(ip):
                shown = ", ".join(map(str, sorted(self.ports)))
                return (
                    f"{host}:{port}: the crawler fetches only ports {shown} of public "
                    f"addresses (learn.crawl.ports; any port of learn.crawl.allow_networks)"
                )
        return None

    def literal(self, host: str) -> str | None:
        """The address a URL host that is an IP literal (any spelling) names, else None."""
        text = host.rstrip(".").lower()
        try:
            if text.startswith("["):
                return str(_parse_address(text))
            return normalise_ipv4(text) if is_ipv4(text) else None
        except (ValueError, InvalidURL):
            return None

    def check_all(self, host: str, addresses: Sequence[str]) -> str | None:
        """The reason to refuse ``host`` when any of its ``addresses`` is forbidden."""
        if not addresses:
            return None
        for address in addresses:
            found = self._why(address)
            if found is not None:
                ip, why = found
                if len(addresses) == 1:
                    return f"{host} resolves to {ip}, which is {why}{_ALLOW_HINT}"
                count = len(addresses)
                return (
                    f"{host} resolves to {count} addresses, one of them {ip}, which is "
                    f"{why}{_ALLOW_HINT}"
                )
        return None

    def __repr__(self) -> str:
        allowed = ", ".join(map(str, self.allow_networks)) or "nothing private"
        return f"Guard(allows {allowed})"


def _static_table(hosts: Mapping[str, str | Sequence[str]]) -> dict[str, tuple[str, ...]]:
    table: dict[str, tuple[str, ...]] = {}
    for name, value in hosts.items():
        values = (value,) if isinstance(value, str) else tuple(value)
        try:
            table[name.rstrip(".").lower()] = tuple(str(_parse_address(v)) for v in values)
        except ValueError:
            raise ConfigError(f"hosts: {name!r} maps to {value!r}, not IP addresses") from None
    return table


class GuardedResolver(AbstractResolver):
    """An aiohttp resolver that returns only addresses the guard allows.

    Names are looked up in ``hosts`` first (a static map, like Squid's ``hosts_file``),
    then with ``resolver`` (aiohttp's default resolver when None: ``getaddrinfo`` in a
    thread, or aiodns when installed). A name with any forbidden address raises
    :class:`AddressRefused`; aiohttp then fails the request without connecting.
    """

    def __init__(
        self,
        guard: Guard,
        *,
        hosts: Mapping[str, str | Sequence[str]] | None = None,
        resolver: AbstractResolver | None = None,
    ) -> None:
        self.guard = guard
        self._table = _static_table(hosts or {})
        self._resolver = resolver
        self.refused = 0

    async def _lookup(self, host: str, port: int, family: int) -> list[ResolveResult]:
        static = self._table.get(host.rstrip(".").lower())
        if static is None:
            if self._resolver is None:
                from aiohttp.resolver import DefaultResolver

                self._resolver = DefaultResolver()
            return await self._resolver.resolve(host, port, socket.AddressFamily(family))
        results: list[ResolveResult] = []
        for text in static:
            kind = socket.AF_INET6 if ":" in text else socket.AF_INET
            if family in (socket.AF_UNSPEC, kind):
                results.append(
                    {
                        "hostname": host,
                        "host": text,
                        "port": port,
                        "family": kind,
                        "proto": 0,
                        "flags": socket.AI_NUMERICHOST,
                    }
                )
        return results

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        literal = self.guard.check_host(host)
        if literal is not None:
            self.refused += 1
            raise AddressRefused(host, literal)
        results = await self._lookup(host, port, family)
        addresses = [r["host"] for r in results]
        why = self.guard.check_all(host, addresses) or self.guard.check_port(host, port, addresses)
        if why is not None:
            self.refused += 1
            raise AddressRefused(host, why)
        if not results:
            raise OSError(f"{host} has no address")
        return results

    async def close(self) -> None:
        if self._resolver is not None:
            await self._resolver.close()
