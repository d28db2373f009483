"""squidGuard's ``log`` statements: the same files with the same lines as the real
squidGuard 1.6 (differential, under faketime), a JSON-lines log with the rule that
decided, reopened on SIGHUP (logrotate), written off the request path, and a full disk
that never blocks or stops the helper."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.policy.test_squidguard_differential import run_squidguard
from urlsieve.gateway.live import LiveRules
from urlsieve.gateway.policy_helper import PolicyHelper
from urlsieve.gateway.protocol import HelperMode
from urlsieve.gateway.squid import HelperSettings
from urlsieve.policy.blocklog import RequestLog
from urlsieve.policy.build import build_rules
from urlsieve.policy.engine import PolicyEngine
from urlsieve.policy.native import read_native, to_toml
from urlsieve.policy.squidguard import read_squidguard

WHEN = "2026-05-04 10:00:00"
_STAMP = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d \[\d+\] ")


def _tree(root: Path) -> Path:
    db, logs = root / "db", root / "log"
    db.mkdir()
    logs.mkdir()
    (db / "bad").write_text("bad.test\nevil.test\n")
    (db / "good").write_text("good.test\n")
    (db / "games").write_text("games.test\n")
    conf = root / "squidGuard.conf"
    conf.write_text(
        f"dbhome {db}\nlogdir {logs}\n"
        "dest bad {\n domainlist bad\n log verbose bad.log\n}\n"
        "dest good {\n domainlist good\n}\n"
        "dest games {\n domainlist games\n log anonymous games.log\n}\n"
        "rew r {\n s@(/old)@/new@\n log rew.log\n}\n"
        "src kids {\n ip 10.0.0.0/24\n log anonymous verbose kids.log\n}\n"
        "src staff {\n user alice bob\n}\n"
        "acl {\n"
        " kids {\n pass good !bad !games !in-addr all\n rewrite r\n"
        " redirect http://block.test/k\n }\n"
        " staff {\n pass !bad all\n }\n"
        " default {\n pass !bad !games none\n redirect http://block.test/d\n"
        " log verbose default.log\n }\n"
        "}\n"
    )
    return conf


def _lines() -> list[str]:
    lines = []
    for host in ("bad.test", "www.evil.test", "good.test", "games.test", "other.test", "1.2.3.4"):
        for path in ("/", "/old/x"):
            for client, user in (
                ("10.0.0.5/pc1", "carol"),
                ("10.9.0.5/-", "alice"),
                ("10.9.0.6/-", "-"),
            ):
                for method in ("GET", "POST"):
                    lines.append(f"http://{host}{path} {client} {user} {method}")
    return lines


def _files(logs: Path) -> dict[str, list[str]]:
    return {
        p.name: [_STAMP.sub("", line) for line in p.read_text().splitlines()]
        for p in sorted(logs.iterdir())
        if p.name != "squidGuard.log" and p.suffix == ".log"
    }


def _helper(conf: Path, request_log: RequestLog) -> PolicyHelper:
    read = read_squidguard(conf)
    rules = build_rules(read.policy)
    engine = PolicyEngine(read.policy, rules.filter, expressions=rules.expressions)
    return PolicyHelper(
        LiveRules(lambda: engine),
        HelperSettings(mode=HelperMode.REWRITE, redirect_url="http://unused.test/", channels=False),
        request_log=request_log,
    )


def test_log_files_equal_squidguards(tmp_path: Path) -> None:
    ours_root, theirs_root = tmp_path / "ours", tmp_path / "theirs"
    ours_root.mkdir()
    theirs_root.mkdir()
    lines = _lines()
    replies = run_squidguard(_tree(theirs_root), lines, WHEN)
    request_log = RequestLog(str(ours_root / "log" / "decisions.jsonl"))
    helper = _helper(_tree(ours_root), request_log)
    # one batch (the fast path) and line by line (the usual path): both log
    ours = [r.rstrip("\n") for r in helper.handle_batch([ln.encode() for ln in lines[:40]])]
    ours += [helper.handle(ln.encode()).rstrip("\n") for ln in lines[40:]]
    request_log.close()
    assert ours == replies
    theirs_files, ours_files = _files(theirs_root / "log"), _files(ours_root / "log")
    assert set(theirs_files) == {"bad.log", "default.log", "games.log", "kids.log", "rew.log"}
    assert ours_files == theirs_files
    records = [
        json.loads(x) for x in (ours_root / "log" / "decisions.jsonl").read_text().splitlines()
    ]
    assert len(records) == len(lines)
    blocked = next(r for r in records if r["target"] == "bad")
    assert blocked["action"] == "REDIRECT" and blocked["rule"].endswith("/db/bad:1")
    assert request_log.stats.errors == 0


def test_the_line_format_and_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    try:
        stamp = 1777888800.0  # 2026-05-04 10:00:00 UTC
        request_log = RequestLog(clock=lambda: stamp)
        helper = _helper(_tree(tmp_path), request_log)
        helper.handle(b"http://bad.test/ 10.0.0.5/pc1 carol GET")
        request_log.close()
        line = (tmp_path / "log" / "bad.log").read_text()
        assert line == (
            f"2026-05-04 10:00:00 [{os.getpid()}] Request(kids/bad/-) http://bad.test/ "
            "10.0.0.5/pc1 carol GET REDIRECT\n"
        )
    finally:
        monkeypatch.undo()
        time.tzset()


def test_reopen_after_logrotate(tmp_path: Path) -> None:
    request_log = RequestLog()
    helper = _helper(_tree(tmp_path), request_log)
    helper.handle(b"http://bad.test/1 10.0.0.5/- - GET")
    _drain(request_log)
    log = tmp_path / "log" / "bad.log"
    log.rename(tmp_path / "log" / "bad.log.1")
    helper.handle(b"http://bad.test/2 10.0.0.5/- - GET")  # still the moved file
    _drain(request_log)
    request_log.reopen()
    helper.handle(b"http://bad.test/3 10.0.0.5/- - GET")
    request_log.close()
    assert "bad.test/3" in log.read_text() and "bad.test/1" not in log.read_text()
    assert "bad.test/2" in (tmp_path / "log" / "bad.log.1").read_text()


def _drain(request_log: RequestLog) -> None:
    deadline = time.monotonic() + 5
    while request_log._queue.qsize() and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.05)


def test_a_full_disk_never_blocks_the_helper(tmp_path: Path) -> None:
    said: list[str] = []
    request_log = RequestLog("/dev/full", log=said.append)
    helper = _helper(_tree(tmp_path), request_log)
    for k in range(200):
        assert helper.handle(f"http://bad.test/{k} 10.0.0.5/- - GET".encode()).startswith("OK ")
    request_log.close()
    assert request_log.stats.errors >= 200
    assert len(said) == 1 and "/dev/full" in said[0]


def test_a_full_queue_drops_and_counts(tmp_path: Path) -> None:
    request_log = RequestLog(str(tmp_path / "d.jsonl"), queue_size=2)
    gate = threading.Event()
    write = request_log._write_item
    request_log._write_item = lambda item: (gate.wait(5), write(item))  # type: ignore[method-assign]
    helper = _helper(_tree(tmp_path), request_log)
    for k in range(20):
        helper.handle(f"http://bad.test/{k} 10.0.0.5/- - GET".encode())
    assert request_log.stats.dropped >= 10  # the request path did not wait
    gate.set()
    request_log.close()


def test_import_keeps_the_logs(tmp_path: Path) -> None:
    read = read_squidguard(_tree(tmp_path))
    again = read_native(__import__("tomllib").loads(to_toml(read.policy)), str(tmp_path / "u.toml"))
    assert again.logs == read.policy.logs
    assert again.logs[("src", "kids")].anonymous and again.logs[("src", "kids")].verbose


def test_the_helper_process_reopens_on_sighup(tmp_path: Path) -> None:
    conf = _tree(tmp_path)
    proc = subprocess.Popen(
        [sys.executable, "-m", "urlsieve", "squid-helper", "--squidguard-conf", str(conf),
         "--json-log", str(tmp_path / "log" / "d.jsonl")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )  # fmt: skip
    assert proc.stdin is not None and proc.stdout is not None
    log = tmp_path / "log" / "bad.log"

    def ask(k: int) -> None:
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(f"http://bad.test/{k} 10.0.0.5/- - GET\n".encode())
        proc.stdin.flush()
        assert proc.stdout.readline().startswith(b"OK ")

    ask(1)
    deadline = time.monotonic() + 10
    while not log.exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    log.rename(tmp_path / "log" / "bad.log.1")
    proc.send_signal(signal.SIGHUP)
    time.sleep(0.3)
    ask(2)
    _out, err = proc.communicate(timeout=30)
    assert b"request logs: " in err
    assert "bad.test/2" in log.read_text()
    assert "bad.test/1" in (tmp_path / "log" / "bad.log.1").read_text()
