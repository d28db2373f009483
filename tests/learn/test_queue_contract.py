"""One contract for every queue backend: memory, SQLite, Valkey Streams (a real server).

Time is a fake clock passed to the queue, so re-check ages and retry delays need no sleep.
Lease expiry on Valkey is the server's idle time (``XAUTOCLAIM`` min-idle), so the tests
that let a lease run out use short leases and, for Valkey only, a real sleep as long.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.seen.valkey_fixtures import ServerProcess, drop_prefix, unique_prefix
from urlsieve.exceptions import ConfigError, LearnError
from urlsieve.learn.queue import (
    MAX_URL_BYTES,
    Job,
    QueueStats,
    Sighting,
    UnknownQueue,
    band,
    host_of,
    level,
    open_queue,
)

LEASE = 0.3  # seconds: short, so a Valkey lease can run out during a test


class FakeClock:
    def __init__(self) -> None:
        self.now = 1_700_000_000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@dataclass
class Case:
    """A queue under test, its clock, and how to reopen it (None: not persistent)."""

    kind: str
    spec: str
    clock: FakeClock
    queue: UnknownQueue

    def open(self, **overrides: Any) -> UnknownQueue:
        return open_queue(self.spec, clock=self.clock, **overrides)

    def lease_runs_out(self, lease: float = LEASE) -> None:
        self.clock.advance(lease + 1)
        if self.kind == "valkey":
            time.sleep(lease + 0.05)


@pytest.fixture(params=["memory", "sqlite", "valkey"])
def case(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Case]:
    clock = FakeClock()
    if request.param == "memory":
        spec = "memory:?recheck=100&max_attempts=3"
    elif request.param == "sqlite":
        spec = f"sqlite:{tmp_path / 'q.db'}?recheck=100&max_attempts=3"
    else:
        server: ServerProcess = request.getfixturevalue("valkey_server")
        prefix = unique_prefix()
        request.addfinalizer(lambda: drop_prefix([server], prefix))
        spec = f"{server.url}?prefix={prefix}&recheck=100&max_attempts=3"
    queue = open_queue(spec, clock=clock)
    yield Case(request.param, spec, clock, queue)
    queue.close()


def urls(jobs: list[Job]) -> list[str]:
    return [j.url for j in jobs]


def test_queued_once_counts_requests_and_distinct_clients(case: Case) -> None:
    q = case.queue
    url = "http://a.example/page"
    assert q.offer([Sighting(url, "10.0.0.1"), Sighting(url, "10.0.0.2")]) == 1
    assert q.offer([Sighting(url, "10.0.0.1"), Sighting(url, None)]) == 0
    assert q.depth() == 1
    (job,) = q.claim("learner", 10)
    assert (job.url, job.requests, job.clients, job.attempts) == (url, 4, 2, 0)
    assert job.first_seen == case.clock.now
    # leased: offered again, still not queued twice; its counts still rise
    assert q.offer([Sighting(url, "10.0.0.3")]) == 0
    assert q.claim("other", 10) == []
    assert q.done([job]) == 1
    stats = q.stats()
    assert (stats.waiting, stats.leased, stats.done, stats.queued, stats.sightings) == (
        0,
        0,
        1,
        1,
        5,
    )
    assert q.depth() == 0


def test_offer_counts_new_urls_of_a_batch_once(case: Case) -> None:
    batch = [Sighting(f"http://h{i % 7}.example/{i % 13}") for i in range(200)]
    distinct = {s.url for s in batch}
    assert case.queue.offer(batch) == len(distinct)
    assert case.queue.offer(batch) == 0
    jobs = case.queue.claim("l", 1000)
    assert sorted(urls(jobs)) == sorted(distinct)
    assert sum(j.requests for j in jobs) == 400


def test_recheck_age(case: Case) -> None:
    q = case.queue
    url = "http://recheck.example/"
    q.offer([Sighting(url)])
    assert q.done(q.claim("l", 1)) == 1
    case.clock.advance(99)
    assert q.offer([Sighting(url)]) == 0  # done 99 s ago, recheck=100
    assert q.claim("l", 1) == []
    case.clock.advance(1)
    assert q.offer([Sighting(url, "c")]) == 1  # old enough: a new queueing, fresh counts
    (job,) = q.claim("l", 1)
    assert (job.url, job.requests, job.clients, job.attempts) == (url, 1, 1, 0)
    assert job.first_seen == case.clock.now


def test_failed_urls_are_not_queued_again_before_recheck(case: Case) -> None:
    q = case.queue
    q.offer([Sighting("http://bad.example/")])
    for _ in range(3):
        (job,) = q.claim("l", 1)
        assert q.retry([job], delay=0) == 1
    assert q.stats().failed == 1
    assert q.offer([Sighting("http://bad.example/")]) == 0
    case.clock.advance(100)
    assert q.offer([Sighting("http://bad.example/")]) == 1


def test_priority_demand_levels(case: Case) -> None:
    q = case.queue
    # every URL on its own host (no verdicts yet), so demand alone orders them
    offered = {
        "http://one.example/": 1,
        "http://two.example/": 2,
        "http://three.example/": 3,
        "http://eight.example/": 8,
    }
    for url, clients in offered.items():
        q.offer([Sighting(url, f"10.0.0.{c}") for c in range(clients)])
    q.offer([Sighting("http://repeat.example/", "10.0.0.1")] * 4)  # 4 requests, 1 client
    got = urls([q.claim("l", 1)[0] for _ in range(5)])
    assert got[:2] == ["http://eight.example/", "http://three.example/"]
    assert set(got[2:4]) == {"http://two.example/", "http://repeat.example/"}  # both level 1
    assert got[4] == "http://one.example/"
    if case.kind != "valkey":  # inside a band: more requests first (Valkey: FIFO)
        assert got[2] == "http://repeat.example/"


def test_a_host_without_a_verdict_comes_first(case: Case) -> None:
    q = case.queue
    q.offer([Sighting("http://known.example/1")])
    assert q.done(q.claim("l", 1)) == 1
    # known.example has a verdict now: its busy URL ranks below a quiet URL of a new host
    q.offer([Sighting("http://known.example/2", f"c{i}") for i in range(8)])
    q.offer([Sighting("http://new.example/1")])
    assert urls(q.claim("l", 1)) == ["http://new.example/1"]
    assert urls(q.claim("l", 1)) == ["http://known.example/2"]


def test_a_waiting_url_drops_a_band_when_its_host_gets_a_verdict(case: Case) -> None:
    q = case.queue
    q.offer([Sighting("http://h.example/a"), Sighting("http://h.example/b", "c1")])
    q.offer([Sighting("http://h.example/b", "c2")])  # b: 2 clients, above a
    (first,) = q.claim("l", 1)
    assert first.url == "http://h.example/b"
    q.offer([Sighting("http://other.example/x")])  # new host, 1 client: same band as a
    assert q.done([first]) == 1  # h.example has a verdict: a drops below other.example
    assert urls(q.claim("l", 1)) == ["http://other.example/x"]
    assert urls(q.claim("l", 1)) == ["http://h.example/a"]


def test_demand_rising_while_waiting_lifts_a_url(case: Case) -> None:
    q = case.queue
    q.offer([Sighting("http://early.example/", "c0")])
    q.offer([Sighting("http://late.example/", "c0")])
    q.offer([Sighting("http://late.example/", f"c{i}") for i in range(1, 4)])
    assert urls(q.claim("l", 2)) == ["http://late.example/", "http://early.example/"]


def test_an_expired_lease_is_handed_out_again_and_the_first_done_wins(case: Case) -> None:
    q = case.queue
    q.offer([Sighting("http://slow.example/")])
    (mine,) = q.claim("dies", 1, lease=LEASE)
    assert q.claim("survivor", 1, lease=LEASE) == []  # still leased
    case.lease_runs_out()
    (theirs,) = q.claim("survivor", 1, lease=LEASE)  # one pool, one lease (see queue_valkey)
    assert theirs.url == mine.url
    assert theirs.attempts == 1  # the lost lease counts as a failed attempt
    assert q.retry([mine]) == 0  # only the lease holder may retry
    assert q.done([mine]) == 1  # the slow learner finished first: that completes the URL
    assert q.done([theirs]) == 0  # ... and the second done completes nothing
    stats = q.stats()
    assert (stats.done, stats.stale, stats.waiting, stats.leased) == (1, 2, 0, 0)
    assert q.claim("survivor", 1) == []


def test_the_holder_completes_after_a_takeover(case: Case) -> None:
    q = case.queue
    q.offer([Sighting("http://slow.example/")])
    (mine,) = q.claim("dies", 1, lease=LEASE)
    case.lease_runs_out()
    (theirs,) = q.claim("survivor", 1, lease=LEASE)
    assert q.done([theirs]) == 1
    assert q.done([mine]) == 0
    assert q.stats().done == 1


def test_lost_leases_fail_a_url_after_max_attempts(case: Case) -> None:
    q = case.open(max_attempts=2)
    try:
        q.offer([Sighting("http://poison.example/")])
        assert len(q.claim("a", 1, lease=LEASE)) == 1
        case.lease_runs_out()
        assert len(q.claim("b", 1, lease=LEASE)) == 1
        case.lease_runs_out()
        assert q.claim("c", 1, lease=LEASE) == []
        stats = q.stats()
        assert (stats.failed, stats.waiting, stats.leased) == (1, 0, 0)
    finally:
        q.close()


def test_retry_waits_for_its_delay_and_counts_attempts(case: Case) -> None:
    q = case.queue
    q.offer([Sighting("http://flaky.example/"), Sighting("http://fine.example/")])
    jobs = {j.url: j for j in q.claim("l", 2)}
    assert q.retry([jobs["http://flaky.example/"]], delay=30) == 1
    assert q.depth() == 2
    assert q.claim("l", 5) == []
    case.clock.advance(29)
    assert q.claim("l", 5) == []
    case.clock.advance(1)
    (again,) = q.claim("l", 5)
    assert (again.url, again.attempts) == ("http://flaky.example/", 1)
    assert q.retry([again], delay=0) == 1
    (third,) = q.claim("l", 5)
    assert third.attempts == 2
    assert q.retry([third], delay=0) == 1  # third try failed: max_attempts=3
    assert q.claim("l", 5) == []
    assert q.done([jobs["http://fine.example/"]]) == 1
    stats = q.stats()
    assert (stats.failed, stats.done, stats.waiting, stats.leased) == (1, 1, 0, 0)
    assert q.done([third]) == 0  # failed is final for this queueing


def test_a_retried_job_can_still_be_completed_by_its_old_holder(case: Case) -> None:
    q = case.queue
    q.offer([Sighting("http://x.example/")])
    (job,) = q.claim("l", 1)
    assert q.retry([job], delay=30) == 1
    assert q.retry([job], delay=30) == 0  # not leased any more
    assert q.done([job]) == 1  # a waiting URL of the same queueing: completed
    case.clock.advance(31)
    assert q.claim("l", 1) == []
    assert q.depth() == 0


def test_done_with_foreign_or_garbled_jobs_completes_nothing(case: Case) -> None:
    q = case.queue
    q.offer([Sighting("http://x.example/")])
    (job,) = q.claim("l", 1)
    garbled = [
        Job("http://x.example/", "nonsense", 0.0, 1, 0, 0),
        Job("http://x.example/", "", 0.0, 1, 0, 0),
        Job("http://never.example/", job.key, 0.0, 1, 0, 0),
        Job("x" * (MAX_URL_BYTES + 1), job.key, 0.0, 1, 0, 0),
    ]
    assert q.done(garbled) == 0
    assert q.retry(garbled) == 0
    assert q.stats().stale == 8
    assert q.done([job]) == 1


def test_hostile_urls_round_trip_or_are_dropped_and_counted(case: Case) -> None:
    q = case.queue
    kept = [
        "http://a.example/\ud800\udfff\ud800",  # lone surrogates
        "http://a.example/\x00\x01\n\r\t\x7f",  # control characters, NUL
        "http://\u0430.example/\u4e2d\U0001f600",
        "no scheme at all",
        "h" * MAX_URL_BYTES,
    ]
    dropped: list[object] = ["", "h" * (MAX_URL_BYTES + 1), "\u4e2d" * 3000, None, b"bytes", 42]
    sightings = [Sighting(u, "c") for u in kept] + [Sighting(u) for u in dropped]  # type: ignore[arg-type]
    assert q.offer(sightings) == len(kept)
    jobs = q.claim("l", 100)
    assert sorted(urls(jobs)) == sorted(kept)
    assert q.done(jobs) == len(kept)
    assert q.stats().dropped == len(dropped)


def test_odd_sighting_fields(case: Case) -> None:
    q = case.queue
    sightings = [
        Sighting("http://a.example/", "\ud800", at=float("nan")),
        Sighting("http://a.example/", "", at=float("inf")),
        Sighting("http://a.example/", "c", at=5.0),
    ]
    assert q.offer(sightings) == 1
    (job,) = q.claim("l", 1)
    assert (job.requests, job.clients, job.first_seen) == (3, 2, 5.0)


def test_clients_are_a_bounded_set(case: Case) -> None:
    q = case.queue
    q.offer([Sighting("http://busy.example/", f"10.0.{i // 256}.{i % 256}") for i in range(100)])
    (job,) = q.claim("l", 1)
    assert (job.requests, job.clients) == (100, 32)


def test_claim_arguments(case: Case) -> None:
    q = case.queue
    q.offer([Sighting("http://x.example/")])
    assert q.claim("l", 0) == []
    with pytest.raises(ConfigError, match="consumer"):
        q.claim("", 1)
    with pytest.raises(ConfigError, match="lease"):
        q.claim("l", 1, lease=0)
    assert q.done([]) == 0
    assert q.retry([]) == 0
    assert q.offer([]) == 0


def test_stats(case: Case) -> None:
    case.queue.offer([Sighting("http://x.example/"), Sighting("")])
    stats = case.queue.stats()
    assert isinstance(stats, QueueStats)
    assert stats.backend == case.kind
    d = stats.as_dict()
    assert (d["depth"], d["waiting"], d["dropped"], d["sightings"]) == (1, 1, 1, 2)


def test_a_closed_queue_refuses(case: Case) -> None:
    case.queue.close()
    with pytest.raises(LearnError):
        case.queue.offer([Sighting("http://x.example/")])
    with pytest.raises(LearnError):
        case.queue.claim("l", 1)
    case.queue.close()  # twice is fine


def test_persistent_backends_keep_everything_across_reopening(case: Case) -> None:
    if case.kind == "memory":
        return  # memory: is documented as gone with its process; nothing to reopen
    q = case.queue
    q.offer([Sighting(f"http://p{i}.example/", "c") for i in range(10)])
    leased = q.claim("l", 3, lease=60)
    assert q.done(leased[:1]) == 1
    q.close()
    again = case.open()
    try:
        stats = again.stats()
        assert (stats.waiting, stats.leased, stats.done, stats.queued) == (7, 2, 1, 10)
        assert again.done(leased[1:]) == 2  # the jobs handed out before are still valid
        assert len(again.claim("l", 100)) == 7
    finally:
        again.close()


def test_two_handles_share_one_queue(case: Case) -> None:
    if case.kind == "memory":
        return  # one process, one handle: nothing shared by design
    other = case.open()
    try:
        case.queue.offer([Sighting("http://shared.example/", "a")])
        assert other.offer([Sighting("http://shared.example/", "b")]) == 0
        (job,) = other.claim("l", 1)
        assert (job.requests, job.clients) == (2, 2)
        assert case.queue.claim("l2", 1) == []
        assert case.queue.done([job]) == 1
    finally:
        other.close()


# ---------------------------------------------------------------------- spec and ranking


def test_spec_errors() -> None:
    with pytest.raises(ConfigError, match="unknown queue backend"):
        open_queue("carrier-pigeon:")
    with pytest.raises(ConfigError, match="unknown parameter 'colour'"):
        open_queue("memory:?colour=blue")
    with pytest.raises(ConfigError, match="not a valid int"):
        open_queue("memory:?max_attempts=many")
    with pytest.raises(ConfigError, match="max_attempts"):
        open_queue("memory:?max_attempts=0")
    with pytest.raises(ConfigError, match="needs a path"):
        open_queue("sqlite:")
    with pytest.raises(ConfigError, match="host:port"):
        open_queue("valkey:nowhere")


def test_ranking_is_documented() -> None:
    assert [level(1, 1), level(4, 1), level(2, 2), level(3, 3), level(100, 8)] == [0, 1, 1, 2, 3]
    assert band(True, 1, 1) == 4
    assert band(False, 100, 8) == 3
    assert band(True, 100, 8) == 7


@pytest.mark.parametrize(
    ("url", "host"),
    [
        (b"http://Example.COM/x", b"example.com"),
        (b"https://user:pw@host.example:8080/p?q#f", b"host.example"),
        (b"http://[2001:db8::1]:80/", b"[2001:db8::1]"),
        (b"http://[2001:db8::1", b"[2001:db8::1"),
        (b"http://h.example?x=/y", b"h.example"),
        (b"no scheme", b""),
        (b"http://", b""),
    ],
)
def test_host_of(url: bytes, host: bytes) -> None:
    assert host_of(url) == host


@given(st.binary(max_size=300))
def test_host_of_takes_any_bytes(raw: bytes) -> None:
    host = host_of(raw)
    assert isinstance(host, bytes)
    assert len(host) <= len(raw)
    assert b"/" not in host and b"?" not in host and b"#" not in host


def test_a_job_of_a_generation_purged_and_queued_again_is_stale(case: Case) -> None:
    """A learner that finishes a job after its URL was done, forgotten past the re-check
    age and queued anew must not mark the new one done (Hypothesis found the memory
    queue reusing generation 1 after a purge)."""
    q = case.queue
    a, b = "http://a.example/1", "http://b.example/1"
    q.offer([Sighting(a)])
    q.offer([Sighting(b)])
    first = {j.url: j for j in q.claim("l", 2, lease=LEASE)}
    case.lease_runs_out()
    second = {j.url: j for j in q.claim("l", 2, lease=LEASE)}
    assert q.done([first[b]]) == 1  # the first holder finishes late: first done wins
    case.clock.advance(101)  # past the re-check age: b may be queued again
    assert q.done([first[a]]) == 1  # (the memory queue purges what is old on a done)
    assert q.offer([Sighting(b)]) == 1
    assert q.done([second[b]]) == 0  # the lease of b's old generation: stale
    (fresh,) = q.claim("l", 10)
    assert fresh.url == b and q.done([fresh]) == 1


# -- the burst count of unknown sites (issue 30, item 2) --------------------------------


def test_admit_counts_a_site_across_openers_up_to_the_limit(case: Case) -> None:
    other = case.open() if case.kind != "memory" else case.queue  # another gateway process
    try:
        answers = [q.admit("evil.test", 3) for q in (case.queue, other) * 3]
        assert answers == [True, True, True, False, False, False]
        assert case.queue.admit("other.test", 3)  # each site has its own count
        assert not case.queue.admit("zero.test", 0)  # a limit of 0 lets nothing through
        assert [case.queue.admit("w.test", 1, window=100) for _ in range(2)] == [True, False]
        case.clock.advance(101)
        if case.kind == "valkey":  # Valkey expires the count by its own clock
            assert other.admit("w2.test", 1, window=1)
            time.sleep(1.1)
            assert other.admit("w2.test", 1, window=1)
        else:
            assert other.admit("w.test", 1, window=100)  # the window is over: counted again
    finally:
        if other is not case.queue:
            other.close()


@given(site=st.text(st.characters(blacklist_categories=()), max_size=400))
@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
def test_admit_takes_any_site_name(case: Case, site: str) -> None:
    assert case.queue.admit(site, 1000) is True
