"""A fleet on one Valkey queue: two real ``urlsieve squid-helper`` processes queue the same
unknown URLs, two real ``urlsieve learn run`` processes crawl and classify them, and one
learner is killed (SIGKILL) while it holds claimed jobs: the other reclaims them when their
lease runs out (XAUTOCLAIM), and every queued URL ends classified, none lost. The learners
share their verdicts on Valkey, so each one's overlay enforces what either learned."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import IO

from tests.learn.origin import PAGES, Route, origin_server
from tests.seen.valkey_fixtures import ServerProcess
from urlsieve.filter import Filter
from urlsieve.learn.queue import Sighting, open_queue
from urlsieve.learn.verdicts import open_verdicts, rule_key

PHRASES = Path(__file__).parent / "data" / "phrases"
COUNT = 24


def _routes() -> dict[str, Route]:
    dirty, clean = PAGES["/en/casino.html"], PAGES["/en/clean.html"]
    routes = {"/robots.txt": PAGES["/robots.txt"]}
    for i in range(COUNT):
        page = dirty if i % 2 else clean
        routes[f"/f/{i}.html"] = Route(page.status, page.headers, page.body, page.expect, 0.4)
    return routes


def _config(tmp: Path, name: str, queue: str, verdicts: str) -> Path:
    hosts = {f"f{i}.test": "127.0.0.1" for i in range(COUNT)}
    state = tmp / name
    conf = tmp / f"{name}.toml"
    conf.write_text(
        f"""
[rules]
lists = ["{tmp / "lists"}"]

[squid]
mode = "redirect"
redirect_url = "http://block.test/?url=%u&category=%c"

[learn]
queue = "{queue}"
verdicts = "{verdicts}"
overlay = "{state / "learned.snap"}"
directory = "{state}"
phrases = ["{PHRASES / "weightedphraselist"}"]
promote_after = 0
batch = 6
lease_seconds = 2

[learn.crawl]
user_agent = "learner-{name}"
per_host = 1
allow_networks = ["127.0.0.0/8"]
hosts = {json.dumps(hosts).replace('":', '" =')}

