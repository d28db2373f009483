"""Input helpers shared by the streaming subcommands."""

from __future__ import annotations

import io
import sys
from collections.abc import Iterable, Iterator, Sequence
from typing import TextIO

__all__ = ["input_lines", "stdin_text"]


def stdin_text() -> TextIO:
    """Standard input as UTF-8 text that never fails to decode (bad bytes survive as escapes)."""
    buffer = getattr(sys.stdin, "buffer", None)
    if buffer is None:  # already text (tests replace sys.stdin)
        return sys.stdin
    return io.TextIOWrapper(buffer, encoding="utf-8", errors="surrogateescape", newline=None)


def _strip(lines: Iterable[str]) -> Iterator[tuple[int, str]]:
    for number, line in enumerate(lines, 1):
        text = line[1:] if number == 1 and line.startswith("\ufeff") else line
        yield number, text.rstrip("\r\n")


def input_lines(items: Sequence[str]) -> Iterator[tuple[int, str]]:
    """``(line number, text)`` of each input: the arguments, or standard input for ``-`` / none."""
    if not items or list(items) == ["-"]:
        return _strip(stdin_text())
    return _strip(items)
