"""Lock-free single adds to the file stores (``exact:``, ``bloom:``; seen/_mapped.py).

Real processes add one URL at a time without the file lock while others add batches
under it and the tables grow (exact: new files; Bloom: new layers); every URL added is
found afterwards and the counts are right. Processes killed with SIGKILL in the middle
of lock-free adds leave a store that reopens repaired. The protocol's header words
(the sequence, the adders in flight) are exercised directly too: a dead adder is taken
for dead and repaired, a slow adder of an old epoch does not disturb a new one, an add
that overlaps a locked section is redone under the lock, and the compiled steps equal
their Python reference.
"""

from __future__ import annotations

import multiprocessing
import os
import random
import signal
import struct
import time
from multiprocessing.connection import Connection
from pathlib import Path

import numpy as np
import pytest

from urlsieve import StoreCorrupt, _accel
from urlsieve.seen import open_seen
from urlsieve.seen._mapped import (
    IN_FLIGHT,
    W_ADDING,
    W_COUNT,
    W_DIRTY,
    W_SEQ,
    W_STRAGGLERS,
    sealed,
    session_py,
)
from urlsieve.seen.bloom import BloomStore
from urlsieve.seen.exact import ExactStore

speedups = pytest.importorskip("urlsieve._speedups", reason="built without a C compiler")
# What only the compiled stores do: their adds take no lock (with URLSIEVE_PURE_PYTHON every
# add takes the file's lock, and the tests without this mark hold that build to the same
# counts under the same races).
lock_free = pytest.mark.skipif(
    _accel.speedups is None, reason="URLSIEVE_PURE_PYTHON: the stores' adds all take the lock"
)

CTX = multiprocessing.get_context("fork")
SPECS = {
    # small, so that the tables grow (exact) and layers are added (Bloom) during the race
    "exact": "exact:{tmp}/s.exact?capacity=500",
    "bloom": "bloom:{tmp}/s.bloom?capacity=3000&error=0.001",
}


def url(writer: int, i: int) -> str:
    return f"http://w{writer}.example.com/{i % 61}/p{i}?q={i * 7919 % 10007}"


def _adder(spec: str, writer: int, n: int, batches: bool, out: Connection) -> None:
    new = 0
    with open_seen(spec) as store:
        i = 0
        rnd = random.Random(writer)
        while i < n:
            if batches and rnd.random() < 0.3:  # a locked section now and then
                size = rnd.randint(50, 400)
                new += sum(store.add_many([url(writer, j) for j in range(i, min(n, i + size))]))
                i += size
            else:
                new += store.add(url(writer, i))
                i += 1
    out.send(new)


def _race(spec: str, writers: int, n: int, batches: bool) -> int:
    pipes, procs = [], []
    for w in range(writers):
        recv, send = CTX.Pipe(duplex=False)
        proc = CTX.Process(target=_adder, args=(spec, w, n, batches, send))
        proc.start()
        pipes.append(recv)
        procs.append(proc)
    reported = sum(p.recv() for p in pipes)
    for proc in procs:
        proc.join()
        assert proc.exitcode == 0
    return reported


@pytest.mark.slow
@pytest.mark.parametrize("kind", sorted(SPECS))
@pytest.mark.parametrize("batches", [False, True], ids=["single", "with-batches"])
def test_concurrent_lock_free_adds_lose_nothing(kind: str, batches: bool, tmp_path: Path) -> None:
    spec = SPECS[kind].format(tmp=tmp_path)
    writers, n = 4, 20_000
    reported = _race(spec, writers, n, batches)
    with open_seen(spec) as store:
        for w in range(writers):
            held = store.contains_many([url(w, i) for i in range(n)])
            assert all(held), f"writer {w}: {held.count(False)} URLs lost"
        if kind == "exact":  # distinct URLs: each new once, each counted once
            assert reported == len(store) == writers * n
            store.verify()
        else:
            assert len(store) == reported  # no count increment lost
            assert reported > writers * n * 0.99
            assert len(store._layers) > 1  # layers were added during the race
        store.verify()


def _same_urls(spec: str, n: int, out: Connection) -> None:
    with open_seen(spec) as store:
        out.send([i for i in range(n) if store.add(f"http://same.example/{i}")])


