"""The compiled SimHash and table walk answer exactly what their pure-Python references answer.

``simhash_text``/``simhash_str``/``simhash_tokens`` (``_neardup.h``) against ``simhash_py``
(numpy), and the index's compiled tables (``nd_build``/``nd_query``, every candidate scan this
CPU has) against the dict tables of ``_Tables._lookup_py``. ``.ci/sanitize`` runs this file
under ASan/UBSan.
"""

from __future__ import annotations

import contextlib
import importlib
import random
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from urlsieve.neardup import FileIndex, MemoryIndex

speedups = pytest.importorskip("urlsieve._speedups", reason="built without a C compiler")
sh = importlib.import_module("urlsieve.neardup.simhash")
ix = importlib.import_module("urlsieve.neardup.index")


def _choices(switch: Callable[[str | None], str], names: tuple[str, ...]) -> list[str]:
    """The names ``switch`` (nd_popcount, nd_simd) accepts on this CPU, the one in use kept."""
    out = []
    before = switch(None)
    for name in names:
        try:
            switch(name)
        except ValueError:
            continue
        out.append(name)
    switch(before)
    return out


def _scans() -> list[str]:
    """The candidate scans this CPU can run."""
    return _choices(speedups.nd_popcount, ("plain", "popcnt", "avx512"))


def _cpu_flags() -> set[str]:
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return set()
    return {flag for line in text.splitlines() if line.startswith("flags") for flag in line.split()}


def test_every_candidate_scan_the_cpu_has_is_built() -> None:
    """The widest scan is compiled in and chosen where the CPU has it (after the extension
    was split into units, the VPOPCNTQ scan was quietly compiled out of the near-duplicate
    unit: its macro lived in another unit)."""
    flags = _cpu_flags()
    if "popcnt" in flags:
        assert "popcnt" in _scans()
    if {"avx512f", "avx512_vpopcntdq"} <= flags:
        assert "avx512" in _scans()
        assert speedups.nd_popcount(None) == "avx512"  # the default: the widest


@pytest.fixture(params=_scans())
def scan(request: pytest.FixtureRequest) -> Iterator[str]:
    before = speedups.nd_popcount(None)
    speedups.nd_popcount(request.param)
    try:
        yield request.param
    finally:
        speedups.nd_popcount(before)


# ------------------------------------------------------------------ SimHash


def _simd_paths() -> list[str]:
    """The SimHash paths of ASCII text this CPU can run (nd_simd)."""
    return _choices(speedups.nd_simd, ("plain", "avx512"))


@contextlib.contextmanager
def _simd(name: str) -> Iterator[None]:
    before = speedups.nd_simd(None)
    speedups.nd_simd(name)
    try:
        yield
    finally:
        speedups.nd_simd(before)


def test_every_simhash_path_the_cpu_has_is_built() -> None:
    """The AVX-512 tokeniser, hash and vote are compiled in and chosen where the CPU has
    them; a path this build or CPU lacks is refused, the one in use left as it was."""
    flags = _cpu_flags()
    if {"avx512f", "avx512bw", "avx512dq", "bmi1", "bmi2"} <= flags:
        assert speedups.nd_simd(None) == "avx512"  # the default: the widest
        assert _simd_paths() == ["plain", "avx512"]
    assert "plain" in _simd_paths()
    before = speedups.nd_simd(None)
    with pytest.raises(ValueError):
        speedups.nd_simd("sse9")
    with pytest.raises(TypeError):
        speedups.nd_simd(3)
    assert speedups.nd_simd(None) == before


def _agrees(text: str, shingle: int) -> None:
    """Every SimHash path of this CPU gives the reference's SimHash and features."""
    expected = sh.features_py(text, shingle=shingle)
    fp = sh._vote(expected)
    for name in _simd_paths():
        with _simd(name):
            assert speedups.simhash_text(text, shingle) == fp, name
            got, found = speedups.features_text(text, shingle)
            assert got == fp, name
            assert sorted(np.frombuffer(found, dtype=np.uint64).tolist()) == expected.tolist()


