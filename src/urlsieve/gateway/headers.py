"""What the lookup service believes of a request's header fields.

- **Framing.** A request is framed one way only (RFC 9112 §6.1, §6.3): one
  ``Content-Length`` value, or ``Transfer-Encoding`` (HTTP/1.1) without one; a
  single ``Host``. :func:`framing_problem` says what is wrong otherwise; the server
  (:mod:`urlsieve.service.server`) checks the head as received, the application
  the headers any other server hands it.
- **Forwarding headers.** ``X-Forwarded-For``, ``Forwarded`` and ``X-Real-IP``
  name a client; only a trusted proxy's word counts, and of it only the last
  address, the one the proxy itself appended (:func:`last_named`). A server's own
  proxy-header handling (uvicorn's ``proxy_headers``) copies an address from these
  headers into the peer address the application is given: :func:`named_addresses`
  lets the application see that its peer is one such header names.

Every function is linear in the header bytes and raises nothing on any input.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable

__all__ = [
    "FORWARDING_HEADERS",
    "address_key",
    "framing_problem",
    "last_named",
    "named_addresses",
]

#: Headers in which proxies name the client they forward for (lower case).
FORWARDING_HEADERS = ("x-forwarded-for", "forwarded", "x-real-ip")


def framing_problem(http_version: str, fields: Iterable[tuple[bytes, bytes]]) -> str | None:
    """Why a request with these header ``fields`` (name, value) could be framed two ways,
    or None. Names are compared without case; a ``Content-Length`` value counts once
    per comma-separated item, so ``5, 5`` is two."""
    lengths = encodings = hosts = 0
    for name, value in fields:
        lowered = name.lower()
        if lowered == b"content-length":
            lengths += value.count(b",") + 1
        elif lowered == b"transfer-encoding":
            encodings += 1
        elif lowered == b"host":
            hosts += 1
    if encodings and lengths:
        return (
            "both Transfer-Encoding and Content-Length: the body could be read two ways "
            "(RFC 9112 section 6.1); send one"
        )
    if encodings and http_version in ("1.0", "0.9"):
        return f"Transfer-Encoding in an HTTP/{http_version} request (RFC 9112 section 6.1)"
    if encodings > 1:
        return f"Transfer-Encoding is given {encodings} times: send it once"
    if lengths > 1:
        return f"Content-Length is given {lengths} times: send one value (RFC 9112 section 6.3)"
    if hosts > 1:
        return f"Host is given {hosts} times: send it once"
    return None


def _bare(text: str) -> str:
    """An address as a forwarding header writes it, without quotes, brackets or port
    (``[2001:db8::1]:4711`` is ``2001:db8::1``, ``10.0.0.1:80`` is ``10.0.0.1``)."""
    text = text.strip().strip('"').strip()
    if text.startswith("["):
        return text[1:].partition("]")[0]
    if text.count(":") == 1:  # an IPv4 address or a name with a port; IPv6 has several
        return text.partition(":")[0]
    return text


def _named(header: str, element: str) -> str | None:
    """The address one comma-separated element of ``header`` names (``Forwarded``: its
    ``for=`` parameter; None when it has none)."""
    if header != "forwarded":
        return _bare(element)
    for pair in element.split(";"):
        key, _, value = pair.partition("=")
        if key.strip().lower() == "for":
            return _bare(value)
    return None


def last_named(header: str, values: list[str]) -> str | None:
    """The address a proxy appended to ``header`` (its lines ``values``, in order): the
    last element of the last line. None when that element names none (an element the
    proxy did not write is never used instead)."""
    if not values:
        return None
    named = _named(header.lower(), values[-1].rpartition(",")[2])
    return named or None


def named_addresses(header: str, values: list[str]) -> list[str]:
    """Every address ``header`` names across its lines ``values``, in order."""
    lowered = header.lower()
    out = []
    for value in values:
        for element in value.split(","):
            named = _named(lowered, element)
            if named:
                out.append(named)
    return out


def address_key(text: str) -> str:
    """``text`` in one spelling for comparison: an IP address compressed, else lower case."""
    try:
        return ipaddress.ip_address(text).compressed
    except ValueError:
        return text.lower()
