"""The Valkey Streams queue on real servers: the fleet (two helpers, two learners, one
learner killed), a server that goes down and comes back, and the stream layout."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.learn.queue_worker import check_exactly_once, run_fleet
from tests.seen.valkey_fixtures import ServerProcess, drop_prefix, unique_prefix
from urlsieve.exceptions import QueueUnavailable
from urlsieve.learn.queue import Sighting, open_queue
from urlsieve.learn.queue_valkey import ValkeyQueue


@pytest.fixture
def spec(request: pytest.FixtureRequest, valkey_server: ServerProcess) -> str:
    prefix = unique_prefix()
    request.addfinalizer(lambda: drop_prefix([valkey_server], prefix))
    return f"{valkey_server.url}?prefix={prefix}"


def test_fleet_a_killed_learner_loses_nothing_and_nothing_is_classified_twice(
    spec: str, tmp_path: Path
) -> None:
    """Two producer processes offer overlapping URL sets (with duplicates); learner
    "victim" is SIGKILLed holding a leased batch; "survivor" takes it over with XAUTOCLAIM."""
    result = run_fleet(spec, tmp_path, lease=1.0)
    with open_queue(spec) as q:
        stats = q.stats()
    check_exactly_once(result, stats.done)
    assert (stats.waiting, stats.leased, stats.failed) == (0, 0, 0)


def test_a_server_down_and_back_loses_nothing(fresh_server: ServerProcess) -> None:
    """fresh_server writes its AOF with fsync on every write."""
    spec = f"{fresh_server.url}?prefix=down&timeout=1"
    before = [Sighting(f"http://before{i}.example/") for i in range(50)]
    with open_queue(spec) as q:
        assert q.offer(before) == 50
        leased = q.claim("l", 5, lease=60)
        fresh_server.kill()
        with pytest.raises(QueueUnavailable, match="retry") as info:
            q.offer([Sighting("http://during.example/")])
        assert info.value.__cause__ is not None
        with pytest.raises(QueueUnavailable):
            q.claim("l", 1)
        with pytest.raises(QueueUnavailable):
            q.done(leased)
        with pytest.raises(QueueUnavailable):
            q.stats()
        fresh_server.start()
        # the same handle works again: everything queued before is still there
        assert q.done(leased) == 5
        assert q.offer([Sighting("http://after.example/")]) == 1
        jobs = q.claim("l", 100)
        assert {j.url for j in jobs} == {s.url for s in before[5:]} | {"http://after.example/"}
        assert q.done(jobs) == 46


def test_a_server_that_lost_its_data_gets_its_groups_back(fresh_server: ServerProcess) -> None:
    with open_queue(f"{fresh_server.url}?prefix=flushed") as q:
        q.offer([Sighting("http://x.example/")])
        with fresh_server.client() as c:
            c.flushall()
        assert q.offer([Sighting("http://y.example/")]) == 1  # NOGROUP: groups recreated
        assert [j.url for j in q.claim("l", 5)] == ["http://y.example/"]


def test_unreachable_server() -> None:
    from tests.seen.valkey_fixtures import free_port

    with pytest.raises(QueueUnavailable, match="create the consumer group"):
        open_queue(f"valkey://127.0.0.1:{free_port()}/0?timeout=0.5")


def test_stream_layout(spec: str, valkey_server: ServerProcess) -> None:
    """One stream per band, one consumer group, entries acknowledged and deleted on done."""
    with open_queue(spec + "&group=pool1") as q:
        assert isinstance(q, ValkeyQueue)
        q.offer([Sighting("http://a.example/", "c1"), Sighting("http://b.example/")])
        q.offer([Sighting("http://a.example/", "c2")])  # two clients: band 5
        p = "{" + q.prefix + "}"
        with valkey_server.client() as c:
            assert c.xlen(f"{p}:s5") == 1
            assert c.xlen(f"{p}:s4") == 2  # b, and the superseded entry of a until it is read
            groups = c.xinfo_groups(f"{p}:s0")
            assert [g["name"] for g in groups] == [b"pool1"]
            jobs = q.claim("l", 2)
            assert [j.url for j in jobs] == ["http://a.example/", "http://b.example/"]
            assert c.xpending(f"{p}:s5", "pool1")["pending"] == 1
            assert q.done(jobs) == 2
            assert c.xlen(f"{p}:s5") == c.xlen(f"{p}:s4") == 0
            assert c.xpending(f"{p}:s5", "pool1")["pending"] == 0
            ttl = c.ttl(f"{p}:r:" + _digest("http://a.example/"))
            assert 0 < ttl <= 86_400  # the record keeps the URL out for the recheck age


def test_promoted_entries_leave_nothing_behind(spec: str, valkey_server: ServerProcess) -> None:
    with open_queue(spec) as q:
        q.offer([Sighting("http://a.example/", "c1")])
        for n in range(2, 10):  # climbs band 4 -> 5 -> 6 -> 7
            q.offer([Sighting("http://a.example/", f"c{n}")])
        (job,) = q.claim("l", 5)
        assert (job.clients, job.requests) == (9, 9)
        assert q.done([job]) == 1
        assert q.claim("l", 5) == []
        p = "{" + q.prefix + "}"  # type: ignore[attr-defined]
        with valkey_server.client() as c:
            assert sum(c.xlen(f"{p}:s{b}") for b in range(8)) == 0
            assert sum(c.xpending(f"{p}:s{b}", "learners")["pending"] for b in range(8)) == 0


def _digest(url: str) -> str:
    import hashlib

    return hashlib.blake2b(url.encode(), digest_size=16).hexdigest()
