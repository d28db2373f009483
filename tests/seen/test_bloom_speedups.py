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
            # held and never added, across every layer the batches grew
            probe = np.concatenate([*batches, _fingerprints(np.random.default_rng(99), 4000, 0)])
            flags.append(store.contains_fingerprints(probe))
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
    assert not flags_c[-2].any()
    assert flags_c[-1][:-4000].all() and not flags_c[-1][-4000:].all()


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


def test_compiled_calls_refuse_misuse() -> None:
    bits = np.zeros((4, 8), dtype=np.uint64)
    h = np.arange(6, dtype=np.uint64).reshape(3, 2)
    out = np.zeros(3, dtype=bool)
    count = np.zeros(1, dtype=np.uint64)
    with pytest.raises(ValueError, match="one bool a row"):
        speedups.bloom_test(bits, 1, h[:2], out)
    with pytest.raises(ValueError, match="whole 64-byte lines"):
        speedups.bloom_insert(bits.reshape(-1)[:5], 1, h, out, count)
    with pytest.raises(ValueError, match="whole 64-byte lines"):
        speedups.bloom_test(np.zeros(0, dtype=np.uint64), 1, h, out)
    with pytest.raises(ValueError, match="t is 1 or 2, not 3"):
        speedups.bloom_test(bits, 3, h, out)
    with pytest.raises(TypeError, match="takes 5 or 6 arguments"):
        speedups.bloom_insert(bits, 1, h, out)
    with pytest.raises(ValueError, match="count is one uint64"):
        speedups.bloom_insert(bits, 1, h, out, np.zeros(2, dtype=np.uint64))
    with pytest.raises(ValueError, match="not C-contiguous"):
        speedups.bloom_test(np.zeros((4, 16), dtype=np.uint64)[:, ::2], 1, h, out)
    with pytest.raises(BufferError, match="not writable"):
        speedups.bloom_insert(bytes(256), 1, h, out, count)
    with pytest.raises(BufferError, match="not writable"):
        speedups.bloom_insert(bits, 1, h, out, bytes(8))
    assert not bits.any() and not count.any()  # nothing was written by a refused call


@pytest.mark.parametrize("t", [1, 2])
def test_compiled_test_and_insert_match_the_numpy_masks(t: int) -> None:
    rng = np.random.default_rng(t)
    h = rng.integers(0, 2**64, size=(3000, 2), dtype=np.uint64)
    blocks = 37  # not a power of two: the block is (h1 >> 32) * blocks >> 32
    bits = np.zeros((blocks, 8), dtype=np.uint64)
    count = np.zeros(1, dtype=np.uint64)
    fresh = np.empty(len(h), dtype=bool)
    added = speedups.bloom_insert(bits, t, h, fresh, count)
    h1, h2 = h[:, 0].copy(), h[:, 1].copy()
    want = np.zeros_like(bits)
    for block, row in zip(
        (((h1 >> np.uint64(32)) * np.uint64(blocks)) >> np.uint64(32)).tolist(),
        bloom._masks(h1, h2, t),
        strict=True,
    ):
        want[block] |= row
    assert np.array_equal(bits, want)
    assert added == int(count[0]) == int(fresh.sum()) == len(h)  # random rows: all distinct
    seen = np.empty(len(h), dtype=bool)
    speedups.bloom_test(bits, t, h, seen)
    assert seen.all()
    other = rng.integers(0, 2**64, size=(3000, 2), dtype=np.uint64)
    speedups.bloom_test(bits, t, other, seen)
    layer = bloom._Layer(0, 0, blocks, t, 1, 0.1, bits)
    reference = bloom._covers(
        bits.take(layer.block_of(other[:, 0].copy()), axis=0),
        bloom._masks(other[:, 0].copy(), other[:, 1].copy(), t),
    )
    assert np.array_equal(seen, reference) and not seen.all()
