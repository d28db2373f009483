"""Crash safety of the persistent seed stores: SIGKILL at random moments, 20 times each.

A writer adds URLs and flushes every 37 adds, reporting each flushed index
on a pipe; it is killed at a random moment (while opening, adding, flushing
or splitting; every other run only after its first flush). The store must
then open without error and contain every URL whose add returned before the
last reported flush.
"""

from __future__ import annotations

import multiprocessing
import os
import random
import signal
import time
from pathlib import Path

import pytest

from urlsieve.seen import open_seen

SPECS = {
    "bitmap-md5": "bitmap:{dir}/bm?signature=md5&width=26",
    "bitmap-crc32": "bitmap:{dir}/bm?width=24",
    "buckets": "buckets:{dir}/seen.buckets?buckets=256&width=16&slots=16",
    # Small leaves, so that the writers split leaves (and die while splitting) too.
    "dsbf": "dsbf:{dir}/seen.dsbf?capacity=500&error=0.01&leaf_bits=4096",
}


def _crasher(spec: str, run: int, fd: int) -> None:
    with open_seen(spec) as store:
        for i in range(10**9):
            store.add(f"http://crash.example/{run}/{i}")
            if i % 37 == 36:
                store.flush()
                os.write(fd, i.to_bytes(8, "little"))


def _last_reported(read_fd: int, data: bytes = b"") -> int:
    while chunk := os.read(read_fd, 65536):
        data += chunk
    os.close(read_fd)
    whole = len(data) // 8 * 8
    return int.from_bytes(data[whole - 8 : whole], "little") if whole else -1


@pytest.mark.slow
@pytest.mark.parametrize("kind", sorted(SPECS))
def test_sigkill_at_random_moments_keeps_every_flushed_add(kind: str, tmp_path: Path) -> None:
    rnd = random.Random(kind)
    ctx = multiprocessing.get_context("fork")
    spec = SPECS[kind].format(dir=tmp_path)
    flushed: list[str] = []
    for run in range(20):
        read_fd, write_fd = os.pipe()
        proc = ctx.Process(target=_crasher, args=(spec, run, write_fd))
        proc.start()
        os.close(write_fd)
        head = b""
        if run % 2:  # odd runs: after the first flush (however loaded the machine is)
            head = os.read(read_fd, 8)
        time.sleep(rnd.uniform(0.0, 0.3))  # even runs: any moment, opening included
        os.kill(proc.pid, signal.SIGKILL)
        proc.join()
        last = _last_reported(read_fd, head)
        flushed += [f"http://crash.example/{run}/{i}" for i in range(last + 1)]
        with open_seen(spec) as store:  # opens without error, whatever the moment of death
            assert all(store.contains_many(flushed)), f"run {run} lost a flushed add"
    assert len(flushed) >= 10 * 37  # at least the odd runs got to flush