@pytest.mark.slow
@pytest.mark.parametrize("locked", [False, True], ids=["lock-free", "locked"])
def test_one_url_added_by_many_is_new_once(locked: bool, tmp_path: Path) -> None:
    """exact: of several processes adding the same URLs one at a time, one is told each
    URL is new (a compare-and-swap has one winner; ``?locked=1`` the same by the lock).
    Presized, so no growth overlaps an add."""
    spec = f"exact:{tmp_path}/same.exact?capacity=50000" + ("&locked=1" if locked else "")
    n, writers = 10_000, 3
    pipes, procs = [], []
    for _ in range(writers):
        recv, send = CTX.Pipe(duplex=False)
        proc = CTX.Process(target=_same_urls, args=(spec, n, send))
        proc.start()
        pipes.append(recv)
        procs.append(proc)
    news = [i for p in pipes for i in p.recv()]
    for proc in procs:
        proc.join()
    assert sorted(news) == list(range(n))
    with open_seen(spec) as store:
        assert len(store) == n


# ------------------------------------------------------------------------ crashes


def _killed_adder(spec: str, start: int, out: Connection) -> None:
    with open_seen(spec) as store:
        i = start
        while True:
            out.send(("trying", i + 1))  # nothing at or above this was touched
            store.add(f"https://k{i % 89}.example.org/{i}")
            i += 1
            if i % 50 == 0:
                store.flush()
                out.send(("flushed", i))


@pytest.mark.slow
@pytest.mark.parametrize("kind", sorted(SPECS))
def test_sigkill_during_lock_free_adds(kind: str, tmp_path: Path) -> None:
    """Two processes add one URL at a time; one is killed at a random moment, 12 times.
    The store reopens without error, holds every flushed URL and (exact) counts exactly
    what it holds: the dead adder's leftovers were repaired."""
    spec = SPECS[kind].format(tmp=tmp_path)
    rnd = random.Random(kind)
    progress = {"flushed": 0, "trying": 0}
    _, other_send = CTX.Pipe(duplex=False)
    other = CTX.Process(target=_race_forever, args=(spec, other_send))
    other.start()
    try:
        for kill in range(12):
            recv, send = CTX.Pipe(duplex=False)
            start = progress["flushed"]  # the URLs after it are added again (one was cut)
            proc = CTX.Process(target=_killed_adder, args=(spec, start, send))
            proc.start()
            send.close()
            assert recv.poll(30), "the adder never started"
            time.sleep(rnd.uniform(0.01, 0.2))
            os.kill(proc.pid, signal.SIGKILL)
            proc.join()
            while recv.poll():
                try:
                    what, upto = recv.recv()
                except EOFError:
                    break
                progress[what] = max(progress[what], upto)
            urls = [f"https://k{i % 89}.example.org/{i}" for i in range(progress["trying"])]
            with open_seen(spec) as store:  # opens (and verifies) whatever the moment of death
                held = store.contains_many(urls[: progress["flushed"]])
                assert all(held), f"kill {kill}: a flushed URL is lost"
    finally:
        os.kill(other.pid, signal.SIGTERM)
        other.join()
    if kind == "exact":
        with ExactStore(f"{tmp_path}/s.exact") as store:  # a writer's session repairs
            store.add_many(["http://after.example/"])
            used = int(np.count_nonzero(store._table))
            assert len(store) == used == int(store._mv[W_COUNT])
    assert progress["flushed"] > 0


def _race_forever(spec: str, out: Connection) -> None:
    """A second live adder, so that the killed one dies among live ones."""
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    with open_seen(spec) as store:
        for i in range(10**9):
            store.add(f"http://other.example/{i}")


# ------------------------------------------------------------ the protocol's words


