"""The SQLite queue: files that are not queues, a full disk, processes that crash, and a
model-based test of the memory and SQLite backends."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from tests.learn.queue_worker import check_exactly_once, run_fleet
from urlsieve.exceptions import QueueCorrupt, QueueUnavailable
from urlsieve.learn.queue import Job, Sighting, band, host_of, open_queue
from urlsieve.learn.queue_sqlite import SCHEMA_VERSION, SqliteQueue


def make_queue(path: Path) -> None:
    with open_queue(f"sqlite:{path}") as q:
        q.offer([Sighting(f"http://x{i}.example/" + "p" * 200, "c") for i in range(300)])


def test_not_an_sqlite_file(tmp_path: Path) -> None:
    path = tmp_path / "q.db"
    path.write_bytes(b"this is a text file, not a database\n" * 200)
    with pytest.raises(QueueCorrupt, match="move the file away") as info:
        SqliteQueue(str(path))
    assert info.value.path == str(path)


def test_another_sqlite_database(tmp_path: Path) -> None:
    path = tmp_path / "other.db"
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE accounts (id INTEGER)")
    with pytest.raises(QueueCorrupt, match="not a urlsieve queue database"):
        SqliteQueue(str(path))
    with sqlite3.connect(path) as db:  # untouched
        assert db.execute("SELECT name FROM sqlite_master").fetchall() == [("accounts",)]


def test_a_newer_schema(tmp_path: Path) -> None:
    path = tmp_path / "q.db"
    make_queue(path)
    with sqlite3.connect(path) as db:
        db.execute(f"PRAGMA user_version={SCHEMA_VERSION + 1}")
    with pytest.raises(QueueCorrupt, match=r"newer than this urlsieve reads.*upgrade urlsieve"):
        SqliteQueue(str(path))


def test_missing_tables(tmp_path: Path) -> None:
    path = tmp_path / "q.db"
    make_queue(path)
    with sqlite3.connect(path) as db:
        db.execute("DROP TABLE hosts")
    with pytest.raises(QueueCorrupt, match="missing"):
        SqliteQueue(str(path))


def test_a_damaged_file(tmp_path: Path) -> None:
    path = tmp_path / "q.db"
    make_queue(path)
    data = bytearray(path.read_bytes())
    assert len(data) > 16 * 4096
    for page in range(1, len(data) // 4096):  # every page but the header: garbage
        data[page * 4096 : page * 4096 + 64] = b"\xa5" * 64
    path.write_bytes(bytes(data))
    for suffix in ("-wal", "-shm"):
        Path(str(path) + suffix).unlink(missing_ok=True)
    with (
        pytest.raises(QueueCorrupt, match="damaged queue database") as info,
        SqliteQueue(str(path)) as q,
    ):
        q.claim("l", 10)
        q.offer([Sighting("http://y.example/")])
    assert info.value.path == str(path)


def test_a_full_disk_loses_nothing_queued(tmp_path: Path) -> None:
    path = tmp_path / "q.db"
    with SqliteQueue(str(path), max_bytes=256 * 1024) as q:
        queued = 0
        with pytest.raises(QueueUnavailable, match="disk full or max_bytes"):
            for i in range(10_000):
                batch = [Sighting(f"http://h{i}.example/{j}/" + "x" * 300) for j in range(20)]
                queued += q.offer(batch)
        assert queued > 0
        assert q.depth() == queued  # the failed batch was rolled back, nothing else lost
        jobs = q.claim("l", 10)
        assert q.done(jobs) == len(jobs) == 10  # small writes still go through
    with SqliteQueue(str(path)) as again:  # without the cap the queue grows again
        assert again.stats().waiting == queued - 10
        assert again.offer([Sighting("http://after.example/")]) == 1


def test_an_unwritable_place(tmp_path: Path) -> None:
    with pytest.raises(QueueUnavailable, match="cannot open"):
        SqliteQueue(str(tmp_path / "no" / "such" / "dir" / "q.db"))


def test_wal_mode_and_identity(tmp_path: Path) -> None:
    path = tmp_path / "q.db"
    make_queue(path)
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION


def test_threads_share_one_handle(tmp_path: Path) -> None:
    with SqliteQueue(str(tmp_path / "q.db")) as q:

        def offer(n: int) -> None:
            for i in range(50):
                q.offer([Sighting(f"http://t.example/{i}", f"c{n}")])

        threads = [threading.Thread(target=offer, args=(n,)) for n in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
        jobs = q.claim("l", 100)
        assert len(jobs) == 50
        assert {(j.requests, j.clients) for j in jobs} == {(4, 4)}


def test_processes_crash_and_every_url_is_classified_once(tmp_path: Path) -> None:
    """Two producer processes offer at once while two learners claim; one learner is
    SIGKILLed holding leases: they run out and the survivor takes the jobs over."""
    spec = f"sqlite:{tmp_path / 'q.db'}"
    result = run_fleet(spec, tmp_path, lease=1.0)
    with open_queue(spec) as q:
        stats = q.stats()
    check_exactly_once(result, stats.done)
    assert (stats.waiting, stats.leased, stats.stale, stats.failed) == (0, 0, 0, 0)


# ---------------------------------------------------------------------- model-based test

URLS = [
    "http://a.example/1",
    "http://a.example/2",
    "http://b.example/1",
    "http://c.example/\ud800",
    "http://d.example/\x00",
]
CLIENTS = [None, "c1", "c2", "c3"]


class Model:
    """What a queue must answer, written the simplest way (linear scans, no indexes)."""

    def __init__(self, recheck: float, max_attempts: int) -> None:
        self.recheck = recheck
        self.max_attempts = max_attempts
        self.state: dict[str, str] = {}  # waiting, leased, done, failed
        self.requests: dict[str, int] = {}
        self.clients: dict[str, set[str]] = {}
        self.attempts: dict[str, int] = {}
        self.ready: dict[str, float] = {}
        self.until: dict[str, float] = {}
        self.finished: dict[str, float] = {}
        self.judged: set[bytes] = set()
        self.gen: dict[str, int] = {}  # how often each URL was queued

    def active(self, url: str) -> bool:
        return self.state.get(url) in ("waiting", "leased")

    def claimable(self, now: float) -> list[str]:
        out = []
        for url, s in self.state.items():
            if (s == "waiting" and self.ready[url] <= now) or (
                s == "leased" and self.until[url] <= now
            ):
                if s == "leased" and self.attempts[url] + 1 >= self.max_attempts:
                    continue  # fails instead
                out.append(url)
        return out

    def rank(self, url: str) -> int:
        host = host_of(url.encode("utf-8", "surrogatepass"))
        return band(host not in self.judged, self.requests[url], len(self.clients[url]))


class QueueMachine(RuleBasedStateMachine):
    """Random offer/claim/done/retry/time steps against a backend and the model."""

    spec = "memory:"

    def __init__(self) -> None:
        super().__init__()
        self.now = 1000.0
        self.queue = open_queue(f"{self.spec}?recheck=50&max_attempts=2", clock=lambda: self.now)
        self.model = Model(50, 2)
        self.held: dict[str, Job] = {}  # the newest job handed out per URL
        self.old: list[Job] = []  # jobs whose lease was taken over
        self.gen_of: dict[tuple[str, str], int] = {}  # (url, key) -> queueing it came from

    def teardown(self) -> None:
        self.queue.close()

    @rule(picks=st.lists(st.tuples(st.sampled_from(URLS), st.sampled_from(CLIENTS)), max_size=6))
    def offer(self, picks: list[tuple[str, str | None]]) -> None:
        m = self.model
        fresh = set()
        for url, client in picks:
            if not m.active(url) and url not in fresh:
                if url in m.state and self.now - m.finished[url] < m.recheck:
                    continue
                fresh.add(url)
                m.state[url], m.requests[url], m.clients[url] = "waiting", 0, set()
                m.attempts[url], m.ready[url] = 0, self.now
                m.gen[url] = m.gen.get(url, 0) + 1
            if m.active(url):
                m.requests[url] += 1
                if client:
                    m.clients[url].add(client)
        assert self.queue.offer([Sighting(u, c) for u, c in picks]) == len(fresh)

    @rule(count=st.integers(1, 3), lease=st.sampled_from([5.0, 20.0]))
    def claim(self, count: int, lease: float) -> None:
        m = self.model
        for url, s in list(m.state.items()):  # lost leases: an attempt each
            if s == "leased" and m.until[url] <= self.now:
                m.attempts[url] += 1
                if m.attempts[url] >= m.max_attempts:
                    m.state[url], m.finished[url] = "failed", self.now
                else:
                    m.state[url], m.ready[url] = "waiting", self.now
        candidates = m.claimable(self.now)
        jobs = self.queue.claim("l", count, lease=lease)
        assert len(jobs) == min(count, len(candidates))
        got = [j.url for j in jobs]
        assert len(set(got)) == len(got)
        assert set(got) <= set(candidates)
        if got:  # the highest bands first
            worst = min(m.rank(u) for u in got)
            assert all(m.rank(u) <= worst for u in set(candidates) - set(got))
        for job in jobs:
            assert (job.requests, job.clients) == (
                m.requests[job.url],
                len(m.clients[job.url]),
            )
            assert job.attempts == m.attempts[job.url]
            m.state[job.url], m.until[job.url] = "leased", self.now + lease
            self.gen_of[job.url, job.key] = m.gen[job.url]
            if job.url in self.held:
                self.old.append(self.held[job.url])
            self.held[job.url] = job

    @precondition(lambda self: self.held)
    @rule(data=st.data())
    def done(self, data: st.DataObject) -> None:
        job = data.draw(st.sampled_from(sorted(self.held.values(), key=lambda j: j.url)))
        self.complete(job)
        del self.held[job.url]

    def complete(self, job: Job) -> None:
        m = self.model
        current = m.active(job.url) and self.gen_of[job.url, job.key] == m.gen[job.url]
        expected = 1 if current else 0
        assert self.queue.done([job]) == expected
        if expected:
            m.state[job.url], m.finished[job.url] = "done", self.now
            m.judged.add(host_of(job.url.encode("utf-8", "surrogatepass")))

    @precondition(lambda self: self.held)
    @rule(data=st.data(), delay=st.sampled_from([0.0, 10.0]))
    def retry(self, data: st.DataObject, delay: float) -> None:
        job = data.draw(st.sampled_from(sorted(self.held.values(), key=lambda j: j.url)))
        m = self.model
        # the newest job of a leased URL: its holder may retry, even past the lease end
        # (nobody has taken it over yet)
        current = m.state.get(job.url) == "leased"
        taken = self.queue.retry([job], delay=delay)
        if current:
            assert taken == 1
            m.attempts[job.url] += 1
            if m.attempts[job.url] >= m.max_attempts:
                m.state[job.url], m.finished[job.url] = "failed", self.now
            else:
                m.state[job.url], m.ready[job.url] = "waiting", self.now + delay
            del self.held[job.url]
        else:
            assert taken == 0

    @precondition(lambda self: self.old)
    @rule()
    def late_done(self) -> None:
        """A learner whose lease was taken over finishes anyway: first done wins."""
        self.complete(self.old.pop())

    @rule(seconds=st.sampled_from([1.0, 6.0, 25.0, 60.0]))
    def wait(self, seconds: float) -> None:
        self.now += seconds

    @invariant()
    def counts(self) -> None:
        stats = self.queue.stats()
        m = self.model
        leased = sum(1 for s in m.state.values() if s == "leased")
        waiting = sum(1 for s in m.state.values() if s == "waiting")
        assert (stats.waiting + stats.leased) == waiting + leased == self.queue.depth()


class SqliteMachine(QueueMachine):
    spec = "sqlite::memory:"


TestMemoryModel = QueueMachine.TestCase
TestMemoryModel.settings = settings(max_examples=300, stateful_step_count=30, deadline=None)
TestSqliteModel = SqliteMachine.TestCase
TestSqliteModel.settings = settings(max_examples=150, stateful_step_count=30, deadline=None)
