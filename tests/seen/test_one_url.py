"""One URL at a time (issue 34): the compiled single-URL path equals the pure-Python
reference and the batch path.

``url_key`` (one URL's fingerprint, with the crawler's query steps) against
``xxhash`` over :func:`canonicalize`; the stores' compiled ``add``/``in``
(``exact_add_locked``, ``bloom_add_locked``: the file lock, the header checks and the
probe in one call) against the same stores with those calls switched off, and against
their batches; the lock protocol (a dirty file is left to the Python session, which
repairs it).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import xxhash
from hypothesis import example, given, settings
from hypothesis import strategies as st

from urlsieve.exceptions import InvalidURL
from urlsieve.fingerprint import (
    fingerprint64,
    fingerprint128,
    fingerprint_array64,
    fingerprint_array128,
    key_function,
)
from urlsieve.seen import bloom, exact
from urlsieve.seen._mapped import W_COUNT, W_DIRTY
from urlsieve.seen.bloom import BloomStore
from urlsieve.seen.exact import ExactStore
from urlsieve.seen.memory import MemoryStore
from urlsieve.url import CRAWLER, FILTER, Profile, canonicalize, crawler_profile

speedups = pytest.importorskip("urlsieve._speedups", reason="built without a C compiler")

PROFILES = [
    FILTER,
    CRAWLER,
    crawler_profile(sort=False, name="nosort"),
    crawler_profile(drop=(), name="nodrop"),
    crawler_profile(drop=("a", "b*", "ü"), name="custom"),
]

_QUERY = st.text(alphabet="ab=&%2F0%41 #+éutm_gclid.~\x7f", max_size=40)
_URLS = st.one_of(
    st.builds(
        lambda host, path, query: f"http://{host}/{path}?{query}",
        st.sampled_from(["example.com", "A.Example.COM", "1.2.3.4", "x.org:8080", "h.de."]),
        st.text(alphabet="ab/.%2e", max_size=12),
        _QUERY,
    ),
    st.text(max_size=60),
    st.binary(max_size=80).map(lambda b: b.decode("utf-8", "surrogateescape")),
)


def _reference(url: str, profile: Profile, bits: int) -> object:
    """xxh3 of the canonical form (the Python canonicaliser), or the InvalidURL."""
    try:
        data = canonicalize(url, profile).encode("ascii")
    except InvalidURL as exc:
        return type(exc)
    if bits == 64:
        return xxhash.xxh3_64_intdigest(data)
    value = xxhash.xxh3_128_intdigest(data)
    return (value >> 64, value & (2**64 - 1))


@settings(max_examples=400, deadline=None)
@given(url=_URLS, which=st.integers(0, len(PROFILES) - 1), bits=st.sampled_from([64, 128]))
@example(url="http://a.com/?utm_source=x", which=1, bits=64)
@example(url="http://a.com/p?b=2&&a=1&a=1&", which=1, bits=64)
@example(url="http://a.com/p?%26=1&x=%2526", which=1, bits=128)
@example(url="http://a.com/p?", which=2, bits=64)
@example(url="http://a.com/p?z&%20=y&~=1", which=3, bits=64)
def test_url_key_is_the_reference_fingerprint(url: str, which: int, bits: int) -> None:
    profile = PROFILES[which]
    key = key_function(profile, bits)
    assert key is not None
    got = key(url)
    want = _reference(url, profile, bits)
    if got is not None:  # on the compiled path: the reference's fingerprint
        assert got == want
    # the public single functions (compiled or not) and the batch agree with the reference
    single = fingerprint64 if bits == 64 else fingerprint128
    batch = fingerprint_array64 if bits == 64 else fingerprint_array128
    if want is InvalidURL:
        with pytest.raises(InvalidURL):
            single(url, profile)
        with pytest.raises(InvalidURL):
            batch([url], profile)
        return
    one = single(url, profile)
    many = batch([url, url], profile)
    if bits == 64:
        assert one == want == int(many[0]) == int(many[1])
    else:
        assert isinstance(want, tuple)
        assert one == ((want[0] << 64) | want[1]).to_bytes(16, "big")
        assert tuple(int(x) for x in many[0]) == want


_QUERIES = [
    "",
    "&",
    "&&a=1&&",
    "b=2&a=1",
    "a=1&a=1&A=1",
    "b",
    "b=",
    "bb=1&ba&b",
    "utm_=1&utm_source=x&utmz=1&gclid&gclid=1&GCLID=2",
    "%C3%BC=1&\u00fc=2&%FC=3",
    "%26=1&%3D=2&a%3Db=3",
    "x=%2526&x=%25&x=%",
    "q=a+b&q=a%20b&q=a b",
    "z&y&x&%7E&~",
    "a=1#frag&b=2",
    "k=\x7f&k=%7F&k=%80",
]


@pytest.mark.parametrize("query", _QUERIES)
@pytest.mark.parametrize("profile", PROFILES, ids=[p.name for p in PROFILES])
def test_url_key_on_query_cases(query: str, profile: Profile) -> None:
    key = key_function(profile, 64)
    assert key is not None
    url = f"http://example.com/p?{query}"
    got = key(url)
    assert got is None or got == _reference(url, profile, 64)
    if not set(query) & set("\u00fc\x7f #"):  # printable ASCII: on the compiled path
        assert got is not None


def test_the_crawler_query_is_on_the_compiled_path() -> None:
    """A crawl's URLs with a query are fingerprinted in one call, not by the Python steps."""
    key = key_function(CRAWLER, 64)
    assert key is not None
    for url in (
        "http://example.com/a?b=2&a=1",
        "https://shop.example.org/p/1?utm_source=news&id=7&gclid=x",
        "http://example.com/?",
        "http://example.com/s?q=caf%C3%A9+au+lait&page=2",
    ):
        assert key(url) is not None, url
        assert key(url) == _reference(url, CRAWLER, 64)
    assert key("http://example.com/a?utm_source=x&b=2&a=1") == key(
        "http://example.com/a?a=1&b=2"
    ), "tracking dropped, order ignored"


