"""Splitting a byte stream into lines (the Squid helper's reads, the CLI's standard input):
whatever the reads' sizes, the lines of the whole stream, over-long ones reported."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from urlsieve._lines import HEAD, TooLong, split_lines


def _reference(data: bytes, max_line: int, blank_tail: bool) -> list[tuple[bool, bytes]]:
    """The lines of the whole input at once: (too long, the line)."""
    *lines, tail = data.split(b"\n")
    out = [(len(line) > max_line, line) for line in lines]
    if len(tail) > max_line:
        out.append((True, tail))
    elif tail and (blank_tail or tail.strip()):
        out.append((False, tail))
    return out


@settings(max_examples=1500, deadline=None)
@given(
    data=st.lists(
        st.sampled_from([b"a", b"bc", b"\n", b"\n\n", b" ", b"\r", b"\xff"]), max_size=40
    ).map(b"".join),
    sizes=st.lists(st.integers(1, 13), min_size=1, max_size=20),
    max_line=st.integers(0, 8),
    blank_tail=st.booleans(),
)
def test_lines_do_not_depend_on_how_the_stream_is_read(
    data: bytes, sizes: list[int], max_line: int, blank_tail: bool
) -> None:
    at = 0
    reads = iter(sizes)

    def read(_size: int) -> bytes:
        nonlocal at
        piece = data[at : at + next(reads, 5)]
        at += len(piece)
        return piece

    got: list[tuple[bool, bytes]] = []
    expected = _reference(data, max_line, blank_tail)
    for batch in split_lines(read, max_line, 1, blank_tail=blank_tail):
        for item in batch:
            if isinstance(item, TooLong):
                assert len(got) < len(expected)
                too_long, line = expected[len(got)]
                # its first bytes (those of the read that passed the cap, at least)
                assert too_long and 0 < len(item.head) <= HEAD and line.startswith(item.head)
                got.append((True, line))
            else:
                got.append((False, item))
    assert got == expected


def test_a_long_line_is_reported_once_it_passes_the_cap_and_never_kept() -> None:
    reads = iter([b"ok\nxxxx", b"xxxx", b"xxxx\nnext\n", b""])
    batches = list(split_lines(lambda _n: next(reads), 6, 4))
    assert batches == [[b"ok"], [TooLong(b"xxxx")], [b"next"]]
