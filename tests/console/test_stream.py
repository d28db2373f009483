"""The decision stream: several processes appending, the console tailing, the Squid
helper (filter and policy) and the service writing what they decided."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st
from starlette.testclient import TestClient

from tests.console.test_pages import LOOPBACK, filter_config
from tests.gateway.test_service_trust import write_config as policy_config
from urlsieve.console.stream import (
    DecisionWriter,
    LiveDecisions,
    StreamReader,
    _event_of,
    event,
)
from urlsieve.gateway.config import load_config
from urlsieve.service.app import create_app

WRITER = """
import sys
from urlsieve.console.stream import DecisionWriter, event
writer = DecisionWriter(sys.argv[1])
for k in range(int(sys.argv[2])):
    writer.record(event(f"http://p{sys.argv[3]}.test/{k}/" + "x" * (k % 700), "block",
                        origin="helper", category="c"))
writer.close()
"""


def test_processes_appending_at_once_never_mix_their_lines(tmp_path: Path) -> None:
    path = tmp_path / "decisions.jsonl"
    reader = StreamReader(str(path))
    procs = [
        subprocess.Popen([sys.executable, "-c", WRITER, str(path), "3000", str(n)])
        for n in range(3)
    ]
    seen: list[dict[str, object]] = []
    while any(p.poll() is None for p in procs):
        seen += reader.poll()
        time.sleep(0.01)
    seen += reader.poll()
    assert [p.returncode for p in procs] == [0, 0, 0]
    assert reader.bad_lines == 0
    assert len(seen) == 9000
    for n in range(3):
        mine = [e["url"] for e in seen if str(e["url"]).startswith(f"http://p{n}.test/")]
        assert [str(u).split("/")[3] for u in mine] == [str(k) for k in range(3000)]


def test_the_reader_keeps_partial_lines_and_follows_a_truncation(tmp_path: Path) -> None:
    path = tmp_path / "d.jsonl"
    reader = StreamReader(str(path))
    assert reader.poll() == []  # no file yet
    line = json.dumps(event("http://a.test/", "allow", origin="service")).encode()
    path.write_bytes(line[:10])
    assert reader.poll() == []
    with open(path, "ab") as fh:
        fh.write(line[10:] + b"\nnot json\n" + b'{"t": 1, "action": "nope", "url": "x"}\n')
    got = reader.poll()
    assert [e["url"] for e in got] == ["http://a.test/"] and reader.bad_lines == 2
    path.write_bytes(line + b"\n")  # logrotate's copytruncate: shorter than before
    path.write_bytes(b"")
    path.write_bytes(line + b"\n")
    assert [e["url"] for e in reader.poll()] == ["http://a.test/"]


def test_a_writer_that_cannot_write_counts_and_goes_on(tmp_path: Path) -> None:
    logged: list[str] = []
    writer = DecisionWriter(str(tmp_path / "missing" / "d.jsonl"), log=logged.append)
    writer.record(event("http://a.test/", "allow", origin="service"))
    writer.close()
    assert writer.stats.errors == 1 and writer.stats.written == 0
    assert logged and "decision stream" in logged[0]


@given(st.binary(max_size=400))
def test_any_line_is_read_or_refused(raw: bytes) -> None:
    got = _event_of(raw)
    assert got is None or got["action"] in ("allow", "block", "warn", "unknown", "error")


@given(st.text(max_size=50))
def test_any_text_in_a_line_comes_out_encodable(text: str) -> None:
    line = json.dumps({"t": 1, "action": "block", "url": text, "client": text})
    got = _event_of(line.encode())
    assert got is not None
    got["url"].encode("utf-8")
    got["client"].encode("utf-8")


def test_live_decisions_filter_and_tally() -> None:
    live = LiveDecisions(keep=100)
    now = 1_800_000_000.0
    events = [
        event(
            f"http://h{k}.test/",
            "block" if k % 2 else "allow",
            origin="helper",
            client=f"10.0.0.{k % 3}",
            category="ads" if k % 2 else None,
            when=now - k * 60,
        )
        for k in range(10)
    ]
    live.add(events, now)
    assert [e["url"] for e in live.after(0, {"action": "block", "client": "10.0.0.1"})] == [
        "http://h7.test/",
        "http://h1.test/",
    ]
    assert live.after(live.seq, {}) == []
    hour = live.series(60, 1, now)
    assert sum(b.requests for b in hour) == 10 and sum(b.blocked for b in hour) == 5
    assert sum(b.categories["ads"] for b in hour) == 5


def _helper(conf: Path, lines: bytes) -> bytes:
    done = subprocess.run(
        [sys.executable, "-m", "urlsieve", "squid-helper", "--config", str(conf)],
        input=lines,
        capture_output=True,
        check=True,
        timeout=60,
    )
    return done.stdout


def _read(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text("utf-8").splitlines()]


def test_the_filter_helper_writes_what_it_answered(tmp_path: Path) -> None:
    conf = filter_config(tmp_path)
    conf.write_text(
        conf.read_text("utf-8")
        + '[squid]\nmode = "redirect"\nredirect_url = "http://gw/block?url=%u"\n',
        encoding="utf-8",
    )
    out = _helper(
        conf,
        b"0 http://evil.test/a 10.0.0.5/- alice GET\n"
        b"1 http://fine.test/ 10.0.0.6/- - GET\n"
        b"2 \x00\xff\n",
    )
    assert out.count(b"\n") == 3
    events = _read(tmp_path / "decisions.jsonl")
    assert [(e["action"], e["client"]) for e in events] == [
        ("block", "10.0.0.5"),
        ("unknown", "10.0.0.6"),
        ("error", None),
    ]
    assert events[0]["category"] == "malware" and events[0]["user"] == "alice"
    assert str(events[0]["rule"]).endswith("lists/malware/domains:1")
    assert events[0]["pid"] != os.getpid() and events[0]["origin"] == "helper"


def test_the_policy_helper_writes_the_group(tmp_path: Path) -> None:
    conf = policy_config(tmp_path, 8399, '["10.0.1.0/24"]', "")
    conf.write_text(
        conf.read_text("utf-8") + f'[console]\ndecision_log = "{tmp_path / "d.jsonl"}"\n',
        encoding="utf-8",
    )
    _helper(
        conf, b"http://games.example/ 10.0.1.5/- - GET\nhttp://games.example/ 10.9.9.9/- - GET\n"
    )
    events = _read(tmp_path / "d.jsonl")
    assert [(e["action"], e["group"], e["category"]) for e in events] == [
        ("block", "pupils", "games"),
        ("allow", "staff", None),
    ]


def test_the_service_writes_its_checks(tmp_path: Path) -> None:
    config = load_config(str(filter_config(tmp_path)), env={})
    with TestClient(create_app(config), client=LOOPBACK) as c:
        c.get("/v1/check", params={"url": "http://evil.test/"})
        c.post("/v1/check", json={"urls": ["http://fine.test/", "http://[bad/"]})
        live = c.app.state.urlsieve.console.live  # type: ignore[attr-defined]
        assert [e["action"] for e in live.recent] == ["block", "unknown"]  # at once
        time.sleep(0.5)  # the console's tail has read the file: its own lines skipped
        assert len(live.recent) == 2
    events = _read(tmp_path / "decisions.jsonl")
    assert [(e["action"], e["origin"], e["client"]) for e in events] == [
        ("block", "service", "127.0.0.1"),
        ("unknown", "service", "127.0.0.1"),
    ]
