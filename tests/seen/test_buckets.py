"""Seed 001's improved hash table, its chained rival, and the bucket store on top."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from tests.seen.test_contract import urls
from urlsieve import ConfigError, ProfileMismatch, StoreCorrupt, StoreError, StoreReadOnly
from urlsieve.seen import open_seen
from urlsieve.seen.buckets import ChainedHashTable, ImprovedHashTable, md5_digest


def digest(slot: int, tag: int, bucket: int = 0) -> bytes:
    """A digest landing in ``bucket`` (of 1) at bitmap slot ``slot`` (w = 4), told apart by tag."""
    return bucket.to_bytes(4, "big") + tag.to_bytes(4, "big") + (8 + slot).to_bytes(8, "big")


def test_insert_and_lookup_follow_the_paper_step_by_step() -> None:
    table = ImprovedHashTable(buckets=1, width=4, slots=4, growth=2.0)
    a, b, c, d, e = (digest(s, t) for s, t in [(1, 1), (1, 2), (3, 3), (3, 4), (0, 5)])
    assert table.add(a) is True  # bit 1 clear: written at slot 1, no comparison
    assert table.comparisons == 0
    assert table.add(b) is True  # bit 1 set: scan from slot 1, slot 2 is free
    assert table.comparisons == 2  # compared with a, then read the empty slot 2
    assert table.add(c) is True  # bit 3 clear
    assert table.add(d) is True  # bit 3 set, slot 3 is the last: grow 4 -> 8, write at 4
    assert table.growths == 1
    assert table.longest_array() == 8
    assert table.add(e) is True
    for key in (a, b, c, d, e):
        assert key in table
        assert table.add(key) is False
    before = table.comparisons
    assert digest(2, 9) not in table  # bit 2 set (b sits at slot 2): b, c, d, then empty 5
    assert table.comparisons == before + 4


def test_a_miss_on_a_clear_bit_costs_no_comparison() -> None:
    table = ImprovedHashTable(buckets=1, width=4, slots=4)
    table.add(digest(0, 1))
    assert digest(2, 2) not in table
    assert table.comparisons == 0
    assert table.bit_tests == 2


def test_both_tables_agree_with_a_set() -> None:
    rnd = random.Random(1)
    keys = [rnd.randbytes(16) for _ in range(5000)]
    improved = ImprovedHashTable(buckets=37, width=8, slots=8, growth=1.5)
    chained = ChainedHashTable(buckets=37)
    model: set[bytes] = set()
    for key in keys + keys[:1000]:
        new = key not in model
        model.add(key)
        assert improved.add(key) is new
        assert chained.add(key) is new
    others = [rnd.randbytes(16) for _ in range(2000)]
    assert all(k in improved and k in chained for k in keys)
    assert not any(k in improved or k in chained for k in others)
    assert len(improved) == len(chained) == len(model)


def test_paper_parameters_are_validated() -> None:
    with pytest.raises(ConfigError, match="w <= p"):
        ImprovedHashTable(width=64, slots=32)
    with pytest.raises(ConfigError, match="must be > 1"):
        ImprovedHashTable(growth=1.0)
    with pytest.raises(ConfigError, match="at least one bucket"):
        ChainedHashTable(buckets=0)
    with pytest.raises(ConfigError, match="not a valid float"):
        open_seen("buckets:?growth=fast")


def test_key_is_the_md5_of_the_canonical_url() -> None:
    import hashlib

    assert md5_digest("HTTP://Example.COM") == hashlib.md5(b"http://example.com/").digest()


def test_file_store_reopens_and_refuses_other_parameters_and_profiles(tmp_path: Path) -> None:
    spec = f"buckets:{tmp_path / 's.bk'}?buckets=64&width=16&slots=16"
    batch = urls(3000)
    with open_seen(spec) as store:
        assert all(store.add_many(batch))
        stats = store.stats()
        assert stats.extra["buckets"] == 64
        assert stats.extra["array_growths"] > 0
    with open_seen(f"buckets:{tmp_path / 's.bk'}") as store:  # parameters from the file
        assert all(store.contains_many(batch))
        assert len(store) == 3000
    with pytest.raises(ConfigError, match="created with buckets=64, not 100"):
        open_seen(f"buckets:{tmp_path / 's.bk'}?buckets=100")
    with pytest.raises(ProfileMismatch, match="'filter/1'"):
        open_seen(f"buckets:{tmp_path / 's.bk'}?profile=crawler")


def test_one_writer_at_a_time_readers_welcome(tmp_path: Path) -> None:
    path = tmp_path / "s.bk"
    with open_seen(f"buckets:{path}?buckets=16") as store:
        store.add("http://a.example/")
        store.flush()
        with pytest.raises(StoreError, match="open for writing in another process"):
            open_seen(f"buckets:{path}")
        with open_seen(f"buckets:{path}?readonly=1") as reader:
            assert "http://a.example/" in reader
            with pytest.raises(StoreReadOnly, match="read-only"):
                reader.add("http://b.example/")
    with pytest.raises(StoreError, match="no bucket store"):
        open_seen(f"buckets:{tmp_path / 'absent'}?readonly=1")


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda b: b"not a store at all, definitely", "bad magic"),
        (lambda b: b[: len(b) // 2], "checksum mismatch"),
        (lambda b: b[:100] + bytes([b[100] ^ 1]) + b[101:], "checksum mismatch"),
    ],
    ids=["magic", "truncated", "flipped-bit"],
)
def test_damaged_file_is_store_corrupt(tmp_path: Path, damage: object, message: str) -> None:
    path = tmp_path / "s.bk"
    with open_seen(f"buckets:{path}?buckets=16") as store:
        store.add_many(urls(200))
    path.write_bytes(damage(path.read_bytes()))  # type: ignore[operator]
    with pytest.raises(StoreCorrupt, match=message):
        open_seen(f"buckets:{path}")
    # The failed open released the writer lock: a fresh store can take its place.
    path.unlink()
    open_seen(f"buckets:{path}?buckets=16").close()
