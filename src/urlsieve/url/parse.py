"""Split a URL string into parts and run a profile's steps over them."""

from __future__ import annotations

import re
from collections.abc import Callable

from urlsieve._accel import report as _acceleration
from urlsieve._accel import speedups
from urlsieve.exceptions import InvalidURL
from urlsieve.url.host import is_ipv4, normalise_ipv6
from urlsieve.url.model import URL
from urlsieve.url.path import shorten, to_bytes
from urlsieve.url.profile import FILTER, Profile

__all__ = [
    "ACCELERATED",
    "MAX_URL_LENGTH",
    "SCHEMES",
    "canonicalize",
    "fast_canonical_py",
    "parse_url",
]

#: Schemes with a host; everything else (``data:``, ``javascript:``, ``mailto:``…) is refused.
SCHEMES = frozenset({"http", "https", "ftp", "ws", "wss"})

#: The longest URL accepted, in characters (``str``) or bytes (``bytes``): 64 KiB.
#: Longer input raises :class:`InvalidURL` before any other work.
MAX_URL_LENGTH = 65536
# At most five digits once leading zeros are dropped: int() never sees a long number.
_MAX_PORT_DIGITS = 5

_C0_AND_SPACE = "".join(map(chr, range(0x21)))
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*:")
# "host:8080/..." without a scheme: a port has at least one digit.
_PORT_THEN_END = re.compile(r"[0-9]+(?:[/\\?#]|\Z)")
# Schemes that never name a host, so "javascript:1" is never read as host "javascript".
_NOT_HOSTS = frozenset(
    {
        "about",
        "blob",
        "chrome",
        "data",
        "file",
        "filesystem",
        "intent",
        "javascript",
        "mailto",
        "market",
        "news",
        "sms",
        "tel",
        "urn",
        "vbscript",
        "view-source",
    }
)
_LEADING_SLASHES = re.compile(r"[/\\]{0,2}")
_AUTHORITY_END = re.compile(r"[/\\?]")
_PORT = re.compile(r"[0-9]+")

# An already-canonical URL: lower-case scheme and host (its last label not a number),
# no port or userinfo, a path without empty, "." or ".." segments, and only the percent-escapes
# that canonicalisation itself writes (upper-case, of bytes it escapes;
# "%25" not followed by two hex digits). Such a string is its own canonical form.
_ESC = r"%(?:[01][0-9A-F]|2[03]|7F|[89A-F][0-9A-F]|25(?![0-9A-Fa-f]{2}))"
# A segment is not "." or ".." (".well-known", "..." are segments like any other).
_SEG = rf"""(?!\.\.?(?![^/?]))(?:[!"$&-.0->@-\[\]-~]++|{_ESC})++"""
_OCTET = r"(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"
# A host's characters once canonical: printable ASCII but upper case and the code points
# WHATWG forbids in a host (host.py's check_host_chars), dots apart.
_HOST_CHAR = r"""[a-z0-9_\-!"$&'()*+,;=`{}~]"""
_FAST = re.compile(
    r"(?P<scheme>https?|ftp|wss?)://"
    rf"(?P<host>(?P<ip>(?:{_OCTET}\.){{3}}{_OCTET})|(?:{_HOST_CHAR}++\.)*+[a-z]{_HOST_CHAR}*+)"
    rf"(?P<path>/(?:{_SEG}(?:/{_SEG})*/?)?)?"  # no path: canonical only once "/" is added
    rf"""(?:\?(?P<query>(?:[!"$&-~]++|{_ESC})*+))?"""
)


