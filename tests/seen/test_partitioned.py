"""``partitioned:``: seed 004's writers that own their domains (contract: test_contract.py)."""

from __future__ import annotations

import fcntl
import json
import multiprocessing
import threading
from pathlib import Path

import pytest

from urlsieve.exceptions import ConfigError, ProfileMismatch, StoreCorrupt, StoreReadOnly
from urlsieve.seen import open_seen
from urlsieve.seen.partitioned import PartitionedStore, domain_key
from urlsieve.url import CRAWLER, FILTER


def test_a_domain_and_its_subdomains_share_a_partition(tmp_path: Path) -> None:
    with PartitionedStore(str(tmp_path / "s"), partitions=64) as store:
        assert domain_key("news.bbc.co.uk") == "bbc.co.uk"
        assert domain_key("10.1.2.3", is_ip=True) == "10.1.2.3"
        assert domain_key("co.uk") == "co.uk"
        first = store.partition("http://bbc.co.uk/")
        assert store.partition("http://news.bbc.co.uk/x") == first
        assert store.partition("https://WWW.BBC.CO.UK:8080/y") == first
        v6 = store.partition("http://[2001:db8::1]:8080/a")
        assert v6 == store.partition("http://[2001:DB8:0::1]/b")
        assert store.partition("http://10.0.0.1:81/") == store.partition("http://167772161/")
        spread = {store.partition(f"http://www.site{i}.org/") for i in range(2000)}
        assert len(spread) == 64  # registrable domains spread over every partition
        assert {store.owner(f"http://d{i}.com/", 3) for i in range(300)} == {0, 1, 2}
        with pytest.raises(ValueError):
            store.owner("http://a.com/", 0)


def test_urls_land_in_the_partition_of_their_domain(tmp_path: Path) -> None:
    with PartitionedStore(str(tmp_path / "s"), partitions=8) as store:
        urls = [f"http://p{i}.example{i}.net/page" for i in range(200)]
        assert all(store.add_many(urls))
        for index in range(8):
            owned = [u for u in urls if store.partition(u) == index]
            with open_seen(f"exact:{tmp_path}/s/part-{index:04d}.exact") as part:
                assert all(part.contains_many(owned))
                assert len(part) == len(owned)


def test_manifest_fixes_the_partition_count_and_profile(tmp_path: Path) -> None:
    where = str(tmp_path / "s")
    with PartitionedStore(where, partitions=4) as store:
        store.add("http://a.example/")
    with pytest.raises(ConfigError, match="has 4 partitions, not 8: open it with partitions=4"):
        PartitionedStore(where, partitions=8)
    with pytest.raises(ProfileMismatch, match="filter/1"):
        PartitionedStore(where, profile=CRAWLER)
    with PartitionedStore(where) as again:  # no count given: the manifest's
        assert again.partitions == 4
        assert "http://a.example/" in again


def test_bad_manifest_and_read_only_errors(tmp_path: Path) -> None:
    where = tmp_path / "s"
    with pytest.raises(ConfigError, match="no partitioned store here"):
        PartitionedStore(str(where), readonly=True)
    with pytest.raises(ConfigError, match=r"partitions must be 1\.\.4096"):
        PartitionedStore(str(where), partitions=0)
    with PartitionedStore(str(where), partitions=2) as store:
        store.add("http://a.example/")
    with PartitionedStore(str(where), readonly=True) as ro:
        assert "http://a.example/" in ro
        assert ro.contains_many(["http://never.example/", "http://a.example/"]) == [False, True]
        with pytest.raises(StoreReadOnly):
            ro.add_many([f"http://n{i}.example/" for i in range(20)])
    (where / "PARTITIONS").write_text(json.dumps({"format": "other", "partitions": 2}))
    with pytest.raises(StoreCorrupt, match="PARTITIONS: not a partitioned-store manifest"):
        PartitionedStore(str(where))
    (where / "PARTITIONS").write_bytes(b"\xff\x00garbage")
    with pytest.raises(StoreCorrupt):
        PartitionedStore(str(where))


