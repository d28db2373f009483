"""The small list files a policy names, read as squidGuard 1.6 reads them: ``iplist`` and
``userlist``; shared by the squidGuard.conf reader and the TOML reader.

squidGuard's own readers (``sgSourceIpList`` and ``sgSourceUserList`` in its ``sg.y``)
define the grammar an administrator's files were written for, and it is followed here:

- the file is read in ``fgets`` pieces of at most 4,095 bytes (a longer line goes on as
  the next piece); a piece starting with ``#`` is skipped; the ``\\n`` ending it and a
  ``\\r`` before that are removed;
- entries are separated by spaces, tabs and commas, several on a line; everything from
  the first ``#`` of the line on is a comment (a token that starts at or after it ends
  the line; ``name#x`` before it is one token);
- **iplist**: each token is cut at its first character outside ``0-9 . / -``; a token
  with none of them first ends the line (``host 10.0.0.1`` gives nothing). An address
  may have fewer than four parts (``10.1`` is ``10.1.0.0``), a trailing dot and leading
  zeros (decimal). ``A/N`` is a network whose address is masked (``10.0.1.5/24`` is
  ``10.0.1.0/24``; ``A/`` is ``/0``, every address); ``A/M.M.M.M`` a netmask, *not*
  applied to the address (``10.0.5.1/255.255.255.0`` matches no client; non-contiguous
  masks work); ``A-B`` a range, both ends included;
- **userlist**: when the line's first token holds a ``:``, the text before it is the
  user (leading blanks included: `` bob:x`` is the user `` bob``) and the rest of the line
  is ignored; otherwise every token is a user. Users are compared without case.

Where squidGuard stops (a bad address or prefix, a range ending before it starts: it
goes into "emergency mode" and passes every request) or crashes (a line of blanks only:
it dereferences a null token), urlsieve skips the entry or line and says so
(:attr:`ListRead.skipped`, ``file:line: reason``); the rest of the file loads. A token
with a ``:`` in an iplist is read as an IPv6 address, network or range (squidGuard has
no IPv6 there); each such reading is a note (:attr:`ListRead.notes`).
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterator
from dataclasses import dataclass, field

from urlsieve.policy.model import PolicyError

__all__ = [
    "IPV6_DEVIATION",
    "ListRead",
    "add_address",
    "read_ip_statement",
    "read_iplist",
    "read_userlist",
]

#: The deviation note of an IPv6 entry in an iplist.
IPV6_DEVIATION = (
    "is read as IPv6 (deviation: squidGuard reads no IPv6 in an iplist; it stops at such "
    "an entry or ignores the rest of the line)"
)

#: squidGuard's ``MAX_BUF``: ``fgets`` reads at most one byte less.
_PIECE = 4095
_SEPARATORS = b" \t,"
_IP_CHARS = b".0123456789/-"
_FULL = 0xFFFFFFFF
_NO_ENTRY = "a line of blanks or commas only: skipped (squidGuard 1.6 crashes on it)"


@dataclass
class ListRead:
    """What a list file gave: entries, and every line or entry skipped or read unusually."""

    path: str
    #: ``(family, first, last)`` intervals (iplist).
    addresses: list[tuple[int, int, int]] = field(default_factory=list)
    #: IPv4 ``(net, mask)`` pairs with a non-contiguous mask (iplist).
    masked: list[tuple[int, int]] = field(default_factory=list)
    users: set[str] = field(default_factory=set)
    #: ``file:line: reason`` for each entry or line not loaded.
    skipped: list[str] = field(default_factory=list)
    #: ``file:line: text`` for each entry read as squidGuard reads it, surprisingly.
    notes: list[str] = field(default_factory=list)


def _pieces(path: str) -> Iterator[tuple[int, bytes]]:
    """``(line number, piece)`` as squidGuard's ``fgets`` loop sees them, newline removed."""
    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except OSError as exc:
        raise PolicyError(f"cannot read ({exc.strerror or exc})", path) from None
    number = 1
    start = 0
    size = len(data)
    while start < size:
        end = data.find(b"\n", start, start + _PIECE)
        if end < 0:  # no newline within the piece: a piece of a long line, or the last
            stop = min(start + _PIECE, size)
            yield number, data[start:stop]
            start = stop
            continue
        piece = data[start:end]
        # An empty line keeps its newline in squidGuard (it strips only after a character):
        # its one token, "\n", gives nothing in either reader.
        if piece:
            yield number, piece[:-1] if piece.endswith(b"\r") else piece
        number += 1
        start = end + 1


