"""The Squid helper: replies per mode, failure modes, bad lines, the stdin/stdout loop, and
reloads (SIGHUP and file change) in a real helper process."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from urlsieve import Filter
from urlsieve.gateway import FailureMode, HelperMode, HelperSettings, LiveRules, SquidHelper
from urlsieve.gateway.squid import serve
from urlsieve.match.snapshot import compile_snapshot
from urlsieve.rules.model import BLOCK, parse_rule

BLOCK_PAGE = "http://block.lan/?url=%u&cat=%c&client=%a"


def rules_filter() -> Filter:
    return Filter(
        [
            parse_rule("evil.com", BLOCK, "malware", "lists/malware/domains", 7),
            parse_rule("ads.example/banners/", BLOCK, "ads", "lists/ads/urls", 3),
        ]
    )


def helper(mode: HelperMode = HelperMode.REDIRECT, **kw: object) -> SquidHelper:
    settings = HelperSettings(
        mode=mode,
        redirect_url=None if mode is HelperMode.ACL else BLOCK_PAGE,
        **kw,  # type: ignore[arg-type]
    )
    return SquidHelper(LiveRules(rules_filter), settings)


EXTRAS = "10.0.0.7/pc7.lan - GET myip=10.0.0.1 myport=3128"


def test_redirect_mode() -> None:
    h = helper()
    assert h.handle(f"http://www.evil.com/x {EXTRAS}") == (
        'OK status=302 url="http://block.lan/?url=http%3A%2F%2Fwww.evil.com%2Fx'
        '&cat=malware&client=10.0.0.7"\n'
    )
    assert h.handle(f"http://good.org/ {EXTRAS}") == "ERR\n"
    assert (h.stats.blocked, h.stats.allowed) == (1, 1)


def test_redirect_status_and_rewrite_mode() -> None:
    assert helper(redirect_status=307).handle("http://evil.com/").startswith("OK status=307 url=")
    assert helper(HelperMode.REWRITE).handle("0 http://evil.com/ 1.2.3.4/- - GET") == (
        '0 OK rewrite-url="http://block.lan/?url=http%3A%2F%2Fevil.com%2F&cat=malware'
        '&client=1.2.3.4"\n'
    )


def test_acl_mode_tags_the_category() -> None:
    h = helper(HelperMode.ACL)
    assert h.handle("5 http://ads.example/banners/b.gif 127.0.0.1 - GET -") == (
        '5 OK tag="ads" message="blocked by lists/ads/urls:3" log="blocked by lists/ads/urls:3"\n'
    )
    assert h.handle("6 http://ads.example/other 127.0.0.1 - GET -") == "6 ERR\n"


@pytest.mark.parametrize(
    "spelling",
    [
        "http://EVIL.COM./",
        "http://evil.com:8080/x",
        "http://user:pw@evil.com/",
        "http://%65vil.com/",
        "http://a.b.evil.com/%2e%2e/x",
        "evil.com:443",  # CONNECT authority
        "http://ads.example/x/../banners/./a.gif",
        "http://ads.example//banners//a.gif",
    ],
)
def test_evasion_spellings_are_blocked(spelling: str) -> None:
    assert helper(HelperMode.ACL).handle(f"1 {spelling} 127.0.0.1 - GET -").startswith("1 OK ")


def test_channel_ids_are_echoed_for_every_reply_kind() -> None:
    h = helper()
    assert h.handle("12 http://evil.com/").startswith("12 OK ")
    assert h.handle("13 http://good.org/") == "13 ERR\n"
    assert h.handle("14 javascript:alert(1)").startswith("14 OK ")  # fail closed


def test_bad_lines_get_bh_and_the_helper_goes_on() -> None:
    logged: list[str] = []
    h = SquidHelper(
        LiveRules(rules_filter), HelperSettings(redirect_url=BLOCK_PAGE), log=logged.append
    )
    assert h.handle("") == 'BH message="empty request line: expected a URL"\n'
    assert h.handle("9 -") == '9 BH message="no URL in the request line"\n'
    assert h.handle("9 http://evil.com/").startswith("9 OK ")
    assert h.stats.bad_lines == 2
    assert any("bad request line" in m for m in logged)


def test_uncanonicalisable_url_follows_the_failure_mode() -> None:
    logged: list[str] = []
    closed = SquidHelper(
        LiveRules(rules_filter), HelperSettings(mode=HelperMode.ACL), log=logged.append
    )
    reply = closed.handle("http://exa%20mple.com/ 1.2.3.4 - GET -")
    assert reply.startswith('OK tag="urlsieve-failure" message="urlsieve fail-closed: URL cannot')
    assert logged and "fail-closed" in logged[-1]
    opened = SquidHelper(
        LiveRules(rules_filter),
        HelperSettings(mode=HelperMode.ACL, failure_mode=FailureMode.OPEN),
        log=logged.append,
    )
    assert opened.handle("http://exa%20mple.com/").startswith('ERR log="urlsieve fail-open')
    assert "fail-open" in logged[-1]


def _no_rules() -> Filter:
    raise OSError(2, "No such file or directory: /var/lib/urlsieve/rules.snap")


def test_no_rules_fail_closed_blocks_everything_and_says_why() -> None:
    logged: list[str] = []
    h = SquidHelper(
        LiveRules(_no_rules, log=logged.append),
        HelperSettings(redirect_url=BLOCK_PAGE),
        log=logged.append,
    )
    assert h.handle("http://good.org/ 10.0.0.1/- - GET").startswith("OK status=302 url=")
    assert "cat=urlsieve-failure" in h.handle("http://good.org/")
    assert any("no rules loaded" in m and "No such file" in m for m in logged)
    assert h.stats.failures == 2


def test_no_rules_fail_open_allows_and_logs() -> None:
    logged: list[str] = []
    h = SquidHelper(
        LiveRules(_no_rules),
        HelperSettings(redirect_url=BLOCK_PAGE, failure_mode=FailureMode.OPEN),
        log=logged.append,
    )
    assert h.handle("3 http://evil.com/").startswith("3 ERR log=")
    assert "fail-open" in logged[-1]


def test_internal_error_is_never_silent() -> None:
    class Broken:
        def check(self, url: str) -> object:
            raise KeyError("boom")

    logged: list[str] = []
    h = SquidHelper(LiveRules(Broken), HelperSettings(mode=HelperMode.ACL), log=logged.append)
    assert h.handle("http://good.org/").startswith('OK tag="urlsieve-failure"')
    assert "internal error: KeyError" in logged[-1]


# -- the loop ---------------------------------------------------------------------------


def test_serve_answers_every_line_in_order_over_pipes() -> None:
    h = helper(HelperMode.ACL)
    in_r, in_w = os.pipe()
    out_r, out_w = os.pipe()
    lines = [
        f"{i % 8} http://{'evil.com' if i % 3 == 0 else 'good.org'}/{i} 127.0.0.1 - GET -"
        for i in range(3000)
    ]
    payload = ("\n".join(lines) + "\r\n\n9 http://evil.com/last").encode()

    def feed() -> None:
        with os.fdopen(in_w, "wb") as fh:
            # Odd chunk sizes: lines arrive split across reads.
            for start in range(0, len(payload), 777):
                fh.write(payload[start : start + 777])
                fh.flush()

    writer = threading.Thread(target=feed)
    writer.start()
    collected = bytearray()

    def drain() -> None:
        while chunk := os.read(out_r, 65536):
            collected.extend(chunk)

    reader = threading.Thread(target=drain)
    reader.start()
    serve(h, in_r, out_w)
    os.close(out_w)
    writer.join()
    reader.join()
    os.close(in_r)
    os.close(out_r)
    replies = collected.decode().splitlines()
    assert len(replies) == len(lines) + 2  # every line, the empty one (BH), the last one
    for i, reply in enumerate(replies[: len(lines)]):
        expected = "OK" if i % 3 == 0 else "ERR"
        assert reply.split()[:2] == [str(i % 8), expected]
    assert replies[-2].startswith("BH ")
    assert replies[-1].startswith("9 OK ")


# -- a real helper process: reloads ------------------------------------------------------


class HelperProcess:
    def __init__(self, *args: str, env: dict[str, str] | None = None) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "urlsieve", "squid-helper", *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env={**os.environ, **(env or {})},
        )

    def ask(self, line: str) -> str:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(line.encode() + b"\n")
        self.proc.stdin.flush()
        ready, _, _ = select.select([self.proc.stdout], [], [], 60)
        assert ready, "the helper did not answer within 60 s"
        return self.proc.stdout.readline().decode()

    def close(self) -> str:
        """End the input, wait for the exit, return what the helper logged."""
        if self.proc.stdin is None or self.proc.stdin.closed:
            return ""
        _, err = self.proc.communicate(timeout=60)
        return err.decode()

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.communicate()


@pytest.fixture
def snapshot_file(tmp_path: Path) -> Path:
    path = tmp_path / "rules.snap"
    compile_snapshot([parse_rule("evil.com", BLOCK, "malware")], path)
    return path


@pytest.fixture
def helper_process(snapshot_file: Path) -> Iterator[HelperProcess]:
    proc = HelperProcess(
        "--snapshot", str(snapshot_file), "--mode", "acl", env={"URLSIEVE_RELOAD_CHECK": "3600"}
    )
    yield proc
    proc.kill()


def test_helper_process_reloads_on_sighup(
    helper_process: HelperProcess, snapshot_file: Path
) -> None:
    assert helper_process.ask("0 http://evil.com/ 127.0.0.1 - GET -").startswith("0 OK ")
    assert helper_process.ask("1 http://new-threat.org/ 127.0.0.1 - GET -") == "1 ERR\n"
    compile_snapshot(
        [parse_rule("evil.com", BLOCK, "malware"), parse_rule("new-threat.org", BLOCK, "phish")],
        snapshot_file,
    )
    # The file check interval is an hour: only the signal can explain the reload.
    helper_process.proc.send_signal(signal.SIGHUP)
    reply = helper_process.ask("2 http://new-threat.org/ 127.0.0.1 - GET -")
    assert reply.startswith('2 OK tag="phish"'), reply
    log = helper_process.close()
    assert "rules loaded (SIGHUP)" in log
    assert "end of input: 3 requests, 2 blocked, 1 allowed" in log


def test_helper_process_picks_up_a_changed_file(snapshot_file: Path) -> None:
    proc = HelperProcess(
        "--snapshot", str(snapshot_file), "--mode", "acl", env={"URLSIEVE_RELOAD_CHECK": "0"}
    )
    assert proc.ask("http://other.org/") == "ERR\n"
    compile_snapshot([parse_rule("other.org", BLOCK, "ads")], snapshot_file)
    assert proc.ask("http://other.org/").startswith('OK tag="ads"')
    assert "rules loaded (file change)" in proc.close()


def test_helper_process_keeps_old_rules_when_the_new_file_is_bad(snapshot_file: Path) -> None:
    proc = HelperProcess(
        "--snapshot", str(snapshot_file), "--mode", "acl", env={"URLSIEVE_RELOAD_CHECK": "0"}
    )
    assert proc.ask("http://evil.com/").startswith("OK ")
    tmp = snapshot_file.with_suffix(".tmp")
    tmp.write_bytes(snapshot_file.read_bytes()[:-10])
    os.replace(tmp, snapshot_file)
    assert proc.ask("http://evil.com/").startswith("OK ")  # still the old rules
    log = proc.close()
    assert "reload (file change) failed, keeping the previous rules" in log
    assert "truncated" in log


def test_helper_process_without_rules_fails_closed(tmp_path: Path) -> None:
    proc = HelperProcess("--snapshot", str(tmp_path / "missing.snap"), "--mode", "acl")
    assert proc.ask("4 http://good.org/ 127.0.0.1 - GET -").startswith(
        '4 OK tag="urlsieve-failure"'
    )
    log = proc.close()
    assert "starting without rules, failure mode closed" in log
    assert "fail-closed: blocking" in log


def test_helper_process_refuses_a_bad_config() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "urlsieve", "squid-helper", "--lists", "x", "--mode", "redirect"],
        capture_output=True,
        text=True,
        input="",
        check=False,
    )
    assert proc.returncode == 2
    assert "needs squid.redirect_url" in proc.stderr


# -- shared memory -----------------------------------------------------------------------


def _mapping_stats(pid: int, path: Path) -> dict[str, int]:
    """Sum of the smaps fields (kB) of the mappings of ``path`` in process ``pid``."""
    stats: dict[str, int] = {}
    inside = False
    for line in Path(f"/proc/{pid}/smaps").read_text().splitlines():
        first = line.split(None, 1)[0]
        if "-" in first and not first.endswith(":"):
            inside = line.rstrip().endswith(str(path))
        elif inside and first.endswith(":") and line.split()[-1] == "kB":
            stats[first[:-1]] = stats.get(first[:-1], 0) + int(line.split()[1])
    return stats


def test_helper_processes_share_one_copy_of_the_snapshot(tmp_path: Path) -> None:
    rules = [parse_rule(f"host{i}.example{i % 7}.com/p{i % 13}/", BLOCK, "c") for i in range(20000)]
    path = tmp_path / "big.snap"
    info = compile_snapshot(rules, path)
    procs = [HelperProcess("--snapshot", str(path), "--mode", "acl") for _ in range(3)]
    try:
        for p in procs:
            assert p.ask("http://host5.example5.com/p5/x").startswith("OK ")
        for p in procs:
            stats = _mapping_stats(p.proc.pid, path)
            assert stats["Rss"] * 1024 >= info.size * 0.9  # the checksum pass mapped it all
            assert stats["Private_Dirty"] == 0  # nothing copied: the mapping is read-only
            # Pages mapped by several processes count as shared: one copy in memory.
            assert stats["Shared_Clean"] >= stats["Rss"] * 0.9, stats
    finally:
        for p in procs:
            p.kill()