@lock_free
@pytest.mark.parametrize("kind", ["exact", "bloom"])
def test_a_dead_adder_is_repaired(tmp_path: Path, kind: str) -> None:
    """An adder killed between its slot and its count (exact) leaves a key uncounted and
    itself registered: the next locked section waits for it, takes it for dead, recounts
    and opens a new epoch; lock-free adds then run again."""
    store: ExactStore | BloomStore
    if kind == "exact":
        store = ExactStore(str(tmp_path / "d.exact"), capacity=1000)
    else:
        store = BloomStore(str(tmp_path / "d.bloom"), capacity=1000)
    with store:
        assert store.add("http://a.example/1")
        if isinstance(store, ExactStore):
            # as a dead adder leaves it: its key in a slot, the count not raised
            fp = store._key("http://a.example/dead")  # type: ignore[misc]
            found, slot = store._find(fp)
            assert not found
            store._mv[slot] = fp
        store._mv[W_ADDING] += 1
        probe = store._probe
        assert probe is not None
        # lock-free adds still run (an adder in flight may be alive)
        assert store.add("http://a.example/2")
        assert store._mv[W_ADDING] & IN_FLIGHT == 1
        epoch = int(store._mv[W_ADDING]) >> 32
        started = time.perf_counter()
        assert store.add_many(["http://a.example/3"]) == [True]  # a locked section
        assert time.perf_counter() - started >= 0.0015  # it waited for the adder
        assert store._mv[W_ADDING] == (epoch + 1) << 32  # a new epoch, none in flight
        assert store._mv[W_SEQ] % 2 == 0 and store._mv[W_DIRTY] == 0
        if isinstance(store, ExactStore):
            assert len(store) == 4 == int(np.count_nonzero(store._table))
            assert "http://a.example/dead" in store
        store.verify()
        assert store.add("http://a.example/4") and "http://a.example/4" in store


def test_a_slow_adder_of_an_old_epoch_leaves_the_new_one_alone() -> None:
    words = np.zeros(1024, dtype=np.uint64)
    mv = memoryview(words).cast("B").cast("Q")
    words[W_ADDING] = 3  # epoch 0, three in flight (two of them dead, one slow)
    assert speedups.store_session(mv, 0) == 1  # they did not leave: taken for dead
    assert words[W_SEQ] % 2 == 1
    speedups.store_session(mv, 2)
    assert words[W_ADDING] == 1 << 32
    speedups.store_session(mv, 1)
    assert words[W_SEQ] % 2 == 0
    # a live adder of the new epoch registers: the old one's leaving does not count
    table = np.zeros(64 * 8, dtype=np.uint64)
    words2 = np.concatenate([words, table])
    mv2 = memoryview(words2).cast("B").cast("Q")
    assert speedups.exact_add_locked(mv2, -2, 12345, 64, 400) == 0
    assert words2[W_ADDING] == 1 << 32 and words2[W_COUNT] == 1
    assert speedups.exact_add_locked(mv2, -2, 12345, 64, 400) == 1


def test_the_session_steps_equal_their_reference() -> None:
    rng = np.random.default_rng(3)
    for _ in range(200):
        start = rng.integers(0, 2**40, size=1024, dtype=np.uint64)
        start[W_ADDING] &= np.uint64(~IN_FLIGHT & (2**64 - 1))  # none in flight: no waiting
        a, b = start.copy(), start.copy()
        ma, mb = memoryview(a).cast("B").cast("Q"), memoryview(b).cast("B").cast("Q")
        for op in rng.integers(0, 4, size=6):
            word = int(rng.integers(32, 512))
            assert speedups.store_session(ma, int(op), word) == session_py(mb, int(op), word)
            assert (a == b).all()
    with pytest.raises(ValueError):
        speedups.store_session(ma, 4)
    with pytest.raises(ValueError):
        speedups.store_session(ma, 3, 600)
    with pytest.raises(ValueError):
        speedups.store_session(np.zeros(10, np.uint64), 1)


