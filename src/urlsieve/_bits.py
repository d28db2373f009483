"""Bit counting over numpy words, shared by the Bloom stores and the near-duplicate index."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

__all__ = ["bit_counts", "popcount"]

U64 = npt.NDArray[np.uint64]


def bit_counts(words: U64) -> npt.NDArray[np.integer]:
    """The number of set bits of each 64-bit word, in the shape of ``words``."""
    if hasattr(np, "bitwise_count"):  # numpy 2
        counts: npt.NDArray[np.integer] = np.bitwise_count(words)
        return counts
    as_bytes = np.unpackbits(words.view(np.uint8).reshape(*words.shape, 8), axis=-1)
    summed: npt.NDArray[np.integer] = as_bytes.sum(axis=-1)
    return summed


def popcount(words: U64) -> int:
    """The number of set bits in ``words``."""
    return int(bit_counts(words).sum(dtype=np.uint64))