@pytest.mark.parametrize(
    "args",
    [
        (True, False, 32, None, "http://a.com/"),
        (True, False, 64, (True, (1,), (), True, True), "http://a.com/"),
        (True, False, 64, (True, (), ()), "http://a.com/"),
        (True, False, 64, None, b"http://a.com/"),
    ],
)
def test_url_key_refuses_bad_arguments(args: tuple[object, ...]) -> None:
    with pytest.raises((TypeError, ValueError)):
        speedups.url_key(*args)


def _urls(rng: np.random.Generator, n: int) -> list[str]:
    out = []
    for _ in range(n):
        host = f"h{rng.integers(0, 400)}.example.com"
        query = "&".join(
            f"{k}={rng.integers(0, 9)}" for k in rng.choice(["a", "b", "utm_x", "c"], size=2)
        )
        url = f"http://{host}/p/{rng.integers(0, 50)}?{query}"
        if rng.random() < 0.1:
            url = url.upper().replace("HTTP://", "http://")
        if rng.random() < 0.05:
            url = "javascript:alert(1)"
        out.append(url)
    return out


def _store(
    kind: str, path: Path, profile: Profile, locked: bool = False
) -> ExactStore | BloomStore | MemoryStore:
    if kind == "exact":  # grows
        return ExactStore(str(path / "s.exact"), profile=profile, capacity=200, locked=locked)
    if kind == "bloom":  # grows a layer or two
        return BloomStore(
            str(path / "s.bloom"), profile=profile, capacity=300, error=0.0001, locked=locked
        )
    return MemoryStore(profile=profile)


def _reference_or_raise(url: str, profile: Profile) -> int:
    return xxhash.xxh3_64_intdigest(canonicalize(url, profile).encode("ascii"))


def _one_by_one(store: ExactStore | BloomStore | MemoryStore, urls: list[str]) -> list[object]:
    out: list[object] = []
    for url in urls:
        try:
            out.append(store.add(url))
        except InvalidURL:
            out.append(InvalidURL)
    return out


def _held(store: ExactStore | BloomStore | MemoryStore, urls: list[str]) -> list[object]:
    out: list[object] = []
    for url in urls:
        try:
            out.append(url in store)
        except InvalidURL:
            out.append(InvalidURL)
    return out


@pytest.mark.parametrize("kind", ["exact", "bloom", "memory"])
@pytest.mark.parametrize("profile", [FILTER, CRAWLER], ids=["filter", "crawler"])
def test_single_adds_match_the_reference_and_the_batch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str, profile: Profile
) -> None:
    urls = _urls(np.random.default_rng(7), 1500)
    valid = [u for u in urls if not u.startswith("javascript")]
    (tmp_path / "c").mkdir()
    (tmp_path / "p").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "l").mkdir()
    with _store(kind, tmp_path / "c", profile) as store:  # lock-free adds
        compiled = _one_by_one(store, urls)
        held_c = _held(store, urls)
        count_c = len(store)
    with _store(kind, tmp_path / "l", profile, locked=True) as store:  # under the file lock
        assert _one_by_one(store, urls) == compiled
        assert _held(store, urls) == held_c
        assert len(store) == count_c
    with monkeypatch.context() as m:  # the Python reference of the single path
        m.setattr(exact, "_exact_add_locked", None)
        m.setattr(bloom, "_bloom_add_locked", None)
        with _store(kind, tmp_path / "p", profile) as store:
            store._key = None  # type: ignore[union-attr]
            if kind == "memory":
                store._key = lambda url: None  # type: ignore[union-attr]
            if kind == "bloom":
                store._fp = store._fingerprint  # type: ignore[union-attr]
            else:
                store._fp = lambda url: _reference_or_raise(url, profile)  # type: ignore[union-attr]
            reference = _one_by_one(store, urls)
            held_p = _held(store, urls)
            count_p = len(store)
    with _store(kind, tmp_path / "b", profile) as store:
        batch = store.add_many(valid[:700]) + store.add_many(valid[700:])
        held_b = store.contains_many(valid)
    assert compiled == reference
    assert held_c == held_p
    assert count_c == count_p
    assert [f for f in compiled if f is not InvalidURL] == batch
    assert held_b == [h for h, u in zip(held_c, urls, strict=True) if u in valid]
    assert all(held_c[i] is True for i, u in enumerate(urls) if u in valid)


