"""Squid's helper line protocols: request lines in, reply lines out.

Two helper interfaces share one line syntax (squid.conf ``url_rewrite_program``
and ``external_acl_type``)::

    request:  [channel-ID SP] URL [SP client[/fqdn]] [SP user] [SP method] [SP key=value ...]
    reply:    [channel-ID SP] result [SP key=value ...]

The channel ID is present if and only if the helper runs with ``concurrency`` > 0
(Squid sends a number from 0 to concurrency-1 and the reply must echo it). The
positional fields after the URL are Squid's default ``url_rewrite_extras``
(``%>a/%>A %un %>rm myip=%la myport=%lp``); the README's ``external_acl_type``
line sends the same fields (``%>ru %>a %un %>rm``), each URL-escaped as Squid
does for external ACLs, and Squid appends ``%DATA`` (``-`` when empty).

Replies:

- url_rewrite: ``OK status=302 url="…"`` (redirect), ``OK rewrite-url="…"``
  (rewrite), ``ERR`` (keep the request as it is);
- external ACL: ``OK`` (the ACL matches: the URL is blocked) with ``tag=`` (the
  category), ``message=`` (available as ``%o`` in error pages) and ``log=``,
  ``ERR`` (no match);
- both: ``BH message="…"`` for a line the helper cannot read.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from enum import StrEnum
from urllib.parse import unquote_to_bytes

from urlsieve._accel import speedups
from urlsieve.exceptions import ConfigError, HelperProtocolError
from urlsieve.url.path import to_bytes

__all__ = [
    "MAX_LINE",
    "MAX_ACL_READINGS",
    "REDIRECT_STATUSES",
    "TEMPLATE_CODES",
    "acl_readings",
    "HelperMode",
    "HelperRequest",
    "ProtocolError",
    "format_reply",
    "leading_channel",
    "parse_request",
    "quote_value",
    "render_template",
    "validate_template",
]


class HelperMode(StrEnum):
    """How the helper answers a blocked URL."""

    REDIRECT = "redirect"  # url_rewrite_program: OK status=30N url="block page"
    REWRITE = "rewrite"  # url_rewrite_program: OK rewrite-url="block page"
    ACL = "acl"  # external_acl_type: OK (match) / ERR (no match)


REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})

#: Substitutions in the block page URL (squidGuard's letters, plus %c and %r).
TEMPLATE_CODES = {
    "a": "client IP address",
    "n": "client host name (or the address when Squid sent none)",
    "i": "user name (or '-')",
    "u": "the requested URL as Squid sent it",
    "c": "the category of the deciding rule",
    "t": "the category (squidGuard's 'target class' spelling)",
    "r": "the deciding rule as source:line",
    "%": "a literal %",
}

_TEMPLATE_CODE = re.compile(r"%(.)", re.DOTALL)
_CHANNEL = re.compile(rb"[0-9]+")
# CONNECT requests reach url_rewrite as an authority: "host:443" or "[v6]:443".
_AUTHORITY = re.compile(r"(?:\[[0-9A-Fa-f:.]+\]|[^/\s:@?#]+):[0-9]+")
# What a quoted reply value keeps as it is: printable ASCII but the two it escapes.
_UNSAFE_IN_VALUE = re.compile(rb'[^\x20-\x7e]|["\\]')

#: The longest request line the helper reads (bytes, without the newline); a longer
#: one is answered ``BH`` and its bytes are dropped unread (Squid's own URLs stop at 8 KiB).
MAX_LINE = 131_072


#: Kept under this name here; defined in :mod:`urlsieve.exceptions`.
ProtocolError = HelperProtocolError


@dataclass(frozen=True, slots=True)
class HelperRequest:
    """One request line, split into the fields Squid sends by default.

    Fields are text decoded from the line's bytes as UTF-8 with ``surrogateescape``:
    a byte that is not UTF-8 stays in the text as U+DC80-U+DCFF, so the canonicaliser
    and the block page see the bytes Squid sent, never a replacement character.
    """

    channel: str | None
    url: str
    client: str | None = None
    client_name: str | None = None
    user: str | None = None
    method: str | None = None
    extras: dict[str, str] = field(default_factory=dict)

    @property
    def target(self) -> str:
        """The URL to check: a CONNECT authority (``host:443``) becomes ``https://host:443/``."""
        if self.method == "CONNECT" or _AUTHORITY.fullmatch(self.url):
            return f"https://{self.url}/"
        return self.url