def test_ascii_tokens_of_every_length_at_every_place_of_a_block() -> None:
    """The AVX-512 path reads 64 bytes at a time, finds the tokens from the edges of a bitmap
    and hashes eight at a time (1-3, 4-8, 9-16 bytes in vector lanes, longer ones one by
    one): every token length 1-40 at every offset of a 64-byte block, a token across
    blocks, upper case, texts ending inside a token, batches of 64 tokens and more, and
    texts on both sides of the stack buffers (4,096 characters)."""
    rnd = random.Random(4)
    for length in range(1, 41):
        for offset in range(70):
            word = "".join(rnd.choice("abcXYZ09_") for _ in range(length))
            for text in (" " * offset + word, "-" * offset + word + ".", word + "\n" * offset):
                _agrees(text, 1)
    for size in (0, 1, 63, 64, 65, 127, 128, 4095, 4096, 4097, 9000):
        text = "".join(rnd.choice("aB9_ .") for _ in range(size))
        for shingle in (1, 2):
            _agrees(text, shingle)
    for count in (63, 64, 65, 128, 129, 2047, 2048, 2049, 5000):  # tokens: batches, stack
        _agrees(" ".join(f"w{i % 700}" for i in range(count)), 1)
    _agrees("A" * 10_000, 1)  # one token longer than the stack buffer
    _agrees(("x" * 17 + " ") * 300, 3)  # repeats of a long token, shingled


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=3000), st.integers(1, 3))
@example(bytes(range(128)) * 3, 1)
def test_any_ascii_text_on_every_path_equals_the_reference(data: bytes, shingle: int) -> None:
    """Bytes folded into ASCII (the compiled tokeniser's domain) on every path."""
    _agrees(bytes(b & 0x7F for b in data).decode("ascii"), shingle)


WORDS = st.text(alphabet="abcXYZ019_ -.,\n\tÀü中文字日本", max_size=12)


@settings(max_examples=300, deadline=None)
@given(st.lists(WORDS, max_size=80), st.integers(1, 6))
@example(["Hello", "WORLD"], 1)
@example(["a"], 3)  # fewer tokens than the shingle
@example(["中文字", "x"], 2)
def test_simhash_equals_the_reference(words: list[str], shingle: int) -> None:
    text = " ".join(words)
    assert sh.simhash(text, shingle=shingle) == sh.simhash_py(text, shingle=shingle)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=2000), st.integers(1, 4))
def test_simhash_of_any_bytes_equals_the_reference(data: bytes, shingle: int) -> None:
    for text in (data.decode("latin-1"), data.decode("utf-8", "surrogateescape"), data.hex()):
        assert sh.simhash(text, shingle=shingle) == sh.simhash_py(text, shingle=shingle)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.binary(max_size=20), max_size=300), st.integers(1, 300))
def test_simhash_tokens_equals_the_vote_over_the_features(
    tokens: list[bytes], shingle: int
) -> None:
    """Shingles wider than the text, repeated tokens, empty tokens: the rolling sum in C is
    the Horner form of numpy."""
    assert speedups.simhash_tokens(tokens, shingle) == sh._vote(sh._features(tokens, shingle))


ANY_TEXT = st.text(
    alphabet=st.one_of(
        st.characters(),  # every plane, surrogates, marks, numerics (①, Ⅻ), letters
        st.sampled_from(
            "新闻报道中文가나カナー・〆々 ab_1\u00e9\u00df\ufb01\u2460\U0001d400\ud800"
        ),
    ),
    max_size=200,
)


_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


@settings(max_examples=300, deadline=None)
@given(ANY_TEXT, st.integers(1, 4))
@example("abc中文def 字 straße ﬁ ① x\ud800y 𝐀𝐁", 1)
@example("é" + "中" * 300 + "ü" * 200, 2)  # a token longer than the stack buffer
@example("STRAßE Éa\u0301 \u212a\u017f ＡＢ ﬁ A\u0301\u0327", 1)  # folds to ASCII, combining marks
def test_the_compiled_tokens_of_any_text_equal_the_reference(text: str, shingle: int) -> None:
    """simhash_str/features_str (\\w runs and CJK bigrams in C) against the Python tokens."""
    normalised = sh._normalised(text)
    expected = sh._features(sh._token_bytes(text), shingle)
    assert speedups.simhash_str(normalised, shingle) == sh._vote(expected)
    prepared = sh._prepared(text)  # ASCII letters left for the C to lower
    assert prepared.translate(_ASCII_LOWER) == normalised
    assert speedups.simhash_str(prepared, shingle) == sh._vote(expected)
    assert speedups.simhash_str(prepared.upper(), shingle) == speedups.simhash_str(
        prepared.upper().translate(_ASCII_LOWER), shingle
    )
    fp, found = speedups.features_str(normalised, shingle)
    assert fp == sh._vote(expected)
    assert sorted(np.frombuffer(found, dtype=np.uint64).tolist()) == expected.tolist()
    assert sh.simhash(text, shingle=shingle) == sh.simhash_py(text, shingle=shingle)


