"""The compiled batch insert of the bloom store does exactly what its numpy reference does."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from urlsieve.seen import bloom
from urlsieve.seen.bloom import BloomStore

speedups = pytest.importorskip("urlsieve._speedups", reason="built without a C compiler")


def _fingerprints(rng: np.random.Generator, n: int, repeats: int) -> np.ndarray:
    fps = rng.integers(0, 2**64, size=(n, 2), dtype=np.uint64)
    # the same fingerprint again, inside the batch and across batches
    picks = rng.integers(0, n, size=repeats)
    fps[rng.integers(0, n, size=repeats)] = fps[picks]
    return fps


def _run(
    path: Path, batches: list[np.ndarray], compiled: bool, monkeypatch: pytest.MonkeyPatch
) -> tuple[list[np.ndarray], int, bytes]:
    with monkeypatch.context() as m:
        if not compiled:
            m.setattr(bloom, "speedups", None)
        # Small capacity: the batches fill layers, split at their room, and grow the file.
        with BloomStore(str(path), capacity=3000, error=0.01) as store:
            flags = [store.add_fingerprints(b).copy() for b in batches]
            count = len(store)
    return flags, count, path.read_bytes()


@pytest.mark.parametrize("seed", range(5))
def test_compiled_insert_matches_the_numpy_reference(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seed: int
) -> None:
    rng = np.random.default_rng(seed)
    batches = [_fingerprints(rng, int(rng.integers(1, 5000)), 200) for _ in range(6)]
    batches.append(batches[0][:100])  # a batch already held
    flags_c, count_c, bytes_c = _run(tmp_path / "c.bloom", batches, True, monkeypatch)
    flags_np, count_np, bytes_np = _run(tmp_path / "np.bloom", batches, False, monkeypatch)
    for got, want in zip(flags_c, flags_np, strict=True):
        assert np.array_equal(got, want)
    assert count_c == count_np
    assert bytes_c == bytes_np  # same bits, same counts, same layers
    assert not flags_c[-1].any()


@pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "numpy"])
def test_a_fingerprint_twice_in_one_batch_is_new_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, compiled: bool
) -> None:
    # [1, 3] shares h1 with [1, 2]: the repeats of [1, 2] are not adjacent when sorted by h1.
    fps = np.array([[1, 2], [3 << 40, 4], [1, 2], [1, 3], [1, 2]], dtype=np.uint64)
    monkeypatch.setattr(bloom, "speedups", speedups if compiled else None)
    with BloomStore(str(tmp_path / "s"), capacity=1000, error=0.001) as store:
        assert store.add_fingerprints(fps).tolist() == [True, True, False, True, False]
        assert len(store) == 3


def _arrays(n: int = 3) -> tuple[np.ndarray, ...]:
    bits = np.zeros((4, 8), dtype=np.uint64)
    block = np.zeros(n, dtype=np.int64)
    masks = np.ones((n, 8), dtype=np.uint64)
    h = np.arange(n, dtype=np.uint64)
    return bits, block, masks, h, h.copy(), np.zeros(n, dtype=bool)


def test_compiled_insert_refuses_mismatched_arrays() -> None:
    bits, block, masks, h1, h2, out = _arrays()
    with pytest.raises(ValueError, match="one row per URL"):
        speedups.bloom_fresh(bits, block, masks[:2], h1, h2, out)
    with pytest.raises(ValueError, match="whole 64-byte blocks"):
        speedups.bloom_set(bits.reshape(-1)[:5], block, masks, out)
    with pytest.raises(TypeError, match="expected 6 arguments"):
        speedups.bloom_fresh(bits, block, masks, out)
    block[1] = 4
    with pytest.raises(IndexError, match="block 4 out of range"):
        speedups.bloom_fresh(bits, block, masks, h1, h2, out)
    with pytest.raises(ValueError, match="not C-contiguous"):
        speedups.bloom_set(np.zeros((4, 16), dtype=np.uint64)[:, ::2], block, masks, out)
    with pytest.raises(BufferError, match="not writable"):
        speedups.bloom_set(bytes(256), block, masks, out)