def _text(token: bytes) -> str:
    return token.decode("utf-8", "surrogateescape")


def _unescaped(token: bytes) -> str:
    return _text(unquote_to_bytes(token))


def _field(token: str | None) -> str | None:
    return None if token in (None, "", "-") else token


def leading_channel(line: bytes) -> str | None:
    """The channel ID a line starts with (digits, then a space), or None: for replies to
    lines that cannot be read at all (too long, or failing in an unforeseen way)."""
    head, sep, _ = line.partition(b" ")
    return _text(head) if sep and _CHANNEL.fullmatch(head) else None


def parse_request(
    line: bytes | str, *, channels: bool | None = None, escaped: bool = False
) -> HelperRequest:
    """Read one request line (without its newline).

    The line is split on ASCII spaces only (Squid's separator): other white space,
    Unicode's included (U+3000, U+2028 …), is part of a field. ``channels``: True
    when Squid sends channel IDs (``concurrency`` > 0), False when not, None to
    recognise them (a first token of digits: a lone one is a channel ID without a
    URL, since a Squid URL is never a bare number). ``escaped``: the fields are
    URL-escaped (external ACL) and are unescaped, except the URL: Squid 5 escapes
    the bytes of ``%>ru`` that are not URL characters (``\xff`` → ``%FF``) but
    leaves ``%`` as it is, so unescaping would turn a ``%23`` of the path into a
    ``#`` that cuts it. The canonicaliser unescapes the URL itself, so it sees the
    same URL in both helper modes.
    """
    if isinstance(line, str):
        line = line.encode("utf-8", "surrogateescape")
    tokens = [token for token in line.split(b" ") if token]
    channel: str | None = None
    if tokens and channels is not False:
        if _CHANNEL.fullmatch(tokens[0]):
            channel = _text(tokens.pop(0))
        elif channels:
            raise ProtocolError(f"expected a channel ID (a number), got {tokens[0][:80]!r}")
    if not tokens:
        raise ProtocolError("empty request line: expected a URL", channel)
    url = _text(tokens[0])
    if url == "-":
        raise ProtocolError("no URL in the request line", channel)
    decode = _unescaped if escaped else _text
    positional: list[str] = []
    extras: dict[str, str] = {}
    for token in tokens[1:]:
        key, sep, value = token.partition(b"=")
        if sep and key.isascii() and _text(key).isidentifier():
            extras[_text(key)] = decode(value)
        else:
            positional.append(decode(token))
    client = client_name = None
    if positional:
        client, _, name = positional[0].partition("/")
        client, client_name = _field(client), _field(name)
    user = _field(positional[1]) if len(positional) > 1 else None
    method = _field(positional[2]) if len(positional) > 2 else None
    return HelperRequest(channel, url, client, client_name, user, method, extras)


_VALUE_ESCAPES = {b'"': b'\\"', b"\\": b"\\\\", b"\r": b"\\r", b"\n": b"\\n", b"\t": b"\\t"}


#: The most ``%23`` of an external-ACL URL read as a possible raw ``#`` (see below).
MAX_ACL_READINGS = 8
_ESCAPED_BACKSLASH = re.compile(r"%5[Cc]")
_ESCAPED_TAB_CR_LF = re.compile(r"%0[9AaDd]")
_ESCAPED_EDGES = re.compile(r"\A(?:%[01][0-9A-Fa-f]|%20)+|(?:%[01][0-9A-Fa-f]|%20)+\Z")