def _split(url: str) -> tuple[str, str | None, str, str, str | None]:
    """Return ``(scheme, userinfo, hostport, raw path, raw query)``."""
    s = url.strip(_C0_AND_SPACE)
    if "\t" in s or "\n" in s or "\r" in s:
        s = s.replace("\t", "").replace("\n", "").replace("\r", "")
    if not s:
        raise InvalidURL("empty URL", url)
    rest = s
    scheme = "http"
    match = _SCHEME.match(s)
    if match is not None:
        candidate = match.group()[:-1].lower()
        after = s[match.end() :]
        if candidate in SCHEMES:
            scheme, rest = candidate, after
        elif candidate in _NOT_HOSTS or after.startswith("//") or not _PORT_THEN_END.match(after):
            raise InvalidURL(
                f"unsupported scheme {candidate!r} (only http, https, ftp, ws and wss have a host)",
                url,
            )
        # else "host:port/..." with no scheme: keep the whole string
    elif s[0] in "/\\" and s[1:2] not in ("/", "\\"):
        raise InvalidURL("relative reference without a host", url)

    hash_at = rest.find("#")
    if hash_at >= 0:
        rest = rest[:hash_at]
    rest = rest[_LEADING_SLASHES.match(rest).end() :]  # type: ignore[union-attr]
    end = _AUTHORITY_END.search(rest)
    if end is None:
        authority, tail = rest, ""
    else:
        authority, tail = rest[: end.start()], rest[end.start() :]
    question = tail.find("?")
    if question >= 0:
        raw_path, raw_query = tail[:question], tail[question + 1 :]
    else:
        raw_path, raw_query = tail, None
    at = authority.rfind("@")
    userinfo = None
    if at >= 0:
        userinfo, authority = authority[:at], authority[at + 1 :]
    # Every accepted scheme is "special": a backslash separates path segments.
    return scheme, userinfo, authority, raw_path.replace("\\", "/"), raw_query


def _split_port(hostport: str, url: str) -> tuple[str, int | None]:
    if hostport.startswith("["):
        close = hostport.find("]")
        if close < 0:
            raise InvalidURL("unterminated IPv6 address", url)
        host, after = hostport[: close + 1], hostport[close + 1 :]
        if after and after[0] != ":":
            raise InvalidURL("unexpected text after IPv6 address", url)
        raw_port = after[1:] if after else ""
    else:
        host, _, raw_port = hostport.partition(":")
    if not raw_port:
        return host, None
    if _PORT.fullmatch(raw_port) is None:
        raise InvalidURL(f"invalid port {shorten(raw_port)!r}: not a number", url)
    digits = raw_port.lstrip("0")
    if len(digits) > _MAX_PORT_DIGITS or int(digits or "0") > 65535:
        raise InvalidURL(f"invalid port {shorten(raw_port)!r}: above 65535", url)
    return host, int(digits or "0")


def _run(data: bytes, steps: tuple[object, ...]) -> str:
    for step in steps:
        data = step(data)  # type: ignore[operator]
    return data.decode("ascii")


def _as_text(url: str | bytes) -> str:
    """Check the length cap; bytes become text with ``surrogateescape`` (non-UTF-8 bytes kept)."""
    if len(url) > MAX_URL_LENGTH:
        unit = "bytes" if isinstance(url, bytes) else "characters"
        raise InvalidURL(f"URL longer than {MAX_URL_LENGTH} {unit} ({len(url)})", shorten(url))
    if isinstance(url, bytes):
        return url.decode("utf-8", "surrogateescape")
    return url


def _parse_slow(url: str, profile: Profile) -> URL:
    scheme, userinfo, hostport, raw_path, raw_query = _split(url)
    host, port = _split_port(hostport, url)
    if not host:
        raise InvalidURL("empty host", url)
    try:
        if host[0] == "[":
            host, is_ip = normalise_ipv6(host)
        else:
            for step in profile.host_steps:
                host = step(host)
            is_ip = is_ipv4(host)
    except InvalidURL as exc:
        raise InvalidURL(exc.reason, url) from None
    path = _run(to_bytes(raw_path), profile.path_steps)
    query: str | None = None
    if raw_query is not None and profile.keep_query:
        query = _run(to_bytes(raw_query), profile.query_steps)
        if not query and profile.drop_empty_query:
            query = None
    return URL(scheme, host, path, query, port, userinfo, is_ip, keeps_port=profile.keep_port)


