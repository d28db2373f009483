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
from collections.abc import Iterable, Sequence

import numpy as np
import numpy.typing as npt
import xxhash

from urlsieve._accel import speedups as _accel

__all__ = [
    "EMPTY",
    "features",
    "features_py",
    "hamming",
    "jaccard",
    "jaccard_many",
    "jaccard_py",
    "simhash",
    "simhash_features",
    "simhash_many",
    "simhash_py",
    "tokens",
]

#: The SimHash of a text with no words.
EMPTY = 0
MAX_TEXT = 8 << 20  # characters considered; the rest of a huge page adds nothing new

_WORD = re.compile(r"\w+")
# CJK ideographs, kana, hangul syllables: scripts written without spaces.
_UNSPACED = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af]+")
_xxh64 = xxhash.xxh3_64_intdigest
#: the compiled SimHash (None: pure Python; tests set it to None for the reference)
speedups = _accel if _accel is not None and hasattr(_accel, "simhash_str") else None


def _normalised(text: str) -> str:
    """What is tokenised: the first MAX_TEXT characters, NFKC-normalised and case-folded."""
    return unicodedata.normalize("NFKC", text[:MAX_TEXT]).casefold()


_FOLD_PART = 256  # characters: parts of a text that are all ASCII skip str.casefold


def _prepared(text: str) -> str:
    """:func:`_normalised` but for ASCII letters, which the compiled tokeniser lowers.

    Case folding maps each character on its own (no context) and folds an ASCII letter to
    its lower case, so a text can be folded in parts, and a part that is all ASCII
    (``isascii`` is a flag of the str) needs nothing: ``str.casefold`` costs ~6 ns a
    character, however few of them are not ASCII.
    """
    text = unicodedata.normalize("NFKC", text[:MAX_TEXT])
    if text.isascii():
        return text
    step = _FOLD_PART
    parts = (text[i : i + step] for i in range(0, len(text), step))
    return "".join(part if part.isascii() else part.casefold() for part in parts)


def tokens(text: str) -> list[str]:
    """The words of ``text`` (NFKC, case-folded); unspaced CJK runs become character bigrams."""
    text = _normalised(text)
    words: list[str] = _WORD.findall(text)
    if _UNSPACED.search(text) is None:  # no CJK run: the words are the tokens
        return words
    out: list[str] = []
    for word in words:
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


# ASCII fast path (the same tokens as the general path, tested): word bytes kept, letters
# lowered, everything else a separator; then one split.
_ASCII_WORDS = (
    bytes(
        (b | 0x20 if chr(b).isalpha() else b) if chr(b).isalnum() or b == ord("_") else ord(" ")
        for b in range(128)
    )
    + b" " * 128
)
_MUL = np.uint64(0x9E3779B97F4A7C15)  # shingles: a polynomial over the token hashes,
_C1 = np.uint64(0xFF51AFD7ED558CCD)  # then murmur3's finaliser
_C2 = np.uint64(0xC4CEB9FE1A85EC53)
_S33 = np.uint64(33)


def _token_bytes(text: str) -> list[bytes]:
    text = text[:MAX_TEXT]
    if text.isascii():
        return text.encode("ascii").translate(_ASCII_WORDS).split()
    words = tokens(text)
    # one encode for all of them (a token has no space: it is a run of \w characters)
    return " ".join(words).encode("utf-8", "surrogatepass").split(b" ") if words else []


def _features(words: list[bytes], shingle: int) -> npt.NDArray[np.uint64]:
    """The distinct feature hashes: of the tokens, or of every run of ``shingle`` tokens."""
    hashes = np.fromiter(map(_xxh64, words), dtype=np.uint64, count=len(words))
    if shingle > 1 and len(hashes) > 1:
        width = min(shingle, len(hashes))
        runs = len(hashes) - width + 1
        combined = hashes[:runs].copy()
        for i in range(1, width):
            combined *= _MUL
            combined += hashes[i : i + runs]
        combined ^= combined >> _S33
        combined *= _C1
        combined ^= combined >> _S33
        combined *= _C2
        combined ^= combined >> _S33
        hashes = combined
    return np.unique(hashes)


