"""Path and query canonicalisation steps, on bytes.

A path step is ``bytes -> bytes``; the last step of every chain is
:func:`escape`, which turns the bytes back into the ASCII text of the
canonical URL (Safe Browsing escaping: bytes ≤ 0x20, ≥ 0x7F, ``#`` and
``%`` become ``%XX`` with upper-case hex; everything else stays literal).
"""

from __future__ import annotations

import re
from urllib.parse import unquote_to_bytes

__all__ = ["collapse_path", "escape", "unescape"]

_NEEDS_ESCAPE = re.compile(rb"[\x00-\x20\x7f-\xff#%]")
_ESCAPED = [b"%%%02X" % i for i in range(256)]


def unescape(data: bytes) -> bytes:
    """Percent-unescape repeatedly until nothing changes (``%252e`` → ``%2e`` → ``.``)."""
    while b"%" in data:
        decoded = unquote_to_bytes(data)
        if decoded == data:
            break
        data = decoded
    return data


def collapse_path(path: bytes) -> bytes:
    """Resolve ``.`` and ``..`` segments and collapse runs of ``/``; empty becomes ``/``.

    A trailing ``/``, ``/.`` or ``/..`` leaves a trailing slash, as browsers do.
    ``..`` above the root stays at the root.
    """
    if not path.startswith(b"/"):
        path = b"/" + path
    if b"/." not in path and b"//" not in path:
        return path
    segments = path.split(b"/")[1:]
    last = len(segments) - 1
    out: list[bytes] = []
    trailing = False
    for i, seg in enumerate(segments):
        if seg in (b"", b"."):
            trailing = i == last
        elif seg == b"..":
            if out:
                out.pop()
            trailing = i == last
        else:
            out.append(seg)
            trailing = False
    if not out:
        return b"/"
    return b"/" + b"/".join(out) + (b"/" if trailing else b"")


def _escape_byte(match: re.Match[bytes]) -> bytes:
    return _ESCAPED[match.group()[0]]


def escape(data: bytes) -> bytes:
    """Escape bytes ≤ 0x20, ≥ 0x7F, ``#`` and ``%`` as ``%XX``; the result is ASCII."""
    if _NEEDS_ESCAPE.search(data) is None:
        return data
    return _NEEDS_ESCAPE.sub(_escape_byte, data)