def _add_in_child(where: str, urls: list[str], out: multiprocessing.Queue) -> None:  # type: ignore[type-arg]
    with PartitionedStore(where, partitions=4) as store:
        out.put(store.add_many(urls))


def test_a_locked_partition_does_not_stop_writers_of_other_partitions(tmp_path: Path) -> None:
    where = str(tmp_path / "s")
    with PartitionedStore(where, partitions=4) as store:
        by_part: dict[int, list[str]] = {}
        for i in range(400):
            url = f"http://w{i}.example{i}.org/"
            by_part.setdefault(store.partition(url), []).append(url)
        store.add_many([by_part[p][0] for p in range(4)])  # create every partition file
    ctx = multiprocessing.get_context("spawn")
    with open(Path(where) / "part-0000.exact", "rb") as locked:
        fcntl.flock(locked, fcntl.LOCK_EX)  # another writer is inside partition 0
        queue = ctx.Queue()
        other = ctx.Process(target=_add_in_child, args=(where, by_part[1][1:], queue))
        other.start()
        flags = queue.get(timeout=60)  # partition 1 proceeds while 0 is held
        other.join(30)
        assert all(flags)
        waiting = ctx.Process(target=_add_in_child, args=(where, by_part[0][1:], queue))
        waiting.start()
        waiting.join(1.0)
        assert waiting.is_alive()  # partition 0's writer waits for the lock
        fcntl.flock(locked, fcntl.LOCK_UN)
    assert all(queue.get(timeout=60))
    waiting.join(30)
    assert waiting.exitcode == 0


WRITERS = 4
PER_WRITER = 250_000
SHARED = 50_000  # URLs every writer adds too: contention on the same keys


def _writer(where: str, index: int, out: multiprocessing.Queue) -> None:  # type: ignore[type-arg]
    own = [f"http://www.s{j % 5000}-w{index}.com/p/{j}" for j in range(PER_WRITER - SHARED)]
    shared = [f"http://shared{j % 997}.org/q/{j}" for j in range(SHARED)]
    urls = own + shared
    new: list[int] = []
    with PartitionedStore(where, partitions=16) as store:
        for start in range(0, len(urls), 10_000):
            flags = store.add_many(urls[start : start + 10_000])
            new += [start + k for k, flag in enumerate(flags) if flag]
    out.put((index, len(own), new))


@pytest.mark.slow
def test_four_writers_lose_nothing_and_report_each_url_new_once(tmp_path: Path) -> None:
    where = str(tmp_path / "s")
    PartitionedStore(where, partitions=16).close()
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=_writer, args=(where, i, queue)) for i in range(WRITERS)]
    for proc in procs:
        proc.start()
    results = [queue.get(timeout=600) for _ in procs]
    for proc in procs:
        proc.join(60)
        assert proc.exitcode == 0
    shared_new = 0
    for _index, own, new in results:
        own_new = [k for k in new if k < own]
        assert len(own_new) == own  # a writer's own URLs are new to it, every one
        shared_new += len(new) - len(own_new)
    assert shared_new == SHARED  # each shared URL new for exactly one writer
    distinct = WRITERS * (PER_WRITER - SHARED) + SHARED
    with PartitionedStore(where) as store:
        assert len(store) == distinct
        assert store.stats().count == distinct
        probe = [f"http://www.s{j % 5000}-w3.com/p/{j}" for j in range(0, 200_000, 97)]
        assert all(store.contains_many(probe))


def test_threads_in_one_process_share_the_store(tmp_path: Path) -> None:
    with PartitionedStore(str(tmp_path / "s"), partitions=4, profile=FILTER) as store:
        urls = [f"http://t{i % 50}.example.com/{i}" for i in range(4000)]
        results: list[list[bool]] = []

        def run() -> None:
            results.append(store.add_many(urls))

        threads = [threading.Thread(target=run) for _ in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert [sum(col) for col in zip(*results, strict=True)] == [1] * len(urls)