def test_long_texts_many_repeats_and_the_text_cap() -> None:
    rnd = random.Random(5)
    vocab = [f"w{i}" for i in range(20_000)]
    for words in (1, 2, 255, 256, 257, 600, 5_000, 60_000):
        text = " ".join(rnd.choices(vocab, k=words))
        for shingle in (1, 2, 5):
            assert sh.simhash(text, shingle=shingle) == sh.simhash_py(text, shingle=shingle)
    text = "ab " * (sh.MAX_TEXT // 3 + 1) + "tail words beyond the cap"
    assert sh.simhash(text) == sh.simhash_py(text) == sh.simhash("ab")
    assert sh.simhash(text + "é") == sh.simhash_py(text + "é")  # not ASCII: the Python tokens


def test_the_compiled_simhash_refuses_what_the_reference_refuses() -> None:
    assert speedups.simhash_text("naïve", 1) is None  # tokenised in Python
    with pytest.raises(ValueError):
        speedups.simhash_text("x", 0)
    with pytest.raises(ValueError):
        sh.simhash("x", shingle=0)
    with pytest.raises(TypeError):
        speedups.simhash_text(b"bytes", 1)
    with pytest.raises(TypeError):
        speedups.simhash_tokens(["str"], 1)
    with pytest.raises(TypeError):
        speedups.simhash_str(b"bytes", 1)
    with pytest.raises(ValueError):
        speedups.features_str("x", 0)
    with pytest.raises(TypeError):
        speedups.simhash_str("x")


@settings(max_examples=200, deadline=None)
@given(st.lists(WORDS, max_size=80), st.lists(WORDS, max_size=80), st.integers(1, 4))
@example([], [], 1)
@example(["a b c"], [], 1)
def test_features_and_jaccard_equal_the_reference(a: list[str], b: list[str], shingle: int) -> None:
    fa, fb = sh.features(" ".join(a), shingle=shingle), sh.features(" ".join(b), shingle=shingle)
    ra, rb = (
        sh.features_py(" ".join(a), shingle=shingle),
        sh.features_py(" ".join(b), shingle=shingle),
    )
    assert sorted(fa.tolist()) == ra.tolist() and sorted(fb.tolist()) == rb.tolist()
    assert sh.jaccard(fa, fb) == sh.jaccard_py(ra, rb) == sh.jaccard(fb, fa)
    assert sh._vote(ra) == sh.simhash(" ".join(a), shingle=shingle)
    assert sh.jaccard_many(fa, [fb, fa, fb[:0]]) == [
        sh.jaccard_py(ra, rb),
        1.0,
        sh.jaccard_py(ra, rb[:0]),
    ]
    both = sh.simhash_features(" ".join(a), shingle=shingle)
    assert both[0] == sh._vote(ra) and sorted(both[1].tolist()) == ra.tolist()


def test_jaccard_is_exact_on_texts_with_known_overlap() -> None:
    a = sh.features(" ".join(f"w{i}" for i in range(3000)))  # beyond the stack's set
    b = sh.features(" ".join(f"w{i}" for i in range(1000, 5000)))
    assert sh.jaccard(a, b) == 2000 / 5000 == sh.jaccard_py(np.sort(a), np.sort(b))
    assert sh.jaccard(a, a[:0]) == 0.0 and sh.jaccard(a[:0], a[:0]) == 1.0
    with pytest.raises(ValueError):
        speedups.nd_jaccard(b"1234567", b"")
    with pytest.raises(ValueError):
        speedups.nd_jaccard_many(b"1234567", [])
    with pytest.raises(ValueError):
        speedups.nd_jaccard_many(b"", [b"", b"123"])
    with pytest.raises(TypeError):
        speedups.nd_jaccard_many(b"", [1])
    assert sh.jaccard_many(a, [b, a]) == [0.4, 1.0] and sh.jaccard_many(a[:0], []) == []


def test_jaccard_many_over_many_candidates_and_a_bad_one_among_them() -> None:
    """nd_jaccard_many holds every candidate's buffer before it reads the first (16 on the
    stack, more on the heap): the answers are the reference's, and a candidate that is not
    a buffer, or not of uint64, fails the call after the others were taken, each released."""
    rnd = random.Random(8)
    query = sh.features(" ".join(f"w{rnd.randrange(300)}" for _ in range(200)))
    others = [
        sh.features(" ".join(f"w{rnd.randrange(300)}" for _ in range(rnd.randrange(0, 250))))
        for _ in range(40)
    ]
    expected = [sh.jaccard_py(np.sort(query), np.sort(o)) for o in others]
    for count in (0, 1, 16, 17, 40):
        assert sh.jaccard_many(query, others[:count]) == expected[:count]
    held = bytearray(others[1].tobytes())  # a bytearray refuses to grow while exported
    assert speedups.nd_jaccard_many(query, [held] * 20) == [expected[1]] * 20
    for bad, error in ((object(), TypeError), (b"1234567", ValueError)):
        for at in (0, 15, 16, 30):
            with pytest.raises(error):
                speedups.nd_jaccard_many(query, [*others[:at], held, bad, *others[at:]])
    held.extend(bytes(8))  # every buffer taken was released, on success and on failure


# ------------------------------------------------------------------ the table walk


def _pair(k: int, blocks: int | None) -> tuple[MemoryIndex, MemoryIndex]:
    compiled = MemoryIndex(k=k, blocks=blocks)
    with pytest.MonkeyPatch.context() as m:
        m.setattr(ix, "speedups", None)
        reference = MemoryIndex(k=k, blocks=blocks)
    assert compiled._compiled is not None and reference._compiled is None
    return compiled, reference


def _near(rnd: random.Random, fp: int, bits: int) -> int:
    for _ in range(bits):
        fp ^= 1 << rnd.randrange(64)
    return fp


LAYOUTS = [
    (0, None),
    (1, None),
    (2, 3),
    (3, None),
    (3, 6),
    (4, None),
    (5, 7),
    (6, 8),
    (7, None),
    (8, None),
]


@pytest.mark.parametrize(("k", "blocks"), LAYOUTS)
def test_the_compiled_walk_equals_the_dict_tables(scan: str, k: int, blocks: int | None) -> None:
    """Batches added between queries: the built tables, the scanned tail, the rebuilds."""
    rnd = random.Random(k * 100 + (blocks or 0))
    compiled, reference = _pair(k, blocks)
    seeds = [rnd.getrandbits(64) for _ in range(300)]
    fps = [_near(rnd, rnd.choice(seeds), rnd.randint(0, k + 2)) for _ in range(6000)]
    fps[10:20] = [0] * 5 + [(1 << 64) - 1] * 5
    keys = [f"http://h{i % 97}.example/{i}" for i in range(len(fps))]
    start = 0
    for size in (1, 7, 300, 2500, 40, 3152):
        batch = slice(start, start + size)
        compiled.add_many(keys[batch], fps[batch])
        reference.add_many(keys[batch], fps[batch])
        start += size
        queries = [_near(rnd, rnd.choice(fps[:start]), rnd.randint(0, k + 1)) for _ in range(40)]
        queries += [rnd.getrandbits(64), 0, (1 << 64) - 1, -1]
        for distance in range(k + 1):
            for q in queries:
                assert compiled.query(q, distance) == reference.query(q, distance)
            assert compiled.query_many(queries, distance) == reference.query_many(queries, distance)


@settings(max_examples=60, deadline=None)
@given(
    st.sampled_from(LAYOUTS),
    st.lists(st.integers(0, (1 << 64) - 1), max_size=200),
    st.lists(st.integers(-(1 << 70), 1 << 70), max_size=20),
)
def test_any_fingerprints_any_queries(
    layout: tuple[int, int | None], fps: list[int], queries: list[int]
) -> None:
    k, blocks = layout
    compiled, reference = _pair(k, blocks)
    keys = [str(i % 50) for i in range(len(fps))]  # a key may come back with two fingerprints
    compiled.add_many(keys, fps)
    reference.add_many(keys, fps)
    for q in queries + fps[:10]:
        assert compiled.query(q) == reference.query(q)


@settings(max_examples=80, deadline=None)
@given(
    st.lists(st.tuples(st.text(max_size=6), st.integers(0, 63)), min_size=1, max_size=120),
    st.integers(0, (1 << 64) - 1),
)
def test_keyed_answers_sorted_as_python_sorts_them(docs: list[tuple[str, int]], seed: int) -> None:
    """nd_query with the keys: (key, distance) by distance, then key (code points), ties of
    one key with two fingerprints, keys of any text, and many answers (qsort, not a loop)."""
    rnd = random.Random(seed)
    base = rnd.getrandbits(64)
    keys = [key for key, _ in docs]
    fps = [_near(rnd, base, bits % 4) for _, bits in docs]
    compiled, reference = _pair(3, None)
    compiled.add_many(keys, fps)
    reference.add_many(keys, fps)
    for q in (base, fps[0], _near(rnd, base, 2)):
        assert compiled.query(q) == reference.query(q)


def test_keyed_query_refuses_keys_it_cannot_name() -> None:
    index = MemoryIndex(k=3)
    index.add_many(["a", "b"], [5, 5])
    built = speedups.nd_build(index._fps, 2, index.layout.fields)
    assert speedups.nd_query(built, 5, 3, index._fps, 2, ["b", "a"]) == [("a", 0), ("b", 0)]
    assert speedups.nd_query(built, 5, 3, index._fps, 2) == [(0, 0), (1, 0)]
    with pytest.raises(TypeError):
        speedups.nd_query(built, 5, 3, index._fps, 2, ("a", "b"))  # not a list
    with pytest.raises(ValueError):
        speedups.nd_query(built, 5, 3, index._fps, 2, ["a"])  # a document without a key
    with pytest.raises(ValueError):
        speedups.nd_query(built, 5, 3, index._fps, 2, ["a", b"b"])  # a key that is not str
    assert speedups.nd_query(built, 0xF << 40, 3, index._fps, 2, ["a"]) == []  # no answer


def test_a_file_index_replays_into_the_compiled_tables(tmp_path: Path) -> None:
    rnd = random.Random(9)
    fps = [rnd.getrandbits(64) for _ in range(3000)]
    keys = [f"u{i}" for i in range(len(fps))]
    with FileIndex(tmp_path / "a.nd", k=3) as writer, FileIndex(tmp_path / "a.nd", k=3) as reader:
        writer.add_many(keys[:2000], fps[:2000])
        assert reader.query(fps[5]) == [("u5", 0)]
        writer.add_many(keys[2000:], fps[2000:])
        assert reader.query(_near(rnd, fps[2999], 2))[0][0] == "u2999"  # the tail, then built
        with pytest.MonkeyPatch.context() as m:
            m.setattr(ix, "speedups", None)
            plain = FileIndex(tmp_path / "a.nd", k=3)
        with plain:
            for q in fps[::97]:
                assert reader.query(q) == plain.query(q)


def test_the_build_refuses_a_layout_it_cannot_hold() -> None:
    fps = MemoryIndex(k=3)._fps
    with pytest.raises(ValueError):
        speedups.nd_build(fps, 1, (((0, 0xFFFF, 0),),))  # n beyond the fingerprints
    with pytest.raises(ValueError):
        speedups.nd_build(fps, 0, (((0, 0xFF0, 0),),))  # a mask that is not 2**w - 1
    with pytest.raises(ValueError):
        speedups.nd_build(fps, 0, (((0, 0xFF, 60),),))  # a key wider than 64 bits
    with pytest.raises(ValueError):
        speedups.nd_build(fps, 0, (((0, 0xFF, 30),),))  # a key above its width
    with pytest.raises(ValueError):
        speedups.nd_build(fps, 0, ())
    with pytest.raises(ValueError):
        speedups.nd_build(fps, 0, ((0, 0xFFFF, 0),))  # fields that are not triples
    built = speedups.nd_build(fps, 0, (((0, 0xFFFF, 0),),))
    assert speedups.nd_query(built, 5, 3, fps, 0) == []
    with pytest.raises(ValueError):
        speedups.nd_query(built, 5, 65, fps, 0)
    with pytest.raises(ValueError):
        speedups.nd_query(built, 5, 3, fps, 1)  # beyond the fingerprints
    with pytest.raises(ValueError):
        speedups.nd_popcount("sse9")
