"""Splitting a byte stream into lines in one pass and bounded memory.

Shared by the Squid helper (:func:`urlsieve.gateway.squid.serve`) and the CLI's
streaming commands (:mod:`urlsieve.cli._io`): lines end at ``\\n`` only, each
read is scanned once (only the unfinished line is carried over), and a line
longer than the cap is reported as :class:`TooLong` as soon as it passes it, the
rest of it skipped up to its newline without being kept.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass

__all__ = ["TooLong", "fill_holes", "split_lines"]

#: How much of an over-long line :class:`TooLong` keeps (for a channel ID, a log line).
HEAD = 80


@dataclass(frozen=True, slots=True)
class TooLong:
    """A line longer than the cap, in place of its bytes; ``head``: its first bytes."""

    head: bytes


def split_lines(
    read: Callable[[int], bytes],
    max_line: int,
    chunk: int = 1 << 16,
    *,
    blank_tail: bool = True,
) -> Iterator[list[bytes | TooLong]]:
    """The lines (without ``\\n``) that each ``read(chunk)`` completes, one batch per read
    (possibly empty), one item per line; a last line without ``\\n`` comes at the end of
    input (not when it is only white space and ``blank_tail`` is false)."""
    pending = bytearray()  # the unfinished line
    skipping = False  # inside a line already reported as too long
    while data := read(chunk):
        batch: list[bytes | TooLong] = []
        start = 0
        if pending or skipping:  # the line carried over ends in this read, or goes on
            end = data.find(b"\n")
            if end < 0:
                end = len(data)
            if skipping:
                pass
            elif len(pending) + end > max_line:
                batch.append(TooLong(bytes(pending[:HEAD])))
                skipping = end == len(data)
            elif end < len(data):
                pending += data[:end]
                batch.append(bytes(pending))
            else:
                pending += data
            if end < len(data):
                pending.clear()
                skipping = False
            start = end + 1
        last = data.rfind(b"\n")
        if last >= start:  # the lines complete in this read: one split, at C speed
            lines = data[start:last].split(b"\n")
            if max(map(len, lines)) > max_line:
                batch += [TooLong(line[:HEAD]) if len(line) > max_line else line for line in lines]
            else:
                batch += lines
            start = last + 1
        if start < len(data):  # a line begins that a later read ends
            if len(data) - start > max_line:
                batch.append(TooLong(data[start : start + HEAD]))
                skipping = True
            else:
                pending += data[start:]
        yield batch
    if pending and not skipping and (blank_tail or pending.strip()):
        yield [bytes(pending)]


def fill_holes(out: bytes, holes: Sequence[tuple[int, int]], replies: Iterable[bytes]) -> bytes:
    """A compiled batch's output with the replies it left to Python put back in place:
    ``holes`` are its ``(line, offset)`` pairs, ``replies`` theirs in the same order."""
    if not holes:
        return out
    parts: list[bytes] = []
    at = 0
    for (_line, offset), reply in zip(holes, replies, strict=True):
        parts += (out[at:offset], reply)
        at = offset
    parts.append(out[at:])
    return b"".join(parts)