def _tokens(piece: bytes) -> Iterator[tuple[int, bytes]]:
    """``(offset, token)`` separated by spaces, tabs and commas (``strtok``)."""
    at = 0
    size = len(piece)
    while at < size:
        while at < size and piece[at] in _SEPARATORS:
            at += 1
        if at >= size:
            return
        end = at
        while end < size and piece[end] not in _SEPARATORS:
            end += 1
        yield at, piece[at:end]
        at = end


def _text(raw: bytes) -> str:
    return raw.decode("utf-8", "surrogateescape")


def _dotted(text: bytes) -> int | None:
    """squidGuard's ``sgConvDot``: up to four decimal parts, missing ones 0; None if bad."""
    if not text:
        return 0  # squidGuard reads an empty address as 0.0.0.0
    if text.endswith(b"."):
        text = text[:-1]  # a trailing dot
    value = 0
    shift = 24
    for part in text.split(b"."):
        if not part.isdigit() or shift < 0:
            return None
        octet = int(part)
        if octet > 255:
            return None
        value |= octet << shift
        shift -= 8
    return value


def _contiguous(mask: int) -> bool:
    inverted = ~mask & _FULL
    return inverted & (inverted + 1) == 0


def sg_address(token: bytes) -> tuple[str, tuple[int, int]] | str:
    """One iplist/``ip`` entry, already cut to ``0-9 . / -``, as squidGuard reads it:
    ``("range", (first, last))``, ``("masked", (net, mask))`` or ``("none", …)`` (a
    netmask entry no address matches), or the reason it cannot be read."""
    if b"/" in token:
        head, _, tail = token.partition(b"/")
        net = _dotted(head)
        if net is None:
            return f"{_text(token)!r}: not an address"
        if b"." not in tail:  # a prefix length: atoi() of what follows the slash
            sign = tail[:1] == b"-"
            number = tail[1:] if sign else tail
            digits = number[: len(number) - len(number.lstrip(b"0123456789"))]
            prefix = int(digits) if digits else 0
            if prefix > 32 or (sign and prefix):
                return f"{_text(token)!r}: prefix /{'-' if sign else ''}{prefix} is not 0-32"
            bits = _FULL ^ (_FULL >> prefix)
            return "range", (net & bits, (net & bits) | (~bits & _FULL))
        mask = _dotted(tail)
        if mask is None:
            return f"{_text(token)!r}: not a netmask"
        if not _contiguous(mask):
            return "masked", (net, mask)
        if net & ~mask & _FULL:
            return "none", (net, mask)
        return "range", (net, net | (~mask & _FULL))
    if b"-" in token:
        head, _, tail = token.partition(b"-")
        low, high = _dotted(head), _dotted(tail)
        if low is None or high is None:
            return f"{_text(token)!r}: not an address range"
        if high < low:
            return f"{_text(token)!r}: the range ends before it starts"
        return "range", (low, high)
    address = _dotted(token)
    if address is None:
        return f"{_text(token)!r}: not an address"
    return "range", (address, address)


def _ipv6(token: str) -> tuple[int, int, int] | None:
    try:
        if "-" in token:
            low_text, _, high_text = token.partition("-")
            low = ipaddress.ip_address(low_text)
            high = ipaddress.ip_address(high_text)
            if low.version != high.version or int(high) < int(low):
                return None
            return low.version, int(low), int(high)
        network = ipaddress.ip_network(token, strict=False)
    except ValueError:
        return None
    return network.version, int(network.network_address), int(network.broadcast_address)


def add_address(read: ListRead, where: str, token: bytes) -> None:
    """One ``ip``/iplist token, already cut, into ``read`` (skipped or noted as it goes)."""
    entry = sg_address(token)
    if isinstance(entry, str):
        read.skipped.append(
            f"{where}: {entry}: entry skipped (squidGuard stops here and passes every request)"
        )
        return
    kind, (a, b) = entry
    if kind == "range":
        read.addresses.append((4, a, b))
    elif kind == "masked":
        read.masked.append((a, b))
    else:
        read.notes.append(
            f"{where}: {_text(token)!r}: the address has bits outside the netmask, so no "
            "client matches it (as in squidGuard, which does not apply a dotted netmask)"
        )