def acl_readings(url: str) -> list[str]:
    """Every URL an external-ACL ``%>ru`` may stand for, the URL as sent first.

    Squid escapes a raw ``#`` as ``%23``, a raw ``\\`` as ``%5C`` and control bytes as
    ``%XX``, but leaves a client's own escapes as they are, so the two cannot be told
    apart (url_rewrite gets the raw bytes, where ``#`` starts a fragment and ``\\`` reads as
    ``/``). A helper blocks when any reading is blocked, so the external ACL is never
    looser than the redirector. Raises :class:`ProtocolError` past
    :data:`MAX_ACL_READINGS` ``%23``.
    """
    if "%" not in url:
        return [url]
    cuts = [m.start() for m in re.finditer("%23", url)]
    if len(cuts) > MAX_ACL_READINGS:
        raise ProtocolError(
            f"URL with more than {MAX_ACL_READINGS} %23 (each may be a raw '#'): ambiguous"
        )
    out: list[str] = []
    for cut in (url, *(url[:cut] for cut in cuts)):
        for reading in (cut, _unescape_controls(cut)):
            out.append(reading)
            if _ESCAPED_BACKSLASH.search(reading):
                out.append(_ESCAPED_BACKSLASH.sub(lambda _m: "\\", reading))
    return list(dict.fromkeys(out))


def _unescape_controls(url: str) -> str:
    """``url`` as the canonicaliser reads the raw control bytes Squid escaped: TAB, CR and
    LF dropped anywhere, C0 controls and spaces stripped at both ends."""
    return _ESCAPED_EDGES.sub("", _ESCAPED_TAB_CR_LF.sub("", url))


def _escape_value_byte(match: re.Match[bytes]) -> bytes:
    byte = match.group()
    return _VALUE_ESCAPES.get(byte) or b"%%%02X" % byte[0]


def quote_value(value: str) -> str:
    r"""A kv-pair value as Squid reads it: in double quotes, ``\`` and ``"`` escaped.

    The result is printable ASCII whatever the value holds: CR, LF and TAB are
    written ``\r``, ``\n``, ``\t`` (Squid's own escapes) and any other byte outside
    it (NUL, a byte that is not UTF-8, a non-ASCII character) ``%XX``, so a reply
    is always one line Squid can read.
    """
    if value.isascii() and value.isprintable() and '"' not in value and "\\" not in value:
        return f'"{value}"'  # nothing to escape (a rendered block page URL, a category)
    data = to_bytes(value)
    return '"' + _UNSAFE_IN_VALUE.sub(_escape_value_byte, data).decode("ascii") + '"'


def format_reply(channel: str | None, result: str, **pairs: str | int | None) -> str:
    """``[channel ]RESULT[ key="value" ...]`` with the newline. ``None`` values are left out.

    Keyword names use ``_`` for ``-`` (``rewrite_url`` → ``rewrite-url``).
    """
    parts = [result] if channel is None else [channel, result]
    for key, value in pairs.items():
        if value is None:
            continue
        name = key.replace("_", "-")
        parts.append(
            f"{name}={value}" if isinstance(value, int) else f"{name}={quote_value(value)}"
        )
    return " ".join(parts) + "\n"


def validate_template(template: str) -> str:
    """Check a block page URL template; raise ConfigError naming a bad ``%`` code."""
    for match in _TEMPLATE_CODE.finditer(template):
        if match.group(1) not in TEMPLATE_CODES:
            codes = ", ".join(f"%{c} ({d})" for c, d in TEMPLATE_CODES.items())
            raise ConfigError(
                f"redirect URL {template!r}: unknown substitution %{match.group(1)} "
                f"at offset {match.start()} (use {codes})"
            )
    if template.endswith("%") and not template.endswith("%%"):
        raise ConfigError(f"redirect URL {template!r} ends with a lone %: write %% for a literal %")
    if not re.match(r"[a-zA-Z][a-zA-Z0-9+.-]*://", template):
        raise ConfigError(
            f"redirect URL {template!r} is not absolute: Squid needs e.g. "
            "'http://block.example/?url=%u&category=%c'"
        )
    return template