def _fast_match(url: str, allow_query: bool) -> re.Match[str] | None:
    """Match ``url`` (or ``http://`` + a scheme-less ``url``) when it is already canonical.

    The fast host pattern has no ``:``, so a string with a scheme of its own can
    never match with ``http://`` in front: the retry only takes scheme-less input.
    """
    m = _FAST.fullmatch(url)
    if m is None and "://" not in url:
        m = _FAST.fullmatch("http://" + url)
    if m is not None and (allow_query or m.group("query") is None):
        return m
    return None


def fast_canonical_py(url: str, allow_query: bool) -> str | None:
    """The canonical form of ``url`` when it (or ``http://`` + it) is already canonical, else None.

    The reference of the compiled scan, ``urlsieve._speedups.fast_canonical``
    (the first step of the compiled path of :func:`canonicalize` and
    :func:`parse_url`), which must answer exactly this for every string (the
    tests compare the two).
    """
    m = _fast_match(url, allow_query)
    if m is None:
        return None
    if m.group("path") is None:
        cut = m.end("host")
        return f"{m.string[:cut]}/{m.string[cut:]}"
    return m.string


#: Whether every compiled path is in use (False without the extension, with
#: URLSIEVE_PURE_PYTHON=1, or with an extension that lacks some: ``urlsieve doctor`` says which).
ACCELERATED = _acceleration().full
# The compiled fast path of canonicalize and parse_url: the scan, then the near-canonical
# rewrite of the default steps (the C twin of _parse_slow for the spellings it covers;
# the tests hold the two equal). Without it: the _FAST regex, then _parse_slow.
_canonical_rewrite: Callable[[str, bool, bool], str | None] | None = None
_url_parts: Callable[[str, bool, bool, type[URL]], URL | None] | None = None
if speedups is not None:
    _canonical_rewrite = speedups.canonical_rewrite
    _url_parts = speedups.url_parts


def parse_url(url: str | bytes, profile: Profile = FILTER) -> URL:
    """Canonicalise ``url`` into its parts; raise :class:`InvalidURL` if it has no usable host.

    ``bytes`` are read as UTF-8; bytes that are not UTF-8 stay bytes (``b"\\xe9"`` is ``%E9``).
    """
    if type(url) is not str or len(url) > MAX_URL_LENGTH:  # a call saved on the hot path
        url = _as_text(url)
    if profile.fast_path:
        if _url_parts is not None:
            parsed = _url_parts(url, profile.fast_query, profile.keep_port, URL)
            if parsed is not None:
                return parsed
        else:
            m = _fast_match(url, profile.fast_query)
            if m is not None:
                return URL(
                    m.group("scheme"),
                    m.group("host"),
                    m.group("path") or "/",
                    m.group("query"),
                    is_ip=m.group("ip") is not None,
                    keeps_port=profile.keep_port,
                )
    return _parse_slow(url, profile)


def canonicalize(url: str | bytes, profile: Profile = FILTER) -> str:
    """Return the canonical form ``scheme://host/path[?query]`` of ``url``.

    >>> canonicalize("HTTP://WWW.Example.COM:80/a/./b/../c//d?x=1#frag")
    'http://www.example.com/a/c/d?x=1'

    Raises :class:`InvalidURL` (a :class:`ValueError`) with the reason when
    the string is not a URL with a host. Idempotent: canonicalising a
    canonical URL returns it unchanged, and does so on a fast path.
    ``url`` may be ``bytes`` (see :func:`parse_url`); at most
    :data:`MAX_URL_LENGTH` long.
    """
    if type(url) is not str or len(url) > MAX_URL_LENGTH:
        url = _as_text(url)
    if profile.fast_path:
        if _canonical_rewrite is not None:
            canonical = _canonical_rewrite(url, profile.fast_query, profile.keep_port)
        else:
            canonical = fast_canonical_py(url, profile.fast_query)
        if canonical is not None:
            return canonical
    return _parse_slow(url, profile).canonical
