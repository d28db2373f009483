"""The Bloom store keeps its promise: measured false-positive rates within the configured bound.

The URLs are deterministic, so these tests are too; the bounds hold with a
margin the sampling noise of 10⁵ probes cannot eat (σ ≈ 3·10⁻⁴ at 1 %).
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from urlsieve.seen.bloom import BloomStore, false_positive_rate, layer_size


def urls(n: int, tag: str) -> list[str]:
    return [f"https://{tag}{i % 4999}.example.net/a/{i}/b?q={i * 31}" for i in range(n)]


def test_layer_sizing_meets_the_error_and_not_much_more() -> None:
    for capacity in (1_000, 100_000, 10_000_000):
        for error in (0.05, 0.01, 1e-3, 1e-5):
            blocks, t = layer_size(capacity, error)
            assert false_positive_rate(capacity, blocks, t) <= error
            assert false_positive_rate(capacity, blocks - 1, t) > error or blocks == 1
            classic_bits = -capacity * math.log(error) / math.log(2) ** 2
            assert blocks * 512 < 1.35 * classic_bits  # the price of blocking stays small


@pytest.mark.parametrize("error", [0.01, 0.001])
def test_false_positive_rate_at_capacity(tmp_path: Path, error: float) -> None:
    capacity = 100_000
    with BloomStore(str(tmp_path / "s"), capacity=capacity, error=error) as store:
        batch = urls(capacity, "in")
        new = [f for i in range(0, capacity, 1000) for f in store.add_many(batch[i : i + 1000])]
        assert len(store.stats().extra["layers"]) == 1
        probes = urls(100_000, "out")
        measured = sum(store.contains_many(probes)) / len(probes)
        stats = store.stats()
    # One layer at ε·(1 - r) = ε/2: the bound holds, and sizing is not wasteful.
    assert measured <= error
    assert measured >= error / 4
    sigma = math.sqrt(stats.false_positive_rate / len(probes))
    assert abs(measured - stats.false_positive_rate) < 5 * sigma + 1e-5
    # Wrongly reported as seen while adding: what stats() expected, within the noise
    # (stats() counts as if one URL came at a time; in batches of 1000 that is 1 % high).
    wrongly_seen = capacity - sum(new)
    expected = stats.expected_false_positives
    assert abs(wrongly_seen - expected) < 5 * math.sqrt(expected) + 5
    assert stats.count == sum(new)


def test_growth_to_ten_times_the_capacity_stays_within_error(tmp_path: Path) -> None:
    error = 0.01
    with BloomStore(str(tmp_path / "s"), capacity=10_000, error=error) as store:
        store.add_many(urls(100_000, "in"))
        stats = store.stats()
        layers = stats.extra["layers"]
        assert [layer["capacity"] for layer in layers] == [10_000, 20_000, 40_000, 80_000]
        assert sum(layer["error"] for layer in layers) < error
        probes = urls(100_000, "out")
        measured = sum(store.contains_many(probes)) / len(probes)
    assert measured <= error
    assert stats.false_positive_rate <= error
