"""Seed 003's dynamic splittable Bloom filter: sizing, splits, accuracy, errors."""

from __future__ import annotations

import hashlib
import math
from pathlib import Path

import pytest

from tests.seen.test_contract import urls
from urlsieve import ConfigError, ProfileMismatch, StoreCorrupt, StoreError, StoreReadOnly
from urlsieve.seen import open_seen
from urlsieve.seen.dsbf import DSBF, DsbfStore

PROBES = 100_000


def fresh(n: int) -> list[str]:
    return [f"https://never-added.example/{i}/x" for i in range(n)]


def measured_rate(store: DsbfStore) -> float:
    return sum(store.contains_many(fresh(PROBES))) / PROBES


def test_sizing_follows_the_papers_formulas() -> None:
    tree = DSBF(capacity=100_000, error=0.01, leaf_bits=2**17, fanout=3, ratio=0.5)
    assert tree.first_rate == pytest.approx(0.005)
    assert tree.k == round(math.log2(1 / 0.005)) == 8  # formula 6
    per_leaf = 2**17 * math.log(2) ** 2 / math.log(1 / 0.005)  # formula 4
    assert tree.initial_leaves == math.ceil(100_000 / per_leaf) == 9  # formula 5
    assert tree.threshold(1) == pytest.approx(0.005)
    assert tree.threshold(3) == pytest.approx(0.00125)
    paper = DSBF(capacity=100_000, error=0.01, leaf_bits=2**17, ratio=1.0)
    assert paper.threshold(1) == paper.threshold(5) == 0.01  # ratio=1: the paper's rule


def test_false_positive_rate_at_capacity_is_within_the_bound() -> None:
    with DsbfStore(capacity=100_000, error=0.01, leaf_bits=2**17) as store:
        batch = urls(100_000, seed=3)
        store.add_many(batch)
        assert all(store.contains_many(batch))
        stats = store.stats()
        assert stats.extra["splits"] == 0  # sized by formula 5: no split before capacity
        rate = measured_rate(store)
    assert rate <= 0.01
    sigma = math.sqrt(stats.false_positive_rate / PROBES)
    assert abs(rate - stats.false_positive_rate) < 5 * sigma + 1e-4  # stats() is honest
    assert stats.expected_false_positives < 0.01 * 100_000


def test_growth_to_ten_times_capacity_splits_and_stays_within_the_bound() -> None:
    with DsbfStore(capacity=10_000, error=0.01, leaf_bits=2**14, fanout=3) as store:
        batch = urls(100_000, seed=4)
        store.add_many(batch)
        assert all(store.contains_many(batch))  # split leaves are still queried
        stats = store.stats()
        rate = measured_rate(store)
    assert stats.extra["splits"] > 0
    assert stats.extra["height"] >= 3
    assert rate <= 0.01
    assert stats.false_positive_rate <= 0.01


def test_the_papers_split_rule_compounds_past_fmax_once_leaves_split() -> None:
    # ratio=1 splits every leaf at f_max; a URL is checked against the split leaf *and*
    # a child, so the compound rate exceeds f_max: the reason for the tightening ratio.
    with DsbfStore(capacity=10_000, error=0.01, leaf_bits=2**14, ratio=1.0) as store:
        store.add_many(urls(100_000, seed=4))
        assert store.stats().false_positive_rate > 0.01
        assert measured_rate(store) > 0.01


def test_each_level_has_its_own_location_hash() -> None:
    tree = DSBF(capacity=1000, error=0.01, leaf_bits=2**12, fanout=4)
    for i in range(20_000):
        tree.add(hashlib.md5(b"%d" % i).digest())

    def below(node: int) -> int:
        kids = tree.children[node]
        return tree.count[node] + (sum(below(k) for k in kids) if kids else 0)

    # Split nodes whose children took at least 60 URLs since (a fresh split may hold one).
    split = [
        kids
        for n in range(1, len(tree.depth))
        if (kids := tree.children[n]) is not None and sum(below(k) for k in kids) >= 60
    ]
    assert len(split) >= 3
    assert any(tree.depth[kids[0]] >= 3 for kids in split)
    for kids in split:
        # With the parent's hash reused, everything it routes would land in one child.
        assert all(below(k) > 0 for k in kids), [below(k) for k in kids]


def test_bad_parameters_fail_at_once() -> None:
    with pytest.raises(ConfigError, match=r"error=2\.0"):
        open_seen("dsbf:?error=2")
    with pytest.raises(ConfigError, match="fanout=1"):
        open_seen("dsbf:?fanout=1")
    with pytest.raises(ConfigError, match=r"ratio=0.0: the tightening ratio must be in \(0, 1\]"):
        open_seen("dsbf:?ratio=0")
    with pytest.raises(ConfigError, match="unknown parameter 'k'"):
        open_seen("dsbf:?k=3")


def test_file_store_errors(tmp_path: Path) -> None:
    path = tmp_path / "s.dsbf"
    spec = f"dsbf:{path}?capacity=1000&leaf_bits=4096"
    with open_seen(spec) as store:
        store.add_many(urls(3000))
        with pytest.raises(StoreError, match="open for writing in another process"):
            open_seen(spec)
    with open_seen(f"dsbf:{path}?readonly=1") as reader:
        assert all(reader.contains_many(urls(3000)))
        with pytest.raises(StoreReadOnly):
            reader.add("http://x.example/")
    with pytest.raises(ConfigError, match="created with capacity=1000, not 5"):
        open_seen(f"dsbf:{path}?capacity=5")
    with pytest.raises(ProfileMismatch, match="'filter/1'"):
        open_seen(f"dsbf:{path}?profile=crawler")
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - 100])
    with pytest.raises(StoreCorrupt, match="checksum mismatch"):
        open_seen(spec)
    path.write_bytes(b"something else entirely")
    with pytest.raises(StoreCorrupt, match="not a urlsieve dsbf store"):
        open_seen(spec)


def test_max_height_one_is_the_papers_fixed_tree() -> None:
    tree = DSBF(capacity=100, error=0.01, leaf_bits=1024, max_height=1)
    for i in range(5000):
        tree.add(hashlib.md5(b"%d" % i).digest())
    assert tree.splits == 0
    assert tree.height() == 1
    assert tree.false_positive_rate() > 0.5  # overfull leaves, as the paper's H = 1 would be