@lock_free
def test_an_add_that_overlaps_a_locked_section_is_redone(tmp_path: Path) -> None:
    """A process keeps entering and leaving locked sections (the sequence changes) while
    this one adds: the adds that saw it change are redone under the lock (exact: after a
    recount); everything is found and counted."""
    path = str(tmp_path / "o.exact")
    with ExactStore(path, capacity=200_000) as store:
        stop = CTX.Event()
        spinner = CTX.Process(target=_spin_sections, args=(path, stop))
        spinner.start()
        try:
            results = []
            probe = store._probe
            assert probe is not None
            keys = [int(k) for k in np.random.default_rng(1).integers(1, 2**63, 60_000)]
            for k in keys[:30_000]:  # the compiled call alone: some see the sequence change
                results.append(speedups.exact_add_locked(probe[0], -2, k, probe[1], probe[2]))
            assert set(results) <= {-2, 0, 2}
            assert results.count(2) + results.count(-2) > 0, "no add overlapped a section"
            for k, r in zip(keys, results, strict=False):
                if r == 2:
                    store._add_locked(k, recount=True)
                elif r == -2:
                    assert store.add_fingerprint(k)
            news = [store.add_fingerprint(k) for k in keys[30_000:]]  # the store's own path
            assert all(news)
        finally:
            stop.set()
            spinner.join()
        assert store.contains_fingerprints(np.array(keys, dtype=np.uint64)).all()
        assert len(store) == len(set(keys)) == int(np.count_nonzero(store._table))
        # the redo itself: a count a section's plain write left one short is recounted
        store._mv[W_COUNT] -= 1
        assert store._add_locked(keys[0], recount=True) is False
        assert len(store) == len(set(keys))


def _spin_sections(path: str, stop: object) -> None:
    with ExactStore(path) as store:
        while not stop.is_set():  # type: ignore[attr-defined]
            with store._writing:
                pass
            time.sleep(0.0001)


@lock_free
@pytest.mark.parametrize("kind", ["exact", "bloom"])
def test_locked_mode_takes_the_lock(tmp_path: Path, kind: str) -> None:
    """``?locked=1``: every add is a locked section (the sequence moves by two)."""
    spec = f"{kind}:{tmp_path}/l.{kind}?locked=1"
    with open_seen(spec) as store:
        seq = int(store._mv[W_SEQ])  # type: ignore[attr-defined]
        assert store.add("http://l.example/1")
        assert not store.add("http://l.example/1")
        assert int(store._mv[W_SEQ]) == seq + 8  # type: ignore[attr-defined]
    with open_seen(f"{kind}:{tmp_path}/l.{kind}") as store:  # lock-free: it stays
        seq = int(store._mv[W_SEQ])  # type: ignore[attr-defined]
        assert store.add("http://l.example/2")
        assert int(store._mv[W_SEQ]) == seq  # type: ignore[attr-defined]


def _set_version(path: Path, version: int) -> None:
    """Rewrite a mapped store's format version (and its header checksum) in place."""
    with path.open("r+b") as fh:
        head = bytearray(fh.read(252))
        struct.pack_into("<I", head, 16, version)
        fh.seek(0)
        fh.write(sealed(head))


def _version(path: Path) -> int:
    return int(struct.unpack_from("<I", path.read_bytes(), 16)[0])


@pytest.mark.parametrize("kind", ["exact", "bloom"])
def test_a_file_from_before_lock_free_adds_is_read_and_upgraded(kind: str, tmp_path: Path) -> None:
    """Version 1 (every add locked) has the same layout: it opens read-only as it is, and
    the first read-write open writes version 2, which a urlsieve of version 1 refuses
    (it would add beside lock-free adders without the sequence word)."""
    path = tmp_path / f"s.{kind}"
    with open_seen(f"{kind}:{path}") as store:
        store.add_many(["http://a.test/1", "http://a.test/2"])
    assert _version(path) == 2  # new files are version 2
    _set_version(path, 1)
    with open_seen(f"{kind}:{path}?readonly=1") as old:
        assert "http://a.test/1" in old and "http://a.test/3" not in old
    assert _version(path) == 1  # a reader leaves the file as it is
    with open_seen(f"{kind}:{path}") as store:
        assert _version(path) == 2
        assert store.add("http://a.test/3") and not store.add("http://a.test/1")
    with open_seen(f"{kind}:{path}") as again:
        assert all(f"http://a.test/{i}" in again for i in (1, 2, 3))
    _set_version(path, 3)
    with pytest.raises(StoreCorrupt, match=r"format version 3 \(this urlsieve reads 1, 2\)"):
        open_seen(f"{kind}:{path}")


# ------------------------------------------------------------ review (n37-rev)


