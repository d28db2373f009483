"""Path and query canonicalisation steps, on bytes.

A path step is ``bytes -> bytes``; the last step of every chain is
:func:`escape`, which turns the bytes back into the ASCII text of the
canonical URL (Safe Browsing escaping: bytes ≤ 0x20, ≥ 0x7F, ``#`` and
``%`` become ``%XX`` with upper-case hex; everything else stays literal).

Every step is linear in the length of its input.
"""

from __future__ import annotations

import re
from urllib.parse import unquote_to_bytes

__all__ = ["collapse_path", "escape", "shorten", "to_bytes", "unescape"]

_NEEDS_ESCAPE = re.compile(rb"[\x00-\x20\x7f-\xff#%]")
_ESCAPED = [b"%%%02X" % i for i in range(256)]
# "%" and two hex digits: what one pass of percent-unescaping replaces.
_ESCAPE_SEQUENCE = re.compile(rb"%[0-9A-Fa-f]{2}")
_HEX_VALUE = {byte: int(chr(byte), 16) for byte in b"0123456789ABCDEFabcdef"}
_PERCENT = 0x25
_SLASHES = re.compile(rb"//+")
# Surrogates that ``surrogateescape`` never writes (it writes U+DC80-U+DCFF for bytes 0x80-0xFF).
_LONE_SURROGATES = re.compile("([\ud800-\udc7f\udd00-\udfff]+)")
_SHOWN = 60


def to_bytes(text: str) -> bytes:
    """The bytes of URL text: UTF-8, and U+DC80-U+DCFF back to the bytes 0x80-0xFF they stand for.

    Text decoded with ``surrogateescape`` (as :func:`urlsieve.canonicalize`
    decodes ``bytes``) gets its original bytes back, so ``"\\udcff"`` and
    ``%FF`` are one byte. Any other lone surrogate in a ``str`` is written as
    its three UTF-8-style bytes (``"\\ud800"`` is ``%ED%A0%80``), what the
    bytes ``ED A0 80`` would give.
    """
    try:
        return text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        pieces = _LONE_SURROGATES.split(text)
        # split() with a group: the lone surrogates are at the odd indexes
        return b"".join(
            piece.encode("utf-8", "surrogatepass" if i % 2 else "surrogateescape")
            for i, piece in enumerate(pieces)
        )


def shorten(text: str | bytes) -> str:
    """``text`` cut to a length an error message can show, saying how long it was."""
    if len(text) <= _SHOWN:
        return text.decode("utf-8", "backslashreplace") if isinstance(text, bytes) else text
    if isinstance(text, bytes):
        head = text[:_SHOWN].decode("utf-8", "backslashreplace")
        return f"{head}… ({len(text)} bytes)"
    return f"{text[:_SHOWN]}… ({len(text)} characters)"


def _push(out: bytearray, byte: int) -> None:
    """Append ``byte`` and unescape every ``%XX`` this completes at the end of ``out``.

    ``out`` holds no ``%XX`` before the call and none after it: a new one can
    only end at the last byte, and unescaping it makes a new last byte.
    """
    out.append(byte)
    while len(out) >= 3 and out[-3] == _PERCENT:
        high, low = _HEX_VALUE.get(out[-2]), _HEX_VALUE.get(out[-1])
        if high is None or low is None:
            return
        del out[-3:]
        out.append(high << 4 | low)


def _unescape_fully(data: bytes) -> bytes:
    """The bytes repeated ``%XX`` unescaping ends with, in one left-to-right pass.

    Two ``%XX`` never overlap (``%`` is not a hex digit), so every order of
    unescaping reaches the same result; this one unescapes each sequence as
    soon as it is complete. Bytes between escapes are copied in bulk unless a
    ``%`` in the last two output bytes may still combine with them.
    """
    out = bytearray()
    at, end = 0, len(data)
    while at < end:
        if _PERCENT in out[-2:]:
            _push(out, data[at])
            at += 1
            continue
        percent = data.find(b"%", at)
        if percent < 0:
            out += data[at:]
            break
        out += data[at:percent]
        out.append(_PERCENT)
        at = percent + 1
    return bytes(out)


def unescape(data: bytes) -> bytes:
    """Percent-unescape until nothing changes (``%252e`` → ``%2e`` → ``.``), in linear time.

    The result is what applying ``unquote_to_bytes`` until it changes nothing
    gives, without a pass per level of nesting.
    """
    if b"%" not in data:
        return data
    once = unquote_to_bytes(data)
    if _ESCAPE_SEQUENCE.search(once) is None:
        return once
    return _unescape_fully(once)


def collapse_path(path: bytes) -> bytes:
    """Resolve ``.`` and ``..`` segments, then collapse runs of ``/``; empty becomes ``/``.

    Empty segments take part in dot resolution, as in browsers and RFC 3986
    (``/a//../b`` is ``/a/b``): collapsing first would let ``/ads//../x``
    become ``/x``. A trailing ``/``, ``/.`` or ``/..`` leaves a trailing
    slash. ``..`` above the root stays at the root.
    """
    if not path.startswith(b"/"):
        path = b"/" + path
    if b"/." in path:
        path = _remove_dot_segments(path)
    if b"//" in path:
        path = _SLASHES.sub(b"/", path)
    return path


def _remove_dot_segments(path: bytes) -> bytes:
    segments = path.split(b"/")[1:]
    out: list[bytes] = []
    for seg in segments:
        if seg == b"..":
            if out:
                out.pop()
        elif seg != b".":
            out.append(seg)
    trailing = segments[-1] in (b".", b"..")
    return b"/" + b"/".join(out) + (b"/" if trailing and out else b"")


def _escape_byte(match: re.Match[bytes]) -> bytes:
    return _ESCAPED[match.group()[0]]


def escape(data: bytes) -> bytes:
    """Escape bytes ≤ 0x20, ≥ 0x7F, ``#`` and ``%`` as ``%XX``; the result is ASCII."""
    if _NEEDS_ESCAPE.search(data) is None:
        return data
    return _NEEDS_ESCAPE.sub(_escape_byte, data)