def read_iplist(path: str) -> ListRead:
    """An iplist file's entries, as squidGuard reads it (see the module's docstring)."""
    read = ListRead(path)
    for number, piece in _pieces(path):
        where = f"{path}:{number}"
        if piece.startswith(b"#"):
            continue
        comment = piece.find(b"#")
        tokens = list(_tokens(piece))
        if not tokens:
            read.skipped.append(f"{where}: {_NO_ENTRY}")
            continue
        for offset, token in tokens:
            if 0 <= comment <= offset:
                break
            v6 = _ipv6(_text(token.split(b"#", 1)[0])) if b":" in token else None
            if v6 is not None:  # urlsieve's reading: squidGuard has no IPv6 here
                read.addresses.append(v6)
                read.notes.append(f"{where}: {_text(token)!r} {IPV6_DEVIATION}")
                continue
            cut = len(token) - len(token.lstrip(_IP_CHARS))
            if cut == 0:
                read.notes.append(
                    f"{where}: {_text(token)!r} is not an address: it and the rest of the "
                    "line are ignored (as squidGuard does)"
                )
                break
            add_address(read, where, token[:cut])
    return read


def read_userlist(path: str) -> ListRead:
    """A userlist file's user names, lower-cased, as squidGuard reads it (see the module's
    docstring)."""
    read = ListRead(path)
    for number, piece in _pieces(path):
        where = f"{path}:{number}"
        if piece.startswith(b"#"):
            continue
        tokens = list(_tokens(piece))
        if not tokens:
            read.skipped.append(f"{where}: {_NO_ENTRY}")
            continue
        first_offset, first = tokens[0]
        if b":" in first:
            user = piece[: first_offset + first.index(b":")]
            if user != user.lstrip(_SEPARATORS):
                read.notes.append(
                    f"{where}: the user {_text(user)!r} keeps the blanks before it "
                    "(as squidGuard reads 'user:comment' lines): no client name matches it"
                )
            read.users.add(_text(user).lower())
            continue
        comment = piece.find(b"#")
        for offset, token in tokens:
            if 0 <= comment <= offset:
                break
            if b"#" in token:
                read.notes.append(
                    f"{where}: {_text(token)!r} is one user name (squidGuard starts a "
                    "comment only at a '#' after a blank)"
                )
            read.users.add(_text(token).lower())
    return read


#: An address of squidGuard.conf's lexer (four parts of one to three digits), with what
#: may follow it: ``/N``, ``/M.M.M.M`` or ``- B`` (blanks allowed between).
_CONF_IP = r"\d{1,3}(?:\.\d{1,3}){3}"
_CONF_ENTRY = re.compile(
    rf"({_CONF_IP})(?:\s*(/{_CONF_IP}|/\d+)(?![\d.])|\s*-\s*({_CONF_IP}))?(?![\d.])"
)


def _skip_separators(text: str, at: int) -> int:
    while at < len(text) and (text[at] == "," or text[at].isspace()):
        at += 1
    return at


def read_ip_statement(where: str, text: str) -> ListRead:
    """The entries of an ``ip`` statement of squidGuard.conf (its lexer's addresses, networks
    and ranges, separated by blanks and commas); ``where`` is its ``file:line``."""
    read = ListRead(where)
    at = _skip_separators(text, 0)
    while at < len(text):
        m = _CONF_ENTRY.match(text, at)
        if m is not None:
            address, suffix, high = m.groups()
            token = address + (suffix or "") + (f"-{high}" if high else "")
            add_address(read, where, token.encode())
            end = m.end()
            if suffix and text[end : end + 1] == ",":
                read.notes.append(
                    f"{where}: {token + ','!r}: squidGuard 1.6 cannot read a comma right after "
                    "a network (a syntax error: it passes every request); urlsieve reads the "
                    "network (deviation: write a blank before the comma)"
                )
        else:
            end = at + 1
            while end < len(text) and not (text[end] == "," or text[end].isspace()):
                end += 1
            word = text[at:end]
            v6 = _ipv6(word) if ":" in word else None
            if v6 is not None:
                read.addresses.append(v6)
                read.notes.append(f"{where}: {word!r} {IPV6_DEVIATION}")
            else:
                read.skipped.append(
                    f"{where}: {word!r}: not an address, network or range: entry skipped "
                    "(squidGuard stops at it and passes every request)"
                )
        at = _skip_separators(text, end)
    return read
