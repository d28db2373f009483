"""Splitting a byte stream into lines in one pass and bounded memory.

Shared by the Squid helper (:func:`urlsieve.gateway.squid.serve`) and the CLI's
streaming commands (:mod:`urlsieve.cli._io`): lines end at ``\\n`` only, each
read is scanned once (only the unfinished line is carried over), and a line
longer than the cap is reported as :class:`TooLong` as soon as it passes it, the
rest of it skipped up to its newline without being kept.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

__all__ = ["TooLong", "split_lines"]

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
        end = data.find(b"\n")
        while end >= 0:
            if skipping:
                skipping = False
            elif len(pending) + end - start > max_line:
                batch.append(TooLong(bytes(pending[:HEAD]) or data[start : start + HEAD]))
            else:
                pending += data[start:end]
                batch.append(bytes(pending))
            pending.clear()
            start = end + 1
            end = data.find(b"\n", start)
        if not skipping and start < len(data):
            if len(pending) + len(data) - start > max_line:
                batch.append(TooLong(bytes(pending[:HEAD]) or data[start : start + HEAD]))
                pending.clear()
                skipping = True
            else:
                pending += data[start:]
        yield batch
    if pending and not skipping and (blank_tail or pending.strip()):
        yield [bytes(pending)]
