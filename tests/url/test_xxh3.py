"""The extension's own XXH3 (``src/urlsieve/_xxh3.h``) is the ``xxhash`` package's, bit for
bit: the snapshots' tables and the seen stores' fingerprints were written with one and are
read with the other, so a single differing value is a rule that no longer matches or a URL
seen twice. Every length 0-4,096 (each of XXH3's paths and their edges: 0, 1-3, 4-8, 9-16,
17-128, 129-240, stripes and 1,024-byte blocks), with random bytes, runs of one byte, and
whatever Hypothesis makes."""

from __future__ import annotations

import random

import pytest
import xxhash
from hypothesis import given
from hypothesis import strategies as st

from tests.needs import missing

try:
    from urlsieve import _speedups as speedups
except ImportError:
    missing("urlsieve._speedups is not built (no C compiler): no XXH3 to compare", module=True)


def _equal(data: bytes) -> None:
    assert speedups.xxh3_64(data) == xxhash.xxh3_64_intdigest(data), len(data)
    assert speedups.xxh3_128(data) == xxhash.xxh3_128_intdigest(data), len(data)


def test_every_length_to_4096_random_bytes() -> None:
    rng = random.Random(28)
    data = rng.randbytes(4096)
    for n in range(4097):
        _equal(data[:n])  # prefixes
        _equal(data[4096 - n :])  # suffixes: other bytes of the same lengths


@pytest.mark.parametrize("offset", range(1, 16))
def test_unaligned_buffers(offset: int) -> None:
    """Views that start off an 8- or 16-byte boundary, long enough for every path."""
    data = memoryview(random.Random(offset).randbytes(5000 + offset))
    for n in (0, 7, 16, 100, 200, 240, 241, 300, 1023, 1024, 1025, 2049, 4096):
        view = data[offset : offset + n]
        assert speedups.xxh3_64(view) == xxhash.xxh3_64_intdigest(view), (offset, n)
        assert speedups.xxh3_128(view) == xxhash.xxh3_128_intdigest(view), (offset, n)


@pytest.mark.parametrize("byte", [0x00, 0x01, 0x7F, 0x80, 0xFF])
def test_every_length_to_4096_one_byte_repeated(byte: int) -> None:
    for n in range(4097):
        _equal(bytes([byte]) * n)


@pytest.mark.parametrize("n", [10_000, 65_536, 65_537, 100_003, 1 << 20])
def test_long_inputs_many_blocks(n: int) -> None:
    _equal(random.Random(n).randbytes(n))


def test_buffers_other_than_bytes() -> None:
    data = random.Random(1).randbytes(300)
    assert speedups.xxh3_64(bytearray(data)) == xxhash.xxh3_64_intdigest(data)
    assert speedups.xxh3_128(memoryview(data)[1:]) == xxhash.xxh3_128_intdigest(data[1:])
    with pytest.raises(TypeError):
        speedups.xxh3_64("text")


@given(st.binary(max_size=3000))
def test_arbitrary_bytes(data: bytes) -> None:
    _equal(data)


@given(st.text(max_size=400))
def test_arbitrary_utf8_text(text: str) -> None:
    _equal(text.encode("utf-8", "surrogatepass"))
