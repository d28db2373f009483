"""Host canonicalisation steps.

Each step is a pure function ``str -> str`` that raises
:class:`~urlsieve.exceptions.InvalidURL` when the host cannot be where a
browser would send a request. The default chain, in order:

``unescape_host`` → ``map_idn`` → ``strip_dots`` → ``check_host_chars`` →
``normalise_ipv4`` → ``punycode``.

IPv6 literals (``[...]``) do not go through the chain: see :func:`normalise_ipv6`.
"""

from __future__ import annotations

import functools
import ipaddress
import re

import idna

from urlsieve.exceptions import InvalidURL
from urlsieve.url.path import shorten, unescape

__all__ = [
    "check_host_chars",
    "is_ipv4",
    "map_idn",
    "normalise_ipv4",
    "normalise_ipv6",
    "punycode",
    "strip_dots",
    "unescape_host",
]

# WHATWG "forbidden domain code points": a browser refuses a host containing one.
_FORBIDDEN = re.compile(r"[\x00-\x20#%/:<>?@\[\\\]^|\x7f]")
_DOTS = re.compile(r"\.{2,}")
# WHATWG "ends in a number": such a host must parse as IPv4 or it is invalid.
_NUMERIC_LABEL = re.compile(r"(?:0[xX][0-9a-fA-F]*|[0-9]+)")
_DECIMAL = re.compile(r"[0-9]+")
_OCTAL = re.compile(r"0[0-7]+")
_HEX = re.compile(r"0[xX][0-9a-fA-F]*")
# Significant digits (leading zeros and "0x" dropped) an IPv4 part may have: 2**32
# has 10 decimal digits; more is refused before int() sees it.
_MAX_IPV4_DIGITS = 12
# DNS limits, applied to hosts with a non-ASCII label only: beyond them Punycode
# (quadratic in a label's length) could never give a name DNS can resolve.
_MAX_IDN_HOST = 253
_MAX_IDN_LABEL = 63
# Non-ASCII hosts and labels whose UTS-46 mapping and Punycode are remembered: both are
# pure Python (about 6 and 25 µs a host), and a site's requests repeat its host. Only
# hosts and mappings up to a DNS name's length (a longer mapping is refused later anyway),
# so at most about 8 MB however many hosts an attacker sends.
_IDN_CACHE = 4096


def unescape_host(host: str) -> str:
    """Percent-unescape until nothing changes (in linear time); the result must be UTF-8.

    A host holding a byte that is not UTF-8 (a surrogate in the text) is refused.
    """
    if host.isascii() and "%" not in host:
        return host
    try:
        data = unescape(host.encode("utf-8", "surrogatepass"))
        return data.decode("utf-8")
    except UnicodeError as exc:
        raise InvalidURL("host is not UTF-8 (after percent-unescaping)") from exc


def map_idn(host: str) -> str:
    """Lower-case; non-ASCII hosts get the UTS-46 mapping (full-width forms, ideographic dots)."""
    if host.isascii():
        return host.lower()
    try:
        if len(host) <= _MAX_IDN_HOST:
            return _uts46_remembered(host)
        return _uts46(host)
    except _LongMapping as long:  # not remembered
        return long.mapped
    except (idna.IDNAError, UnicodeError, ValueError) as exc:
        raise InvalidURL(f"host has a code point IDNA does not allow ({exc})") from exc


def _uts46(host: str) -> str:
    return idna.uts46_remap(host, std3_rules=False, transitional=False)


class _LongMapping(Exception):
    """A mapping longer than a DNS name (one character can map to 18): lru_cache
    remembers no call that raises, so this carries it past the cache."""

    def __init__(self, mapped: str) -> None:
        self.mapped = mapped


@functools.lru_cache(maxsize=_IDN_CACHE)
def _uts46_remembered(host: str) -> str:
    mapped = _uts46(host)
    if len(mapped) > _MAX_IDN_HOST:
        raise _LongMapping(mapped)
    return mapped


def strip_dots(host: str) -> str:
    """Strip leading and trailing dots and collapse runs of dots."""
    if ".." in host:
        host = _DOTS.sub(".", host)
    host = host.strip(".")
    if not host:
        raise InvalidURL("empty host")
    return host


def check_host_chars(host: str) -> str:
    """Refuse hosts with a code point no browser accepts in a host (space, ``/``, ``%``, …)."""
    bad = _FORBIDDEN.search(host)
    if bad is not None:
        raise InvalidURL(f"host contains forbidden character {bad.group()!r}")
    return host