@pytest.mark.parametrize("kind", ["exact", "bloom"])
def test_a_dirty_file_is_left_to_the_python_session(tmp_path: Path, kind: str) -> None:
    """A writer killed mid-update leaves the dirty word set: the compiled add changes
    nothing then, and the Python session repairs the file and adds."""
    with _store(kind, tmp_path, FILTER) as store:
        assert store.add("http://a.example/1")
        store._mv[W_DIRTY] = 1  # as a dead writer leaves it
        if kind == "exact":
            probe = store._probe
            assert probe is not None
            key = fingerprint64("http://a.example/2") or 1
            got = speedups.exact_add_locked(probe[0], store._fd, key, probe[1], probe[2])
            assert got == -2 and store._mv[W_COUNT] == 1
        assert store.add("http://a.example/2")
        assert store._mv[W_DIRTY] == 0
        assert not store.add("http://a.example/2")
        assert "http://a.example/2" in store and len(store) == 2
        store.verify()


def test_a_retired_exact_file_is_followed(tmp_path: Path) -> None:
    """Another handle grows the table (the file is replaced): the compiled calls of the
    first handle see the retired word and the session reopens the grown file."""
    path = str(tmp_path / "s.exact")
    with ExactStore(path, capacity=64) as a, ExactStore(path) as b:
        assert a.add("http://x.example/0")
        b.add_many([f"http://y.example/{i}" for i in range(2000)])  # grows: a's file retired
        assert "http://y.example/1999" in a
        assert a.add("http://x.example/1")
        assert not b.add("http://x.example/1")
        assert len(a) == len(b) == 2002


@pytest.mark.parametrize(
    "call",
    [
        lambda w: speedups.exact_add_locked(w, -1, 0, 1, 1),  # key 0
        lambda w: speedups.exact_add_locked(w, -1, 5, 10**6, 1),  # table past the file
        lambda w: speedups.exact_add_locked(w[:100], -1, 5, 1, 1),  # no header
        lambda w: speedups.exact_add_locked(w, -5, 5, 1, 1),  # not an fd
        lambda w: speedups.bloom_add_locked(w, -1, np.zeros((1, 5), np.int64), 1, 2),
        lambda w: speedups.bloom_add_locked(w, -1, np.array([[512, 10**6, 1, 1, 40]]), 1, 2),
        lambda w: speedups.bloom_add_locked(w, -1, np.array([[512, 1, 3, 1, 40]]), 1, 2),
        lambda w: speedups.bloom_add_locked(w, -1, np.array([[512, 1, 1, 1, 9999]]), 1, 2),
        lambda w: speedups.bloom_add_locked(w, -1, b"", 1, 2),
    ],
)
def test_the_locked_calls_refuse_what_is_not_a_store_file(call: object) -> None:
    words = np.zeros(1024, dtype=np.uint64)
    with pytest.raises(ValueError):
        call(words)  # type: ignore[operator]


@settings(max_examples=200, deadline=None)
@given(data=st.binary(min_size=0, max_size=9000), key=st.integers(1, 2**64 - 1))
def test_the_locked_calls_on_arbitrary_bytes(data: bytes, key: int) -> None:
    """Whatever the words hold, a lookup reads inside them only (sanitizer run)."""
    size = (len(data) // 64) * 64
    words = np.frombuffer(data[:size], dtype=np.uint64).copy() if size else np.zeros(0, np.uint64)
    layers = np.array([[512, max(1, size // 64 - 64), 1, 1 << 40, 40]])
    for call in (
        lambda: speedups.exact_add_locked(words, -1, key, max(1, size // 64 - 64), 1),
        lambda: speedups.bloom_add_locked(words, -1, layers, key, key),
        # the lock-free adds write (into this copy) wherever the header lets them
        lambda: speedups.exact_add_locked(words, -2, key, max(1, size // 64 - 64), 1 << 40),
        lambda: speedups.bloom_add_locked(words, -2, layers, key, key),
        lambda: speedups.store_session(words, 1),
        lambda: speedups.store_session(words, 3, 40),
    ):
        try:
            got = call()
        except ValueError:
            continue
        assert got in (-2, 0, 1)


def test_bloom_contains_fingerprint_is_the_batch(tmp_path: Path) -> None:
    rng = np.random.default_rng(5)
    fps = rng.integers(0, 2**64, size=(3000, 2), dtype=np.uint64)
    with BloomStore(str(tmp_path / "f.bloom"), capacity=800, error=0.01) as store:
        store.add_fingerprints(fps[:1500])  # two layers and more
        want = store.contains_fingerprints(fps).tolist()
        got = [store.contains_fingerprint((int(a), int(b))) for a, b in fps]
        assert got == want
        assert all(got[:1500])
        assert sum(got[1500:]) < 200  # mostly misses (a few false positives)
