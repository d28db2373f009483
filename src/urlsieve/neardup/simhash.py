"""SimHash (Charikar 2002) of a page's text: 64 bits that stay close when the text does.

Features are the text's distinct tokens, as in Manku, Jain & Das Sarma (WWW
2007): the text is NFKC-normalised and case-folded, split into words
(``\\w+``; a run of CJK ideographs or kana, which has no spaces, becomes its
character bigrams so that Chinese text is not one word), and each distinct
token is hashed with xxh3-64. Each output bit is the majority vote of that
bit over the features (in numpy: the hashes unpacked to a bit matrix and
summed). ``shingle=n`` makes every distinct run of ``n`` tokens one feature
instead: order-sensitive, but each edited word then changes ``n`` features,
so the same edit moves more bits.

Why distinct tokens, each counted once: counted by occurrence, the words every
page repeats (stop words, navigation) outvote the content and pull every
fingerprint towards the same bits, so unrelated pages stop being ~32 bits
apart and the index's tables fill up (measured on 600-word Zipf texts:
unrelated pages 22 bits apart with counts, 28 distinct, 32 with 2-word
shingles; one word and a date line changed: within 3 bits 97 %, 87 % and 76 %
of the time). Distinct tokens are the middle ground; ``benchmarks/neardup.py``
shows the recall and speed that follow.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable

import numpy as np
import numpy.typing as npt
import xxhash

__all__ = ["EMPTY", "hamming", "simhash", "simhash_many", "tokens"]

#: The SimHash of a text with no words.
EMPTY = 0
MAX_TEXT = 8 << 20  # characters considered; the rest of a huge page adds nothing new

_WORD = re.compile(r"\w+")
# CJK ideographs, kana, hangul syllables: scripts written without spaces.
_UNSPACED = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af]+")
_xxh64 = xxhash.xxh3_64_intdigest


def tokens(text: str) -> list[str]:
    """The words of ``text`` (NFKC, case-folded); unspaced CJK runs become character bigrams."""
    text = unicodedata.normalize("NFKC", text[:MAX_TEXT]).casefold()
    out: list[str] = []
    for word in _WORD.findall(text):
        if not _UNSPACED.search(word):
            out.append(word)
            continue
        start = 0
        for run in _UNSPACED.finditer(word):
            if run.start() > start:
                out.append(word[start : run.start()])
            chars = run.group()
            if len(chars) == 1:
                out.append(chars)
            else:
                out.extend(chars[i : i + 2] for i in range(len(chars) - 1))
            start = run.end()
        if start < len(word):
            out.append(word[start:])
    return out


def _features(words: list[str], shingle: int) -> list[int]:
    """The hashes of the distinct features (tokens, or runs of ``shingle`` tokens)."""
    if shingle == 1:
        distinct = set(words)
    elif len(words) <= shingle:
        distinct = {" ".join(words)} if words else set()
    else:
        distinct = {" ".join(words[i : i + shingle]) for i in range(len(words) - shingle + 1)}
    return [_xxh64(f.encode("utf-8", "surrogatepass")) for f in distinct]


def _vote(hashes: list[int]) -> int:
    if not hashes:
        return EMPTY
    bits = np.unpackbits(
        np.array(hashes, dtype=np.uint64).view(np.uint8).reshape(-1, 8), axis=1, bitorder="little"
    )
    ones = bits.sum(axis=0, dtype=np.int64)  # little-endian bytes, little bit order: bit i of int
    chosen = np.flatnonzero(2 * ones > len(hashes))
    return int(sum(1 << int(i) for i in chosen))


def simhash(text: str, *, shingle: int = 1) -> int:
    """The 64-bit SimHash of the text's distinct tokens (or token runs), or :data:`EMPTY`."""
    if shingle < 1:
        raise ValueError(f"shingle must be at least 1, not {shingle}")
    return _vote(_features(tokens(text), shingle))


def simhash_many(texts: Iterable[str], *, shingle: int = 1) -> npt.NDArray[np.uint64]:
    """:func:`simhash` of each text, as a uint64 array."""
    return np.array([simhash(t, shingle=shingle) for t in texts], dtype=np.uint64)


def hamming(a: int, b: int) -> int:
    """The number of bits in which two 64-bit fingerprints differ."""
    return ((a ^ b) & 0xFFFF_FFFF_FFFF_FFFF).bit_count()