def is_ipv4(host: str) -> bool:
    """True when the host's last label is a number, so it must be read as an IPv4 address."""
    return _NUMERIC_LABEL.fullmatch(host.rpartition(".")[2]) is not None


def _ipv4_part(part: str) -> int:
    if _HEX.fullmatch(part):
        return int(_significant(part[2:], part), 16)
    if part.startswith("0") and len(part) > 1:
        if _OCTAL.fullmatch(part):
            return int(_significant(part, part), 8)
        raise InvalidURL(
            f"host looks like an IPv4 address but {shorten(part)!r} is not an octal number"
        )
    if _DECIMAL.fullmatch(part):
        return int(_significant(part, part))
    raise InvalidURL(f"host looks like an IPv4 address but {shorten(part)!r} is not a number")


def _significant(digits: str, part: str) -> str:
    """``digits`` without leading zeros (``"0"`` if none are left), refused when too long."""
    digits = digits.lstrip("0") or "0"
    if len(digits) > _MAX_IPV4_DIGITS:
        raise InvalidURL(
            f"host looks like an IPv4 address but {shorten(part)!r} has more than"
            f" {_MAX_IPV4_DIGITS} significant digits"
        )
    return digits


def normalise_ipv4(host: str) -> str:
    """Rewrite any IPv4 spelling as a dotted quad.

    Decimal (``3279880203``), hex (``0x12.0x43.0x44.0x01``), octal
    (``012.034.01.055``) and fewer than four parts (``1.2.3`` = ``1.2.0.3``)
    are accepted. Parts wrap like the Safe Browsing reference client: each
    leading part keeps its low 8 bits and the last part its low
    ``8 × (5 − parts)`` bits. Hosts whose last label is not a number pass
    through unchanged.
    """
    if not is_ipv4(host):
        return host
    parts = host.split(".")
    if len(parts) > 4:
        raise InvalidURL("host looks like an IPv4 address but has more than four parts")
    values = [_ipv4_part(p) for p in parts]
    number = 0
    for value in values[:-1]:
        number = (number << 8) | (value & 0xFF)
    tail_bits = 8 * (5 - len(values))
    number = (number << tail_bits) | (values[-1] & ((1 << tail_bits) - 1))
    return str(ipaddress.IPv4Address(number))


def normalise_ipv6(literal: str) -> tuple[str, bool]:
    """Canonicalise a bracketed IPv6 literal; ``::ffff:a.b.c.d`` becomes ``a.b.c.d``.

    Returns the host and whether it is IPv4 (for an IPv4-mapped address).
    """
    inner = literal[1:-1]
    if "%" in inner:
        raise InvalidURL("IPv6 zone identifiers are not allowed in URLs")
    try:
        address = ipaddress.IPv6Address(inner)
    except ValueError as exc:
        raise InvalidURL(f"invalid IPv6 address {shorten(inner)!r}") from exc
    mapped = address.ipv4_mapped
    if mapped is not None:
        return str(mapped), True
    return f"[{address.compressed}]", False


def punycode(host: str) -> str:
    """Encode non-ASCII labels as ``xn--`` + Punycode (UTS-46 ToASCII).

    ASCII hosts have no length limit. A host with a non-ASCII label must fit
    DNS (at most 253 characters, labels at most 63) before encoding: Python's
    Punycode codec is quadratic in a label's length, and a longer name could
    never be resolved.
    """
    if host.isascii():
        return host
    _check_dns_length(host, _MAX_IDN_HOST, "name")
    return ".".join(_punycode_label(label) for label in host.split("."))


def _punycode_label(label: str) -> str:
    if label.isascii():
        return label
    _check_dns_length(label, _MAX_IDN_LABEL, "label")
    try:
        return _punycode_remembered(label)
    except UnicodeError as exc:
        raise InvalidURL(f"host label {label!r} cannot be encoded as punycode") from exc


@functools.lru_cache(maxsize=_IDN_CACHE)
def _punycode_remembered(label: str) -> str:
    """``xn--`` + the Punycode of a label of at most 63 characters."""
    return "xn--" + label.encode("punycode").decode("ascii")


def _check_dns_length(text: str, limit: int, what: str) -> None:
    if len(text) > limit:
        raise InvalidURL(
            f"internationalised host {what} of {len(text)} characters is longer than"
            f" a DNS {what} ({limit})"
        )