_QUOTED = [
    chr(b) if chr(b).isascii() and (chr(b).isalnum() or chr(b) in "_.-~") else f"%{b:02X}"
    for b in range(256)
]


_QUOTE_ASCII = {b: _QUOTED[b] for b in range(128) if len(_QUOTED[b]) > 1}


def _quote_all_py(value: str) -> str:
    """``value``'s bytes percent-encoded but ``A-Z a-z 0-9 _ . - ~`` (``quote_from_bytes``
    with ``safe=""``, by table: the block page of every blocked request needs it)."""
    if value.isascii():
        return value.translate(_QUOTE_ASCII)
    return "".join(map(_QUOTED.__getitem__, to_bytes(value)))


_quote_c = getattr(speedups, "quote_all", None)


def _quote_all(value: str) -> str:
    """:func:`_quote_all_py`, compiled for ASCII text when the extension is built."""
    if _quote_c is not None:
        quoted: str | None = _quote_c(value)
        if quoted is not None:
            return quoted
    return _quote_all_py(value)


@functools.lru_cache(maxsize=64)
def _parsed_template(template: str) -> tuple[tuple[str, str | None], ...]:
    """``template`` cut once into (literal text, substitution code or None) pairs."""
    parts: list[tuple[str, str | None]] = []
    at = 0
    for match in _TEMPLATE_CODE.finditer(template):
        code = match.group(1)
        literal = template[at : match.start()]
        if code == "%":
            parts.append((literal + "%", None))
        else:
            parts.append((literal, code))
        at = match.end()
    parts.append((template[at:], None))
    return tuple(parts)


@functools.lru_cache(maxsize=4096)
def _quote_cached(value: str) -> str:
    return _quote_all(value)


def _fields(
    category: str | None,
    client: str | None,
    client_name: str | None,
    user: str | None,
    rule: str | None,
) -> dict[str, str]:
    """The value of each substitution code but ``%u`` (see :data:`TEMPLATE_CODES`)."""
    return {
        "a": client or "-",
        "n": client_name or client or "-",
        "i": user or "-",
        "c": category or "-",
        "t": category or "-",
        "r": rule or "-",
    }


def _cut(template: str, fields: dict[str, str]) -> list[str]:
    """The filled template cut at each ``%u`` (values that repeat are quoted once)."""
    pieces = [""]
    for literal, code in _parsed_template(template):
        pieces[-1] += literal
        if code == "u":
            pieces.append("")
        elif code is not None:
            pieces[-1] += _quote_cached(fields[code])
    return pieces


def template_pieces(template: str, *, category: str | None, rule: str | None) -> list[str]:
    """The block page of one rule cut at each ``%u``: joined by the quoted URL, the pieces
    give :func:`render_template`'s page (for a template without client or user fields)."""
    return _cut(template, _fields(category, None, None, None, rule))


def template_uses(template: str, code: str) -> bool:
    """Whether ``template`` substitutes ``code`` (``"r"``: ``%r``; see :data:`TEMPLATE_CODES`)."""
    return any(found == code for _literal, found in _parsed_template(template))


def template_is_plain(template: str) -> bool:
    """Whether the template's own text needs no escaping in a reply value (printable ASCII
    without ``"`` or ``\\``): the substituted values never do, once percent-encoded."""
    return all(
        literal.isascii() and literal.isprintable() and '"' not in literal and "\\" not in literal
        for literal, _code in _parsed_template(template)
    )


def render_template(
    template: str,
    *,
    url: str,
    category: str | None,
    client: str | None,
    client_name: str | None = None,
    user: str | None = None,
    rule: str | None = None,
) -> str:
    """Fill a block page URL; every substituted value is percent-encoded, byte by byte.

    The template is parsed once (cached); values that repeat across requests
    (category, rule, client, user) are quoted once, the URL every time.
    """
    fields = _fields(category, client, client_name, user, rule)
    return _quote_all(url).join(_cut(template, fields))
