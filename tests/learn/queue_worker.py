"""A producer or a learner process on a queue, for the fleet and crash tests.

    python -m tests.learn.queue_worker produce SPEC URLS_FILE BATCH
    python -m tests.learn.queue_worker consume SPEC NAME OUT LEASE STOP [HANG_AFTER CLAIMED]

A producer offers every line of URLS_FILE (five clients) in batches. A learner claims
jobs, "classifies" each (a short sleep), appends ``url<TAB>name`` to OUT, then calls
``done``; it exits once STOP exists and the queue is empty. With HANG_AFTER it
finishes that many jobs, then claims one more batch, writes those URLs to CLAIMED and
hangs (the test kills it there, jobs leased and unfinished).

The test side (``run_fleet``, ``check_exactly_once``) drives the same scenario for the SQLite
crash test and the Valkey fleet test: two producers, two learners, one learner killed.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from urlsieve.exceptions import QueueUnavailable
from urlsieve.learn.queue import Sighting, open_queue


def produce(spec: str, urls_file: str, batch: int) -> int:
    with open(urls_file, encoding="utf-8") as f:
        urls = f.read().splitlines()
    with open_queue(spec) as queue:
        for lo in range(0, len(urls), batch):
            chunk = urls[lo : lo + batch]
            queue.offer([Sighting(u, f"client-{(lo + i) % 5}") for i, u in enumerate(chunk)])
    return 0


def consume(argv: list[str]) -> int:
    spec, name, out, lease, stop = argv[0], argv[1], argv[2], float(argv[3]), argv[4]
    argv = argv[5:]
    hang_after = int(argv[0]) if argv else None
    claimed_file = argv[1] if argv else None
    finished = 0
    deadline = time.monotonic() + 120
    with open_queue(spec) as queue, open(out, "a", encoding="utf-8") as sink:
        while time.monotonic() < deadline:
            try:
                jobs = queue.claim(name, 4, lease=lease)
            except QueueUnavailable:
                time.sleep(0.05)
                continue
            if hang_after is not None and finished >= hang_after and jobs:
                assert claimed_file is not None
                with open(claimed_file + ".tmp", "w", encoding="utf-8") as f:
                    f.write("".join(j.url + "\n" for j in jobs))
                os.replace(claimed_file + ".tmp", claimed_file)
                time.sleep(600)  # killed here, its jobs leased and unfinished
            if not jobs:
                if os.path.exists(stop) and queue.depth() == 0:
                    return 0
                time.sleep(0.02)
                continue
            for job in jobs:
                time.sleep(0.005)  # "classify"
                sink.write(f"{job.url}\t{name}\n")
                sink.flush()
                queue.done([job])
                finished += 1
    return 3  # timed out


ROOT = Path(__file__).resolve().parents[2]


@dataclass
class FleetResult:
    distinct: set[str]
    lines: list[tuple[str, str]]
    claimed_by_victim: list[str]


def _spawn(*args: str) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{ROOT / 'src'}"}
    return subprocess.Popen(
        [sys.executable, "-m", "tests.learn.queue_worker", *args],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


def _wait(proc: subprocess.Popen[bytes], timeout: float) -> None:
    try:
        _, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise AssertionError(f"worker {proc.args!r} did not finish in {timeout}s") from None
    assert proc.returncode == 0, f"worker {proc.args!r} failed: {err.decode(errors='replace')}"


def run_fleet(spec: str, work: Path, *, urls: int = 300, lease: float = 1.0) -> FleetResult:
    """Two producers (overlapping URL sets, duplicates), two learners; the second learner
    is SIGKILLed with a batch leased; the survivor must finish everything."""
    rng = random.Random(7)
    pool = [f"http://h{i % 23}.example/page/{i}" for i in range(urls)]
    sets = [pool[: urls * 2 // 3], pool[urls // 3 :]]  # the middle third is offered by both
    files = []
    for n, chosen in enumerate(sets):
        lines = chosen + rng.sample(chosen, len(chosen) // 4)  # duplicates inside a producer
        rng.shuffle(lines)
        path = work / f"urls{n}.txt"
        path.write_text("".join(u + "\n" for u in lines), encoding="utf-8")
        files.append(path)
    stop = work / "stop"
    claimed = work / "victim-claimed"
    procs: list[subprocess.Popen[bytes]] = []
    try:
        victim = _spawn(
            "consume", spec, "victim", str(work / "out-victim"), str(lease), str(stop),
            "8", str(claimed),
        )  # fmt: skip
        procs.append(victim)
        producers = [_spawn("produce", spec, str(f), "20") for f in files]
        procs += producers
        deadline = time.monotonic() + 60
        while not claimed.exists():
            assert victim.poll() is None, victim.communicate()[1].decode(errors="replace")
            assert time.monotonic() < deadline, "the victim never claimed its last batch"
            time.sleep(0.01)
        victim.send_signal(signal.SIGKILL)
        victim.communicate(timeout=10)
        survivor = _spawn(
            "consume", spec, "survivor", str(work / "out-survivor"), str(lease), str(stop)
        )
        procs.append(survivor)
        for p in producers:
            _wait(p, 60)
        stop.touch()
        _wait(survivor, 90)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.communicate(timeout=10)  # reap it and close its pipe
    seen: list[tuple[str, str]] = []
    for name in ("out-victim", "out-survivor"):
        path = work / name
        if path.exists():
            for line in path.read_text(encoding="utf-8").splitlines():
                url, _, who = line.partition("\t")
                seen.append((url, who))
    return FleetResult(
        distinct=set(sets[0]) | set(sets[1]),
        lines=seen,
        claimed_by_victim=claimed.read_text(encoding="utf-8").splitlines(),
    )


def check_exactly_once(result: FleetResult, done: int) -> None:
    classified = [url for url, _ in result.lines]
    assert len(classified) == len(set(classified)), "a URL was classified twice"
    assert set(classified) == result.distinct, "a queued URL was lost"
    assert done == len(result.distinct)
    by = dict(result.lines)
    assert result.claimed_by_victim, "the victim held no jobs when killed"
    for url in result.claimed_by_victim:  # leased by the dead learner, then reclaimed
        assert by[url] == "survivor"
    assert any(who == "victim" for _, who in result.lines), "the victim did no work first"


def main(argv: list[str]) -> int:
    if argv[0] == "produce":
        return produce(argv[1], argv[2], int(argv[3]))
    if argv[0] == "consume":
        return consume(argv[1:])
    raise SystemExit(f"unknown mode {argv[0]!r}")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
