"""Host canonicalisation steps.

Each step is a pure function ``str -> str`` that raises
:class:`~urlsieve.exceptions.InvalidURL` when the host cannot be where a
browser would send a request. The default chain, in order:

``unescape_host`` → ``map_idn`` → ``strip_dots`` → ``check_host_chars`` →
``normalise_ipv4`` → ``punycode``.

IPv6 literals (``[...]``) do not go through the chain: see :func:`normalise_ipv6`.
"""

from __future__ import annotations

import ipaddress
import re
from urllib.parse import unquote_to_bytes

import idna

from urlsieve.exceptions import InvalidURL

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


def unescape_host(host: str) -> str:
    """Percent-unescape repeatedly until nothing changes; the result must be UTF-8."""
    if "%" not in host:
        return host
    data = host.encode("utf-8", "surrogatepass")
    while b"%" in data:
        decoded = unquote_to_bytes(data)
        if decoded == data:
            break
        data = decoded
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidURL("host is not UTF-8 after percent-unescaping") from exc


def map_idn(host: str) -> str:
    """Lower-case; non-ASCII hosts get the UTS-46 mapping (full-width forms, ideographic dots)."""
    if host.isascii():
        return host.lower()
    try:
        return idna.uts46_remap(host, std3_rules=False, transitional=False)
    except (idna.IDNAError, UnicodeError, ValueError) as exc:
        raise InvalidURL(f"host has a code point IDNA does not allow ({exc})") from exc


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
        return int(part[2:] or "0", 16)
    if part.startswith("0") and len(part) > 1:
        if _OCTAL.fullmatch(part):
            return int(part, 8)
        raise InvalidURL(f"host looks like an IPv4 address but {part!r} is not an octal number")
    if _DECIMAL.fullmatch(part):
        return int(part)
    raise InvalidURL(f"host looks like an IPv4 address but {part!r} is not a number")


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
        raise InvalidURL(f"invalid IPv6 address {inner!r}") from exc
    mapped = address.ipv4_mapped
    if mapped is not None:
        return str(mapped), True
    return f"[{address.compressed}]", False


def punycode(host: str) -> str:
    """Encode non-ASCII labels as ``xn--`` + Punycode (UTS-46 ToASCII without DNS length checks)."""
    if host.isascii():
        return host
    labels = []
    for label in host.split("."):
        if label.isascii():
            labels.append(label)
            continue
        try:
            labels.append("xn--" + label.encode("punycode").decode("ascii"))
        except UnicodeError as exc:
            raise InvalidURL(f"host label {label!r} cannot be encoded as punycode") from exc
    return ".".join(labels)
