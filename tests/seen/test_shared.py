"""Stores shared by processes: concurrent writers lose nothing, SIGKILL loses nothing flushed.

A backend joins these tests by adding a spec template to ``SHARED_SPECS``
(``{tmp}`` is a fresh directory); one that is not registered (yet) is left out.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import random
import signal
import time
from multiprocessing.connection import Connection
from pathlib import Path

import pytest

from urlsieve.seen import BACKENDS, open_seen

SHARED_SPECS = {
    # Small initial sizes, so that growth happens while the writers race.
    "exact": "exact:{tmp}/seen.exact?capacity=1000",
    "bloom": "bloom:{tmp}/seen.bloom?capacity=100000&error=0.01",
    "bitmap": "bitmap:{tmp}/bitmap",
}
EXACT = {"exact"}
SPECS = [pytest.param(spec, id=name) for name, spec in SHARED_SPECS.items() if name in BACKENDS]

WRITERS = 4
PER_WRITER = 250_000
CTX = multiprocessing.get_context("fork")


def url(writer: int, i: int) -> str:
    return f"http://w{writer}-{i % 509}.example.com/page/{i}?s={i * 2654435761 % 1000003}"


def _writer(spec: str, writer: int, out: Connection) -> None:
    rnd = random.Random(writer)
    new = 0
    with open_seen(spec) as store:
        i = 0
        while i < PER_WRITER:
            size = rnd.randint(1, 2000)
            batch = [url(writer, j) for j in range(i, min(i + size, PER_WRITER))]
            if size <= 20:  # now and then one at a time
                new += sum(store.add(u) for u in batch)
            else:
                new += sum(store.add_many(batch))
            i += len(batch)
        store.flush()
    out.send(new)


@pytest.mark.slow
@pytest.mark.parametrize("template", SPECS)
def test_concurrent_writers_lose_nothing(template: str, tmp_path: Path) -> None:
    spec = template.format(tmp=tmp_path)
    receivers, procs = [], []
    for w in range(WRITERS):
        recv, send = CTX.Pipe(duplex=False)
        proc = CTX.Process(target=_writer, args=(spec, w, send))
        proc.start()
        receivers.append(recv)
        procs.append(proc)
    reported_new = sum(r.recv() for r in receivers)
    for proc in procs:
        proc.join()
        assert proc.exitcode == 0
    with open_seen(spec) as store:
        for w in range(WRITERS):
            found = store.contains_many([url(w, i) for i in range(PER_WRITER)])
            assert sum(found) == PER_WRITER, f"writer {w}: {PER_WRITER - sum(found)} URLs lost"
        if template.partition(":")[0] in EXACT:
            assert reported_new == len(store) == WRITERS * PER_WRITER
        else:
            assert len(store) == reported_new  # every count increment survived
            assert reported_new > WRITERS * PER_WRITER * 0.98


# ------------------------------------------------------------------------ crashes

CRASH_SPECS = {
    "exact": "exact:{tmp}/seen.exact?capacity=200",
    "bloom": "bloom:{tmp}/seen.bloom?capacity=2000&error=0.01",
    # Seed 002 at a reduced width (256 files of 8 KB) so each reopen stays cheap.
    "bitmap": "bitmap:{tmp}/bitmap?signature=crc32&width=24",
}
CRASH_PARAMS = [
    pytest.param(spec, id=name) for name, spec in CRASH_SPECS.items() if name in BACKENDS
]
KILLS = 20


def crash_url(i: int) -> str:
    return f"https://c{i % 97}.example.org/x/{i}"


def _crash_writer(spec: str, seed: int, start: int, out: Connection) -> None:
    """Add URLs from ``start`` on until killed, flushing now and then, and say how far it got."""
    rnd = random.Random(seed)
    with open_seen(spec) as store:
        i = start  # the previous writers flushed every URL below
        while True:
            batch = [crash_url(j) for j in range(i, i + rnd.randint(1, 400))]
            out.send(("trying", i + len(batch)))  # nothing at or above this was touched
            if len(batch) < 10:
                for u in batch:
                    store.add(u)
            else:
                store.add_many(batch)
            i += len(batch)
            if rnd.random() < 0.2:
                store.flush()
                out.send(("flushed", i))  # every URL below i was added before this flush


@pytest.mark.slow
@pytest.mark.parametrize("template", CRASH_PARAMS)
def test_sigkill_at_random_moments_loses_nothing_flushed(template: str, tmp_path: Path) -> None:
    spec = template.format(tmp=tmp_path)
    rnd = random.Random(1234)
    progress = {"flushed": 0, "trying": 0}
    kills_after_a_flush = 0
    for kill in range(KILLS):
        recv, send = CTX.Pipe(duplex=False)
        start = progress["flushed"]
        proc = CTX.Process(target=_crash_writer, args=(spec, kill, start, send))
        proc.start()
        send.close()
        assert recv.poll(30), "the writer never started"
        if kill % 2:
            # Every other kill waits for a flush of this writer's own, so the check
            # below covers flushed data whatever the machine's speed.
            deadline = time.monotonic() + 60
            while progress["flushed"] <= start and time.monotonic() < deadline:
                if recv.poll(1):
                    what, upto = recv.recv()
                    progress[what] = max(progress[what], upto)
            kills_after_a_flush += progress["flushed"] > start
        time.sleep(rnd.uniform(0, 0.25))
        os.kill(proc.pid, signal.SIGKILL)
        proc.join()
        with contextlib.suppress(EOFError):  # reports sent before the kill
            while recv.poll():
                what, upto = recv.recv()
                progress[what] = max(progress[what], upto)
        flushed, tried = progress["flushed"], progress["trying"]
        with open_seen(spec) as store:  # opens without error after every kill
            assert all(store.contains_many([crash_url(i) for i in range(flushed)])), kill
            if template.partition(":")[0] in EXACT:
                present = sum(store.contains_many([crash_url(i) for i in range(tried)]))
                assert len(store) == present  # the count was repaired
    assert kills_after_a_flush == KILLS // 2
    assert progress["flushed"] > 0
