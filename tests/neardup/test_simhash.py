"""SimHash: bounds and behaviour that near-duplicate detection relies on."""

from __future__ import annotations

import random
import statistics

import pytest
import xxhash
from hypothesis import given
from hypothesis import strategies as st

from urlsieve.neardup.simhash import EMPTY, hamming, simhash, simhash_many, tokens

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


def test_shingles_are_order_sensitive_tokens_are_not() -> None:
    assert simhash("alpha beta gamma delta") == simhash("delta gamma beta alpha")
    assert simhash("alpha beta gamma delta", shingle=2) != simhash(
        "delta gamma beta alpha", shingle=2
    )