@pytest.mark.parametrize("fd", [-1, -2])
def test_a_bucket_count_past_the_file_is_refused_not_wrapped(fd: int) -> None:
    """A bucket count near 2**64 made ``HEADER_WORDS / 8 + buckets`` wrap to a small
    number, so the size check passed and the probe read and wrote far out of the buffer
    (a segfault)."""
    words = np.zeros(512 + 8 * 4, dtype=np.uint64)  # the header and 4 buckets
    mv = memoryview(words).cast("B").cast("Q")
    for buckets in (2**64 - 64, 2**64 - 1, 2**64 - 60, 5):
        with pytest.raises(ValueError, match="shorter than its table"):
            speedups.exact_add_locked(mv, fd, 0x123456789ABCDEF0, buckets, 10**9)
    assert speedups.exact_add_locked(mv, fd, 0x123456789ABCDEF0, 4, 10**9) in (0, 1)


@lock_free
def test_a_slow_adder_taken_for_dead_then_killed_leaves_a_store_that_opens(
    tmp_path: Path,
) -> None:
    """The interleaving, step by step (the adder's steps by hand, as its C does them):
    adder registers and reads s0; CAS of its key into a slot; preempted > 2 ms; another
    process's locked section waits 2 ms, takes it for dead, recounts (its key counted),
    opens a new epoch, ends; the adder resumes: count + 1 (atomic), is killed before it
    reads s1 and redoes its add. Nobody is registered, the file is clean: the count is one
    above the slots in use for good."""
    path = str(tmp_path / "z.exact")
    with ExactStore(path, capacity=1000) as adder, ExactStore(path) as other:
        assert adder.add("http://a.example/1")
        adder._mv[W_ADDING] += 1  # registers (epoch 0)
        s0 = int(adder._mv[W_SEQ])
        assert s0 % 2 == 0
        fp = adder._key("http://a.example/zombie")  # type: ignore[misc]
        found, slot = adder._find(fp)
        assert not found
        adder._mv[slot] = fp  # its CAS
        assert other.add_many(["http://a.example/2"]) == [True]  # waits, recounts, new epoch
        assert int(other._mv[W_ADDING]) == 1 << 32
        speedups.store_session(adder._mv, 3, W_COUNT)  # its count + 1; then SIGKILL
        assert int(adder._mv[W_SEQ]) != s0  # (it would have redone its add: never ran)
        assert int(adder._mv[W_COUNT]) == 4  # one above the 3 keys: the straggler's + 1
    with ExactStore(path, readonly=True) as reader:  # a count ahead, explained: no error
        assert int(reader._mv[W_COUNT]) == 4 and int(reader._mv[W_STRAGGLERS]) == 1
    with ExactStore(path) as reopened:  # the first read-write open recounts (n37-rev #1)
        assert len(reopened) == 3 == int(np.count_nonzero(reopened._table))
    with ExactStore(path) as again:  # and the count is right from then on
        again._mv[W_COUNT] += 2  # more than the stragglers can explain: damage
    with pytest.raises(StoreCorrupt, match="3 slots in use, the header counts 5"):
        ExactStore(path)


@pytest.mark.parametrize(
    ("word", "value", "op"),
    [
        (W_SEQ, 2**64 - 1, 0),
        (W_SEQ, 2**64 - 2, 0),
        (W_SEQ, 2**64 - 1, 1),
        (W_ADDING, (2**32 - 1) << 32, 2),
        (W_ADDING, 2**64 - 1, 2),
        (W_COUNT, 2**64 - 1, 3),
    ],
)
def test_the_session_steps_wrap_as_their_reference_does(word: int, value: int, op: int) -> None:
    """Words at the top of their range (a damaged or hostile header): the C wraps; the
    pure-Python reference raised ValueError (memoryview 'Q' takes no 2**64)."""
    a = np.zeros(1024, dtype=np.uint64)
    a[word] = value
    b = a.copy()
    ma, mb = memoryview(a).cast("B").cast("Q"), memoryview(b).cast("B").cast("Q")
    assert speedups.store_session(ma, op, W_COUNT) == session_py(mb, op, W_COUNT)
    assert (a == b).all()
