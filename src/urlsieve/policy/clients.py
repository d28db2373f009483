"""Who asks: client address sets (IPv4 and IPv6), user names, client host names.

Addresses are kept as merged, sorted intervals of integers, one list per family,
so a lookup is one binary search whatever the number of entries; squidGuard's
spellings are read: ``10.0.0.1``, ``10.0.0.0/24``, ``10.0.0.0/255.255.255.0``,
``10.0.0.1-10.0.0.9`` (both ends included), and the same for IPv6 (no netmasks).
"""

from __future__ import annotations

import ipaddress
from bisect import bisect_right
from collections.abc import Iterable
from dataclasses import dataclass, field
from urllib.parse import unquote

__all__ = ["AddressSet", "AddressSyntaxError", "normalise_user", "parse_address"]


class AddressSyntaxError(ValueError):
    """An address, network or range that cannot be read (the caller adds file and line)."""


def parse_address(text: str) -> tuple[int, int, int]:
    """One address entry → ``(family, first, last)`` (family 4 or 6, both ends included)."""
    try:
        if "-" in text:
            low_text, _, high_text = text.partition("-")
            low = ipaddress.ip_address(low_text.strip())
            high = ipaddress.ip_address(high_text.strip())
            if low.version != high.version:
                raise AddressSyntaxError(f"{text!r}: a range within one address family")
            if int(high) < int(low):
                raise AddressSyntaxError(f"{text!r}: the range ends before it starts")
            return low.version, int(low), int(high)
        if "/" in text:
            network = ipaddress.ip_network(text, strict=True)
            return (
                network.version,
                int(network.network_address),
                int(network.broadcast_address),
            )
        address = ipaddress.ip_address(text)
        return address.version, int(address), int(address)
    except AddressSyntaxError:
        raise
    except ValueError as exc:
        raise AddressSyntaxError(f"{text!r}: {exc}") from None


def _merged(intervals: Iterable[tuple[int, int]]) -> tuple[list[int], list[int]]:
    starts: list[int] = []
    ends: list[int] = []
    for low, high in sorted(intervals):
        if ends and low <= ends[-1] + 1:
            ends[-1] = max(ends[-1], high)
        else:
            starts.append(low)
            ends.append(high)
    return starts, ends


@dataclass
class AddressSet:
    """A set of client addresses; :meth:`__contains__` takes the address as Squid sends it."""

    v4: tuple[list[int], list[int]] = field(default_factory=lambda: ([], []))
    v6: tuple[list[int], list[int]] = field(default_factory=lambda: ([], []))
    entries: int = 0
    #: IPv4 ``(net, mask)`` pairs whose mask is not contiguous (squidGuard's dotted
    #: netmasks): an address matches when ``address & mask == net``.
    masked: tuple[tuple[int, int], ...] = ()

    @classmethod
    def of(
        cls, entries: Iterable[tuple[int, int, int]], masked: Iterable[tuple[int, int]] = ()
    ) -> AddressSet:
        v4: list[tuple[int, int]] = []
        v6: list[tuple[int, int]] = []
        n = 0
        for family, low, high in entries:
            (v4 if family == 4 else v6).append((low, high))
            n += 1
        pairs = tuple(dict.fromkeys(masked))
        return cls(_merged(v4), _merged(v6), n + len(pairs), pairs)

    def __contains__(self, address: object) -> bool:
        if not isinstance(address, str) or not address:
            return False
        try:
            ip = ipaddress.ip_address(address.strip("[]"))
        except ValueError:
            return False
        if ip.version == 6 and ip.ipv4_mapped is not None:  # ::ffff:10.0.0.1 is 10.0.0.1
            ip = ip.ipv4_mapped
        starts, ends = self.v4 if ip.version == 4 else self.v6
        value = int(ip)
        at = bisect_right(starts, value) - 1
        if at >= 0 and value <= ends[at]:
            return True
        return ip.version == 4 and any(value & mask == net for net, mask in self.masked)

    def __bool__(self) -> bool:
        return bool(self.v4[0] or self.v6[0] or self.masked)


def normalise_user(user: str | None) -> str | None:
    """A user name as Squid sends it → the name a user list is compared with.

    External ACL fields arrive URL-escaped (``DOMAIN%5cbob``); the name is compared
    without case, as squidGuard does.
    """
    if user is None or user in ("", "-"):
        return None
    return unquote(user).lower()