[learn.spool]
segment_seconds = 0.1
""",
        encoding="utf-8",
    )
    return conf


def _learner(conf: Path, name: str, log: IO[bytes]) -> subprocess.Popen[bytes]:
    command = ["learn", "--config", str(conf), "run", "--consumer", name]
    return subprocess.Popen(
        [sys.executable, "-m", "urlsieve", *command], stdout=log, stderr=subprocess.STDOUT
    )


def test_two_helpers_two_learners_one_killed_nothing_lost(
    tmp_path: Path, valkey_server: ServerProcess
) -> None:
    (tmp_path / "lists" / "blocked").mkdir(parents=True)
    (tmp_path / "lists" / "blocked" / "domains").write_text("blocked.test\n", encoding="utf-8")
    run = uuid.uuid4().hex
    queue_spec = f"valkey://127.0.0.1:{valkey_server.port}/0?prefix=fleet{run}"
    verdicts_spec = f"valkey://127.0.0.1:{valkey_server.port}/0?prefix=verdicts{run}"
    with origin_server(_routes()) as origin:
        urls = [f"http://f{i}.test:{origin.port}/f/{i}.html" for i in range(COUNT)]
        confs = {n: _config(tmp_path, n, queue_spec, verdicts_spec) for n in ("H", "A", "B")}
        # Two helpers, each asked for every URL (as two gateways of one site would be).
        for number in (1, 2):
            lines = "".join(f"{u} 10.0.0.{number}/- - GET\n" for u in urls).encode()
            helper = subprocess.run(
                [sys.executable, "-m", "urlsieve", "squid-helper", "--config", str(confs["H"])],
                input=lines,
                capture_output=True,
                timeout=60,
                check=True,
            )
            assert helper.stdout.count(b"ERR\n") == COUNT  # allow-first: all allowed
        with open_queue(queue_spec) as queue:
            assert queue.stats().waiting == COUNT  # queued once, from both helpers
        logs = {n: open(tmp_path / f"{n}.log", "wb") for n in ("A", "B")}  # noqa: SIM115
        learners = {n: _learner(confs[n], n, logs[n]) for n in ("A", "B")}
        try:
            deadline = time.monotonic() + 30
            while sum(1 for ua, _ in origin.agents if ua == "learner-A") < 3:
                assert time.monotonic() < deadline, "learner A fetched nothing"
                time.sleep(0.02)
            os.kill(learners["A"].pid, signal.SIGKILL)  # with pages in flight
            learners["A"].wait()
            a_fetched = {p for ua, p in origin.agents if ua == "learner-A"}
            deadline = time.monotonic() + 90
            while True:
                with open_queue(queue_spec) as queue:
                    stats = queue.stats()
                if stats.done == COUNT or time.monotonic() > deadline:
                    break
                time.sleep(0.2)
        finally:
            for proc in learners.values():
                if proc.poll() is None:
                    proc.send_signal(signal.SIGTERM)
                    proc.wait(timeout=30)
            for log in logs.values():
                log.close()
        b_log = (tmp_path / "B.log").read_text("utf-8", "replace")
        assert (stats.done, stats.failed, stats.leased, stats.waiting) == (COUNT, 0, 0, 0), (
            stats,
            b_log[-2000:],
        )
        keys = {rule_key(u)[0] for u in urls}
        with open_verdicts(verdicts_spec) as shared:
            stored = {v.key: v for v in shared.all()}
        assert set(stored) == keys  # every queued URL classified, into the shared store
        assert all(stored[rule_key(u)[0]].action == ("block" if i % 2 else "allow")
                   for i, u in enumerate(urls))  # fmt: skip
        # What A had in flight when it died, B fetched again.
        b_fetched = {p for ua, p in origin.agents if ua == "learner-B"}
        assert a_fetched & b_fetched
        # B's overlay enforces every verdict, A's included (the store is shared).
        overlay = Filter.load(tmp_path / "B" / "learned.snap")
        assert all(overlay.check(u).rule is not None for u in urls)


def test_a_learner_without_its_valkey_says_so_retries_and_loses_nothing(
    tmp_path: Path, fresh_server: ServerProcess
) -> None:
    (tmp_path / "lists" / "blocked").mkdir(parents=True)
    (tmp_path / "lists" / "blocked" / "domains").write_text("blocked.test\n", encoding="utf-8")
    queue_spec = f"{fresh_server.url}?prefix=down&timeout=1"
    with origin_server(_routes()) as origin:
        urls = [f"http://f{i}.test:{origin.port}/f/{i}.html" for i in range(4)]
        with open_queue(queue_spec) as queue:
            queue.offer([Sighting(u) for u in urls])
        fresh_server.kill()  # the server goes away with the URLs queued
        conf = _config(tmp_path, "A", queue_spec, str(tmp_path / "A" / "verdicts.db"))
        with open(tmp_path / "A.log", "wb") as log:
            learner = _learner(conf, "A", log)
            try:
                deadline = time.monotonic() + 30
                while b"queue unavailable" not in (tmp_path / "A.log").read_bytes():
                    assert time.monotonic() < deadline, "the learner did not say so"
                    time.sleep(0.1)
                fresh_server.start()  # back, with its append-only file
                keys = {rule_key(u)[0] for u in urls}
                while True:
                    store = tmp_path / "A" / "verdicts.db"
                    found = {v.key for v in open_verdicts(store).all()} if store.exists() else set()
                    if found == keys or time.monotonic() > deadline + 30:
                        break
                    time.sleep(0.2)
            finally:
                learner.send_signal(signal.SIGTERM)
                learner.wait(timeout=30)
    assert found == keys, (tmp_path / "A.log").read_text("utf-8", "replace")[-2000:]
