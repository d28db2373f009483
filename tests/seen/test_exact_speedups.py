"""The compiled insert and lookup of the exact store do what its numpy reference does."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from urlsieve.exceptions import StoreCorrupt
from urlsieve.seen import exact
from urlsieve.seen.exact import ExactStore

speedups = pytest.importorskip("urlsieve._speedups", reason="built without a C compiler")


def _keys(rng: np.random.Generator, n: int, repeats: int) -> np.ndarray:
    keys = rng.integers(0, 2**64, size=n, dtype=np.uint64)
    keys[rng.integers(0, n, size=repeats)] = keys[rng.integers(0, n, size=repeats)]
    keys[rng.integers(0, n, size=3)] = 0  # stored as 1
    return keys


def _run(
    path: Path,
    batches: list[np.ndarray],
    probe: np.ndarray,
    compiled: bool,
    monkeypatch: pytest.MonkeyPatch,
) -> tuple[list[np.ndarray], np.ndarray, int, np.ndarray]:
    with monkeypatch.context() as m:
        if not compiled:
            m.setattr(exact, "speedups", None)
        # A small table: the batches grow it several times, some in the middle of a batch.
        with ExactStore(str(path), capacity=500) as store:
            flags = [store.add_fingerprints(b).copy() for b in batches]
            found = store.contains_fingerprints(probe)
            held = np.sort(store._table[store._table != 0])
            count = len(store)
            store.verify()
    return flags, found, count, held


@pytest.mark.parametrize("seed", range(4))
def test_compiled_exact_store_matches_the_numpy_reference(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seed: int
) -> None:
    rng = np.random.default_rng(seed)
    batches = [_keys(rng, int(rng.integers(1, 4000)), 300) for _ in range(6)]
    batches.append(batches[1][:200])  # already held
    probe = np.concatenate([*batches, rng.integers(1, 2**64, size=3000, dtype=np.uint64)])
    c = _run(tmp_path / "c.exact", batches, probe, True, monkeypatch)
    p = _run(tmp_path / "p.exact", batches, probe, False, monkeypatch)
    for got, want in zip(c[0], p[0], strict=True):
        assert np.array_equal(got, want)
    assert np.array_equal(c[1], p[1])
    assert c[2] == p[2] == len(c[3])
    assert np.array_equal(c[3], p[3])  # the same keys held (their slots may differ)
    assert not c[0][-1].any() and c[1][:-3000].all() and not c[1][-3000:].all()


def test_the_first_of_repeats_is_new_and_zero_counts_as_one(tmp_path: Path) -> None:
    with ExactStore(str(tmp_path / "s.exact")) as store:
        keys = np.array([5, 0, 5, 1, 7 << 40, 0], dtype=np.uint64)
        assert store.add_fingerprints(keys).tolist() == [True, True, False, False, True, False]
        assert len(store) == 3


def test_a_full_table_is_a_store_error_not_a_hang(tmp_path: Path) -> None:
    with ExactStore(str(tmp_path / "s.exact"), capacity=10) as store:
        store._table[:] = np.arange(1, store._table.size + 1, dtype=np.uint64).reshape(
            store._table.shape
        )  # every slot taken behind the count's back, as damage leaves it
        with pytest.raises(StoreCorrupt, match="no free slot"):
            store.add_fingerprints(np.array([2**63 + 12345], dtype=np.uint64))


def test_compiled_calls_refuse_misuse() -> None:
    table = np.zeros((4, 8), dtype=np.uint64)
    keys = np.array([1, 2, 3], dtype=np.uint64)
    out = np.zeros(3, dtype=bool)
    with pytest.raises(ValueError, match="one bool a row"):
        speedups.exact_lookup(table, keys[:2], out)
    with pytest.raises(ValueError, match="whole 64-byte lines"):
        speedups.exact_insert(table.reshape(-1)[:5], keys, out)
    with pytest.raises(ValueError, match="key 1 is 0"):
        speedups.exact_insert(table, np.array([1, 0, 3], dtype=np.uint64), out)
    with pytest.raises(TypeError, match="takes 3 arguments"):
        speedups.exact_insert(table, keys)
    with pytest.raises(BufferError, match="not writable"):
        speedups.exact_insert(bytes(256), keys, out)
    assert not table.any()
    assert speedups.exact_insert(table, keys, out) == 3
    assert out.all() and np.count_nonzero(table) == 3
    assert speedups.exact_insert(table, keys[::-1].copy(), out) == 0
    assert not out.any()
