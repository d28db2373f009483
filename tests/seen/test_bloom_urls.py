"""``bloom:``'s batches of URLs in one compiled pass (``bloom_urls``: canonical scan,
fingerprint, test and insert) do exactly what the fingerprint path does: the same flags,
the same bits, the same counts and layers, whichever URLs leave the fast path."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.gateway import rulegen
from tests.needs import missing
from urlsieve import InvalidURL, StoreReadOnly, open_seen
from urlsieve.fingerprint import CHUNK, fingerprint128, fingerprint_array128
from urlsieve.seen._mapped import W_DIRTY, W_SEQ
from urlsieve.seen.bloom import BloomStore

speedups = pytest.importorskip("urlsieve._speedups", reason="built without a C compiler")
if not hasattr(speedups, "bloom_urls"):
    missing("urlsieve._speedups lacks bloom_urls: a stale build (urlsieve doctor)", module=True)

# URLs on the fast path, URLs the rewrite brings to it, and URLs only Python canonicalises
# (a host with an escape or beyond ASCII, a port kept by no profile here, "%3F" ...).
OFF_THE_FAST_PATH = [
    "http://a%2eexample/x",
    "http://ü.example/",
    "http://a.example/%3F",
    "http://a.example/x\\%3Fy?q",
    "a.example:8080/x",
    "http://[::1]/",
    "http://1.2.3/",
]
URL = st.one_of(
    st.sampled_from(rulegen.random_urls(200, 7)),
    st.sampled_from(rulegen.random_urls(200, 8)),
    st.sampled_from(OFF_THE_FAST_PATH),
    st.sampled_from(['https://"www.a.example/x', "http://a.example/.well-known/", "A.EXAMPLE/"]),
    st.text(alphabet=st.sampled_from('abehpstx.:/?=&%#-_09AZ"\\ '), max_size=30),
)


def _valid(urls: list[str]) -> list[str]:
    out = []
    for url in urls:
        try:
            fingerprint128(url)
        except InvalidURL:
            continue
        out.append(url)
    return out


def _both(tmp: Path, batches: list[list[str]], capacity: int, error: float = 0.01) -> None:
    """Each batch into one store by add_many and into another by its fingerprints."""
    probe = [u for batch in batches for u in batch] + ["http://never.example/added"]
    with (
        BloomStore(str(tmp / "urls.bloom"), capacity=capacity, error=error) as by_urls,
        BloomStore(str(tmp / "fps.bloom"), capacity=capacity, error=error) as by_fps,
    ):
        for batch in batches:
            got = by_urls.add_many(batch)
            assert type(got) is list and all(type(flag) is bool for flag in got)
            assert got == by_fps.add_fingerprints(fingerprint_array128(batch)).tolist(), batch
        assert by_urls.contains_many(probe) == (
            by_fps.contains_fingerprints(fingerprint_array128(probe)).tolist()
        )
        assert len(by_urls) == len(by_fps)
    assert (tmp / "urls.bloom").read_bytes() == (tmp / "fps.bloom").read_bytes()


@settings(max_examples=150, deadline=None)
@given(batches=st.lists(st.lists(URL, max_size=60), min_size=1, max_size=6))
def test_add_many_of_urls_equals_the_fingerprint_path(
    tmp_path_factory: pytest.TempPathFactory, batches: list[list[str]]
) -> None:
    # capacity 12: batches fill the first layer, overflow it and grow the file
    _both(tmp_path_factory.mktemp("b"), [_valid(b) for b in batches], capacity=12)


def test_batches_larger_than_a_chunk_and_many_layers(tmp_path: Path) -> None:
    urls = [f"http://h{i % 977}.example/p/{i % 4000}" for i in range(2 * CHUNK + 5)]
    urls[7] = OFF_THE_FAST_PATH[0]
    # repeats, some spelt for the rewrite to bring back to the fast path
    first = [u.replace("http://h", "HTTP://H") for u in urls[:300]] + urls[:CHUNK]
    one, two = tmp_path / "one", tmp_path / "two"
    one.mkdir()
    two.mkdir()
    _both(one, [first, urls, urls[:10]], capacity=100_000)
    _both(two, [urls[:5000], urls, first], capacity=3000)  # grows while a batch goes in


def test_a_batch_larger_than_the_room_of_the_only_layer(tmp_path: Path) -> None:
    # The layer fills in the middle of the batch: what the first part sets may cover a URL
    # of the next part (a false positive easy to hit at error 0.4), as it does for the
    # fingerprint path, which tests the parts in order.
    base = [f"http://f{i}.example/" for i in range(198)]
    batch = ["http://f0.example/", "http://c0.example/", "http://c562.example/"]
    _both(tmp_path, [base, batch], capacity=200, error=0.4)


def test_a_read_only_store_reports_a_bad_url_first(tmp_path: Path) -> None:
    BloomStore(str(tmp_path / "s"), capacity=100).close()
    with open_seen(f"bloom:{tmp_path / 's'}?readonly=1") as store:
        with pytest.raises(InvalidURL):
            store.add_many(["http://", "http://a.example/"])
        with pytest.raises(StoreReadOnly):
            store.add_many(["http://a.example/"])


def test_a_repeat_in_a_batch_is_new_once_and_a_batch_is_tested_as_it_was(tmp_path: Path) -> None:
    with BloomStore(str(tmp_path / "s"), capacity=1000, error=0.001) as store:
        batch = ["http://x.example/1", "X.EXAMPLE/1", "http://x.example/2", "x.example/1"]
        assert store.add_many(batch) == [True, False, True, False]
        assert store.add_many([*batch, "http://x.example/3"]) == [False] * 4 + [True]
        assert store.contains_many(["x.example/2", "http://x.example/4"]) == [True, False]
        assert len(store) == 3


def test_a_bad_url_off_the_fast_path_adds_nothing_and_leaves_the_store_clean(
    tmp_path: Path,
) -> None:
    path = tmp_path / "s.bloom"
    with BloomStore(str(path), capacity=1000, error=0.001) as store:
        store.add("http://before.example/")
        before = path.read_bytes()
        batch = ["http://ok.example/1", OFF_THE_FAST_PATH[0], "http://", "http://ok.example/2"]
        with pytest.raises(InvalidURL):
            store.add_many(batch)
        with pytest.raises(InvalidURL):
            store.contains_many(batch)
        assert store._mv[W_DIRTY] == 0  # the lock was let go cleanly: no recovery to run
        assert store._mv[W_SEQ] % 2 == 0  # the locked section ended (lock-free adds run)
        seq = slice(W_SEQ * 8, W_SEQ * 8 + 8)  # the sections' sequence moved on, nothing else
        after = path.read_bytes()
        assert after[: seq.start] + after[seq.stop :] == before[: seq.start] + before[seq.stop :]
        assert "http://ok.example/1" not in store and len(store) == 1


def _layer(tmp_path: Path) -> tuple[BloomStore, np.ndarray, np.ndarray]:
    store = BloomStore(str(tmp_path / "s"), capacity=1000, error=0.01)
    layer = store._layers[0]
    count = store._words[layer.count_word : layer.count_word + 1]
    return store, layer.bits, count


def test_the_layer_is_changed_only_when_every_url_is_on_the_fast_path(tmp_path: Path) -> None:
    store, bits, count = _layer(tmp_path)
    t = store._layers[0].t
    urls = ["http://a.example/", "HTTP://B.example/x", OFF_THE_FAST_PATH[1], "http://a.example/"]
    h = np.zeros((4, 2), dtype=np.uint64)
    out = np.ones(4, dtype=bool)
    assert speedups.bloom_urls(urls, True, False, bits, t, h, out, count) == ([2], None)
    assert not bits.any() and count[0] == 0
    assert out.tolist() == [True, True, False, True]  # lacked; position 2 is the caller's
    want = fingerprint_array128(urls)
    assert np.array_equal(np.delete(h, 2, axis=0), np.delete(want, 2, axis=0))
    del urls[2]
    positions, flags = speedups.bloom_urls(urls, True, False, bits, t, h[:3], out[:3], count)
    assert (positions, flags) == ([], [True, True, False]) and count[0] == 2
    assert speedups.bloom_urls(urls, True, False, bits, t, h[:3], out[:3], None) == (
        [],
        [True, True, True],
    )
    assert speedups.bloom_urls([], True, False, bits, t, h[:0], out[:0], count) == ([], [])
    store.close()


def test_bloom_urls_refuses_misuse(tmp_path: Path) -> None:
    store, bits, count = _layer(tmp_path)
    fn = speedups.bloom_urls
    urls = ["http://a.example/", "http://b.example/"]
    h = np.zeros((2, 2), dtype=np.uint64)
    out = np.zeros(2, dtype=bool)
    with pytest.raises(TypeError, match="takes 8 arguments"):
        fn(urls, True, False, bits, 1, h, out)
    with pytest.raises(TypeError, match="urls must be a list"):
        fn(tuple(urls), True, False, bits, 1, h, out, count)
    with pytest.raises(ValueError, match="t is 1 or 2"):
        fn(urls, True, False, bits, 0, h, out, count)
    with pytest.raises(ValueError, match="one row a URL"):
        fn(urls, True, False, bits, 1, h[:1], out[:1], count)
    with pytest.raises(ValueError, match="h must be writable"):
        fn(urls, True, False, bits, 1, bytes(32), out, None)
    with pytest.raises(ValueError, match="aligned to 8 bytes"):
        fn(urls, True, False, bits, 1, np.zeros(33, np.uint8)[1:].view(np.uint64), out, None)
    with pytest.raises(ValueError, match="whole 64-byte lines"):
        fn(urls, True, False, bits.reshape(-1)[:9], 1, h, out, None)
    with pytest.raises(ValueError, match="count is one uint64"):
        fn(urls, True, False, bits, 1, h, out, np.zeros(2, dtype=np.uint64))
    with pytest.raises(BufferError, match="not writable"):
        fn(urls, True, False, bytes(bits.nbytes), 1, h, out, count)  # inserting: writable bits
    assert not bits.any() and count[0] == 0  # nothing was written by a refused call
    store.close()


@settings(max_examples=300, deadline=None)
@given(
    items=st.lists(
        st.one_of(st.text(max_size=40), st.binary(max_size=20), st.none(), st.integers()),
        max_size=20,
    ),
    insert=st.booleans(),
)
def test_any_items_leave_the_fast_path_or_match_the_reference(
    tmp_path_factory: pytest.TempPathFactory, items: list[object], insert: bool
) -> None:
    store, bits, count = _layer(tmp_path_factory.mktemp("f"))
    n = len(items)
    h = np.zeros((n, 2), dtype=np.uint64)
    out = np.zeros(n, dtype=bool)
    positions, flags = speedups.bloom_urls(
        items, True, False, bits, store._layers[0].t, h, out, count if insert else None
    )
    for k, item in enumerate(items):
        if k in positions:
            continue
        assert isinstance(item, str)
        value = int.from_bytes(fingerprint128(item), "big")
        assert (int(h[k, 0]), int(h[k, 1])) == (value >> 64, value & (2**64 - 1))
    assert flags is None if positions else flags == out.tolist()
    store.close()
