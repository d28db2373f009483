"""Input helpers shared by the streaming subcommands.

Standard input is read as bytes and split by :func:`urlsieve._lines.split_lines`: on
``\\n`` only (a lone ``\\r``, U+2028 or U+0085 inside a line is part of it, so outputs
line up with inputs), in one pass, keeping at most one line: a line longer than
:data:`MAX_INPUT_LINE` bytes is skipped as it is read, never buffered, and given as
``None``. Bytes that are not UTF-8 are kept as ``surrogateescape`` text, which the
canonicaliser maps back to the bytes.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator, Sequence
from typing import Protocol

from urlsieve._lines import TooLong, split_lines
from urlsieve.url import MAX_URL_LENGTH

__all__ = [
    "MAX_INPUT_LINE",
    "Line",
    "input_batches",
    "is_blank",
    "input_lines",
    "line_text",
    "raw_batches",
    "stdin_batches",
    "stdin_raw_batches",
    "too_long",
]

#: The longest input line read (bytes): twice the longest URL the canonicaliser takes.
MAX_INPUT_LINE = 2 * MAX_URL_LENGTH

#: ``(line number, text)``; the text is None for a line longer than :data:`MAX_INPUT_LINE`.
Line = tuple[int, str | None]


def is_blank(text: str) -> bool:
    """Whether a line holds nothing but ASCII white space (no URL, and no error)."""
    return not text.strip(" \t\r\n\x0b\x0c")


def too_long() -> str:
    """The reason given for a line longer than :data:`MAX_INPUT_LINE`."""
    return f"line longer than {MAX_INPUT_LINE} bytes: skipped"


def line_text(raw: bytes, number: int) -> str:
    """An input line's text: a CR before its newline and a UTF-8 BOM on line 1 dropped."""
    if raw.endswith(b"\r"):
        raw = raw[:-1]
    if number == 1 and raw.startswith(b"\xef\xbb\xbf"):
        raw = raw[3:]
    return raw.decode("utf-8", "surrogateescape")


class Readable(Protocol):
    def read(self, size: int = -1, /) -> bytes: ...


def raw_batches(
    stream: Readable, chunk: int = 1 << 16
) -> Iterator[tuple[int, list[bytes | TooLong]]]:
    """The complete lines of each read of ``stream`` as bytes, with the number of the first
    (a lone line comes as soon as it ends); :func:`line_text` gives a line's text."""
    number = 1
    for batch in split_lines(getattr(stream, "read1", stream.read), MAX_INPUT_LINE, chunk):
        if batch:
            yield number, batch
            number += len(batch)


def input_batches(stream: Readable, chunk: int = 1 << 16) -> Iterator[list[Line]]:
    """The complete lines of each read of ``stream`` (a lone line comes as soon as it ends)."""
    for first, batch in raw_batches(stream, chunk):
        yield [
            (number, None if isinstance(item, TooLong) else line_text(item, number))
            for number, item in enumerate(batch, first)
        ]


def _stdin() -> Readable:
    buffer: Readable | None = getattr(sys.stdin, "buffer", None)
    if buffer is not None:
        return buffer
    # Already text (a test replaced sys.stdin): its lines, as bytes.
    return _TextAsBytes(sys.stdin)


class _TextAsBytes:
    def __init__(self, text: Iterable[str]) -> None:
        self._lines = iter(text)

    def read(self, _size: int = -1, /) -> bytes:
        return next(self._lines, "").encode("utf-8", "surrogateescape")


def stdin_batches() -> Iterator[list[Line]]:
    """:func:`input_batches` of standard input."""
    return input_batches(_stdin())


def stdin_raw_batches() -> Iterator[tuple[int, list[bytes | TooLong]]]:
    """:func:`raw_batches` of standard input."""
    return raw_batches(_stdin())


def input_lines(items: Sequence[str]) -> Iterator[Line]:
    """``(line number, text)`` of each input: the arguments, or standard input for ``-`` / none."""
    if not items or list(items) == ["-"]:
        return (line for batch in stdin_batches() for line in batch)
    return enumerate(items, 1)
