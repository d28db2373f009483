"""Block pages of a policy, filled as squidGuard 1.6 fills its ``redirect`` URLs.

squidGuard inserts the values raw (the URL as Squid sent it, not escaped) and
leaves every code it does not know as written, ``%%`` and ``%c`` included:

=====  ==========================================================
``%a``  client address
``%n``  client host name (empty when Squid sent none)
``%i``  user, lower-cased (empty when none)
``%s``  source (``default`` for the default ACL)
``%t``  the pass-list entry that blocked (``none``, ``in-addr``, a destination)
``%u``  the URL as Squid sent it
``%p``  the URL's path and query, without the leading ``/`` (empty for CONNECT)
``%q``  ``noquota`` (squidGuard's quota flag)
=====  ==========================================================

A template starting ``301:``, ``302:``, ``303:`` or ``307:`` asks for that redirect status.
"""

from __future__ import annotations

import functools
import re

__all__ = ["render_page", "split_status"]

_CODE = re.compile(r"%([anistupq])")
_STATUS = re.compile(r"(30[1237]):")
_AUTHORITY = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^/?#]*")


@functools.lru_cache(maxsize=256)
def split_status(template: str) -> tuple[int | None, str]:
    """``302:http://…`` → ``(302, "http://…")``; no prefix → ``(None, template)``."""
    m = _STATUS.match(template)
    if m is None:
        return None, template
    return int(m.group(1)), template[m.end() :]


@functools.lru_cache(maxsize=256)
def _parsed(template: str) -> tuple[tuple[str, str | None], ...]:
    """The template cut once into (literal, code or None) pairs."""
    parts: list[tuple[str, str | None]] = []
    at = 0
    for m in _CODE.finditer(template):
        parts.append((template[at : m.start()], m.group(1)))
        at = m.end()
    parts.append((template[at:], None))
    return tuple(parts)


def _path(url: str) -> str:
    m = _AUTHORITY.match(url)
    if m is None:  # a CONNECT authority (host:443) has no path
        return ""
    rest = url[m.end() :]
    return rest[1:] if rest.startswith("/") else rest


def render_page(
    template: str,
    *,
    url: str,
    client: str | None,
    client_name: str | None,
    user: str | None,
    source: str,
    target: str | None,
) -> str:
    """The filled block page (``template`` without its status prefix)."""
    out = []
    for literal, code in _parsed(template):
        out.append(literal)
        if code is None:
            continue
        if code == "u":
            out.append(url)
        elif code == "p":
            out.append(_path(url))
        elif code == "a":
            out.append(client or "")
        elif code == "n":
            out.append(client_name or "")
        elif code == "i":
            out.append((user or "").lower())  # squidGuard lower-cases the user on input
        elif code == "s":
            out.append(source)
        elif code == "t":
            out.append(target or "unknown")
        else:  # q
            out.append("noquota")
    return "".join(out)
