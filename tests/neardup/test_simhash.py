"""SimHash: bounds and behaviour that near-duplicate detection relies on."""

from __future__ import annotations

import random
import statistics

import pytest
import xxhash
from hypothesis import example, given
from hypothesis import strategies as st

from urlsieve.neardup.index import k_for_jaccard
from urlsieve.neardup.simhash import (
    EMPTY,
    MAX_TEXT,
    hamming,
    simhash,
    simhash_many,
    tokens,
)

VOCAB = [f"w{i}x{i * 7919 % 1000}" for i in range(5000)]


def _doc(rnd: random.Random, words: int = 300) -> list[str]:
    return [rnd.choice(VOCAB) for _ in range(words)]


@given(st.text(max_size=2000))
def test_deterministic_64_bit_and_distance_bounds(text: str) -> None:
    value = simhash(text)
    assert 0 <= value < 1 << 64
    assert simhash(text) == value
    other = simhash(text + " extra words here")
    assert hamming(value, other) == hamming(other, value)
    assert 0 <= hamming(value, other) <= 64
    assert hamming(value, value) == 0


@given(st.binary(max_size=3000))
def test_any_bytes_decoded_any_way_hash(data: bytes) -> None:
    for text in (data.decode("utf-8", "surrogateescape"), data.decode("latin-1")):
        assert 0 <= simhash(text) < 1 << 64


def test_small_edits_move_few_bits_unrelated_texts_about_half() -> None:
    rnd = random.Random(7)
    edits, unrelated = [], []
    for _ in range(200):
        words = _doc(rnd)
        base = simhash(" ".join(words))
        words[rnd.randrange(len(words))] = rnd.choice(VOCAB)  # one word replaced of 300
        edits.append(hamming(base, simhash(" ".join(words))))
        unrelated.append(hamming(base, simhash(" ".join(_doc(rnd)))))
    # Measured on this corpus (distinct tokens): one-word edits median 1, max 6;
    # unrelated mean 31.5, min 21.
    assert statistics.median(edits) <= 3
    assert max(edits) <= 10
    assert 28 <= statistics.mean(unrelated) <= 36
    assert min(unrelated) >= 15


def test_case_width_and_markup_spacing_do_not_matter() -> None:
    assert simhash("Hello  WORLD, this is\na page") == simhash("hello world this is a page")
    assert simhash("ＡＢＣ ｄｅｆ ghi") == simhash("abc def ghi")  # NFKC: full-width letters
    assert simhash("") == simhash("  ,;  ") == EMPTY


def test_chinese_without_spaces_is_split_into_bigrams() -> None:
    assert tokens("新闻报道") == ["新闻", "闻报", "报道"]
    assert tokens("abc中文def 字") == ["abc", "中文", "def", "字"]
    text = "今天的新闻报道了一个重要的消息，大家都在讨论这件事情的发展。" * 3
    edited = text.replace("重要", "关键", 1)
    assert hamming(simhash(text), simhash(edited)) <= 10
    assert hamming(simhash(text), simhash("完全不同的内容，关于天气和运动的文章。" * 3)) > 10


def test_short_texts_and_shingle_size() -> None:
    assert simhash("a b c", shingle=3) == simhash("a b c", shingle=7)  # one feature: all three
    assert simhash("a a a") == xxhash.xxh3_64_intdigest(b"a")  # one token, counted thrice
    assert simhash("single") == xxhash.xxh3_64_intdigest(b"single")
    assert simhash("a b c d", shingle=1) != simhash("a b c d", shingle=2)
    with pytest.raises(ValueError):
        simhash("x", shingle=0)
    assert list(simhash_many(["a b c", ""])) == [simhash("a b c"), 0]


@given(st.text(alphabet=st.characters(max_codepoint=127), max_size=500))
def test_the_ascii_fast_path_gives_the_general_paths_tokens(text: str) -> None:
    from urlsieve.neardup.simhash import _token_bytes

    assert _token_bytes(text) == [t.encode() for t in tokens(text)]


_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af"


def _tokens_word_by_word(text: str) -> list[str]:
    """The definition of :func:`tokens`, one word at a time (what it did before it skipped
    the per-word look for texts without an unspaced run)."""
    import re
    import unicodedata

    text = unicodedata.normalize("NFKC", text[:MAX_TEXT]).casefold()
    out: list[str] = []
    for word in re.findall(r"\w+", text):
        for part in re.findall(f"[{_CJK}]+|[^{_CJK}]+", word):
            if re.fullmatch(f"[{_CJK}]+", part) and len(part) > 1:
                out.extend(part[i : i + 2] for i in range(len(part) - 1))
            else:
                out.append(part)
    return out


@given(
    st.text(
        alphabet=st.one_of(
            st.characters(), st.sampled_from("新闻报道中文가나カナ ab_1\u00e9\u00df\ufb01\u2460")
        ),
        max_size=300,
    )
)
@example("abc中文def 字 straße ﬁ ①")
def test_tokens_and_their_bytes_match_the_definition(text: str) -> None:
    from urlsieve.neardup.simhash import _token_bytes

    expected = _tokens_word_by_word(text)
    assert tokens(text) == expected
    assert _token_bytes(text) == [t.encode("utf-8", "surrogatepass") for t in expected]


def test_k_for_jaccard_follows_the_binomial_model() -> None:
    assert [k_for_jaccard(t) for t in (1.0, 0.975, 0.95, 0.89)] == [0, 4, 6, 8]
    assert k_for_jaccard(0.95, find=0.6) == 5  # the rounded mean distance (4.6 bits)
    assert all(
        k_for_jaccard(a) >= k_for_jaccard(b) for a, b in zip([0.9, 0.95], [0.95, 0.99], strict=True)
    )
    for bad in (0.0, 1.5, -1.0):
        with pytest.raises(ValueError):
            k_for_jaccard(bad)
    with pytest.raises(ValueError, match="more than 8 bits"):
        k_for_jaccard(0.8)
    with pytest.raises(ValueError):
        k_for_jaccard(0.95, find=1.0)


def test_shingles_are_order_sensitive_tokens_are_not() -> None:
    assert simhash("alpha beta gamma delta") == simhash("delta gamma beta alpha")
    assert simhash("alpha beta gamma delta", shingle=2) != simhash(
        "delta gamma beta alpha", shingle=2
    )
