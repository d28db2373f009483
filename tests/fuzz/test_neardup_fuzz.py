"""Seed 004's entry points over hostile bytes: the alias tracker, the partitioned store,
the SimHash and the near-duplicate index. A URL either goes through or raises
``InvalidURL``; nothing else escapes, and a bad URL in a batch adds nothing."""

from __future__ import annotations

import tempfile

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.fuzz.budget import FUZZ
from tests.fuzz.corpus import SEEDS
from tests.fuzz.strategies import hostile_lines
from urlsieve import InvalidURL
from urlsieve.neardup import AliasTracker, MirrorDetector, StaticResolver
from urlsieve.neardup.index import MemoryIndex
from urlsieve.neardup.simhash import simhash
from urlsieve.seen.partitioned import PartitionedStore

RESOLVER = StaticResolver(
    {"bad.org": "10.0.0.1", "www.bad.org": "10.0.0.1", "good.org": "10.0.0.2"}
)


def _text(line: bytes) -> str:
    return line.decode("utf-8", "surrogateescape")


def check_tracker(line: bytes) -> None:
    tracker = AliasTracker(RESOLVER, detector=MirrorDetector(min_pairs=1))
    tracker.see("http://bad.org/x")
    tracker.observe("http://bad.org/x", 7)
    url = _text(line)
    try:
        first = tracker.see(url)
    except InvalidURL:
        return
    assert first.verdict in ("new", "candidate", "duplicate")
    assert tracker.see(url).verdict == "duplicate"  # a URL is new once
    tracker.observe(url, simhash(url))


@FUZZ
@given(hostile_lines)
def test_tracker_over_hostile_urls(line: bytes) -> None:
    check_tracker(line)


@pytest.mark.parametrize("line", [s for _, s in SEEDS], ids=[c for c, _ in SEEDS])
def test_tracker_over_the_seed_corpus(line: bytes) -> None:
    check_tracker(line)


@FUZZ
@given(st.lists(hostile_lines, min_size=1, max_size=5))
def test_partitioned_store_over_hostile_batches(lines: list[bytes]) -> None:
    urls = [_text(b) for b in lines] + ["http://sentinel.example/"]
    with tempfile.TemporaryDirectory() as tmp, PartitionedStore(f"{tmp}/s", partitions=3) as store:
        try:
            flags = store.add_many(urls)
        except InvalidURL:
            assert len(store) == 0  # all or nothing
            return
        assert flags[-1] is True
        assert all(store.contains_many(urls))


@FUZZ
@given(st.binary(max_size=4000), st.integers(0, (1 << 64) - 1))
def test_simhash_and_index_over_hostile_text(data: bytes, fp: int) -> None:
    index = MemoryIndex(k=3)
    text = _text(data)
    value = simhash(text)
    assert 0 <= value < 1 << 64
    index.add(text[:100], value)
    index.add("other", fp)
    assert (text[:100], 0) in index.query(value)