def _vote(features: npt.NDArray[np.uint64]) -> int:
    if not len(features):
        return EMPTY
    bits = np.unpackbits(features.view(np.uint8).reshape(-1, 8), axis=1, bitorder="little")
    ones = bits.sum(axis=0, dtype=np.int64)  # little-endian bytes, little bit order: bit i
    packed = np.packbits(2 * ones > len(features), bitorder="little")
    return int.from_bytes(packed.tobytes(), "little")


def simhash(text: str, *, shingle: int = 1) -> int:
    """The 64-bit SimHash of the text's distinct tokens (or token runs), or :data:`EMPTY`.

    Compiled (``simhash_text``: ASCII text tokenised, hashed and voted in C;
    ``simhash_str`` for the rest, normalised here and tokenised in C) when the extension is
    built; :func:`simhash_py` is the reference it is held equal to.
    """
    if shingle < 1:
        raise ValueError(f"shingle must be at least 1, not {shingle}")
    if speedups is None:
        return simhash_py(text, shingle=shingle)
    fp: int | None = speedups.simhash_text(text, shingle)
    if fp is None:  # not ASCII: NFKC and case folding are Python's
        fp = speedups.simhash_str(_prepared(text), shingle)
    return int(fp)


def simhash_py(text: str, *, shingle: int = 1) -> int:
    """:func:`simhash` in Python and numpy (the reference of the compiled path)."""
    if shingle < 1:
        raise ValueError(f"shingle must be at least 1, not {shingle}")
    return _vote(_features(_token_bytes(text), shingle))


def features(text: str, *, shingle: int = 1) -> npt.NDArray[np.uint64]:
    """The distinct feature hashes :func:`simhash` votes over (in no particular order).

    Kept beside a document's SimHash, they confirm a candidate the index returns:
    :func:`jaccard` of the two is the exact Jaccard similarity of the token sets (up to
    64-bit hash collisions), which the SimHash distance only estimates.
    """
    return simhash_features(text, shingle=shingle)[1]


def simhash_features(text: str, *, shingle: int = 1) -> tuple[int, npt.NDArray[np.uint64]]:
    """:func:`simhash` and :func:`features` of a text, tokenised once."""
    if shingle < 1:
        raise ValueError(f"shingle must be at least 1, not {shingle}")
    if speedups is None:
        found = features_py(text, shingle=shingle)
        return _vote(found), found
    both: tuple[int, bytes] | None = speedups.features_text(text, shingle)
    if both is None:  # not ASCII: normalised here
        both = speedups.features_str(_prepared(text), shingle)
    return both[0], np.frombuffer(both[1], dtype=np.uint64)


def features_py(text: str, *, shingle: int = 1) -> npt.NDArray[np.uint64]:
    """:func:`features` in Python and numpy, sorted (the reference of the compiled path)."""
    if shingle < 1:
        raise ValueError(f"shingle must be at least 1, not {shingle}")
    return _features(_token_bytes(text), shingle)


def jaccard(a: npt.NDArray[np.uint64], b: npt.NDArray[np.uint64]) -> float:
    """The Jaccard similarity of two :func:`features` arrays (1.0 for two empty ones)."""
    if speedups is not None:
        return float(speedups.nd_jaccard(a, b))
    return jaccard_py(a, b)


def jaccard_many(
    query: npt.NDArray[np.uint64], others: Sequence[npt.NDArray[np.uint64]]
) -> list[float]:
    """:func:`jaccard` of ``query`` with each of ``others`` (the candidates an index returned)."""
    if speedups is not None:
        found: list[float] = speedups.nd_jaccard_many(query, others)
        return found
    return [jaccard_py(query, other) for other in others]


def jaccard_py(a: npt.NDArray[np.uint64], b: npt.NDArray[np.uint64]) -> float:
    """:func:`jaccard` in numpy (the reference)."""
    if not len(a) and not len(b):
        return 1.0
    shared = len(np.intersect1d(a, b, assume_unique=True))
    return shared / (len(a) + len(b) - shared)


def simhash_many(texts: Iterable[str], *, shingle: int = 1) -> npt.NDArray[np.uint64]:
    """:func:`simhash` of each text, as a uint64 array."""
    return np.array([simhash(t, shingle=shingle) for t in texts], dtype=np.uint64)


def hamming(a: int, b: int) -> int:
    """The number of bits in which two 64-bit fingerprints differ."""
    return ((a ^ b) & 0xFFFF_FFFF_FFFF_FFFF).bit_count()
