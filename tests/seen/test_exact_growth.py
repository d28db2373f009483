"""The exact store's growth (issue 34): built in memory and written once, or in the new
file's mapping for a big table; compiled or numpy; the grown file holds every key, in a
table a fresh handle reads and verifies."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest

from urlsieve.seen import exact
from urlsieve.seen.exact import FAST_GROWTH, GROWTH, ExactStore


@pytest.mark.parametrize("in_memory", [True, False], ids=["in-memory", "mapped"])
@pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "numpy"])
@pytest.mark.parametrize("small", [True, False], ids=["4x-small", "2x"])
def test_growth_keeps_every_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, in_memory: bool, compiled: bool, small: bool
) -> None:
    if compiled and exact.speedups is None:
        pytest.skip("built without a C compiler")
    if not small:  # every table grows by 2×
        monkeypatch.setattr(exact, "FAST_GROWTH_BELOW", 0)
    if not in_memory:
        monkeypatch.setattr(exact, "GROW_IN_MEMORY", 0)
    if not compiled:
        monkeypatch.setattr(exact, "speedups", None)
    keys = np.random.default_rng(3).integers(1, 2**64, size=20_000, dtype=np.uint64)
    path = str(tmp_path / "g.exact")
    with ExactStore(path, capacity=100) as store:
        sizes = [store.stats().extra["slots"]]
        for part in np.array_split(keys, 40):
            assert store.add_fingerprints(part).all()
            sizes.append(store.stats().extra["slots"])
        for key in keys[:50]:  # one at a time, after the growths
            assert not store.add_fingerprint(int(key))
    grown = sorted(set(sizes))
    assert len(grown) >= (4 if small else 5)
    factor = FAST_GROWTH if small else GROWTH  # these tables are all under 8 MiB
    assert all(factor * 1.01 >= b / a >= factor * 0.99 for a, b in itertools.pairwise(grown))
    with ExactStore(path) as again:  # a fresh handle: the header and table as written
        again.verify()
        assert len(again) == len(keys)
        assert again.contains_fingerprints(keys).all()
        held = np.sort(again._table[again._table != 0])
        assert np.array_equal(held, np.sort(keys))
        assert not list(tmp_path.glob("*.tmp"))
