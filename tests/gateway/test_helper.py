"""The Squid helper: replies per mode, failure modes, bad lines, the stdin/stdout loop, and
reloads (SIGHUP and file change) in a real helper process."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.needs import missing
from urlsieve import Filter, InvalidURL
from urlsieve.gateway import FailureMode, HelperMode, HelperSettings, LiveRules, SquidHelper
from urlsieve.gateway.protocol import MAX_LINE
from urlsieve.gateway.squid import serve
from urlsieve.layered import LayeredFilter
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


# -- hostile bytes (issue 9) ---------------------------------------------------------------

ALL_MODES = [HelperMode.REDIRECT, HelperMode.REWRITE, HelperMode.ACL]
LATIN1_BLOCK_PAGE = "http://block.lan/?url=%u&user=%i&name=%n&rule=%r"


def _blocked(reply: str, mode: HelperMode) -> bool:
    """Squid answers the request with the block page (ACL: denies it); fail-closed counts."""
    words = reply.split()
    words = words[1:] if words and words[0].isdigit() else words
    return words[:1] == ["OK"]


def byte_helper(mode: HelperMode, **kw: object) -> SquidHelper:
    return SquidHelper(
        LiveRules(rules_filter),
        HelperSettings(
            mode=mode,
            redirect_url=None if mode is HelperMode.ACL else LATIN1_BLOCK_PAGE,
            **kw,  # type: ignore[arg-type]
        ),
    )


@pytest.mark.parametrize("mode", ALL_MODES)
@pytest.mark.parametrize(
    "line",
    [
        b"http://evil.com/\xff 10.0.0.1/- - GET",
        b"0 http://evil.com/\xe9t\xe9 10.0.0.1/pc\xe9 \xe9ric GET",
        b"http://www.evil.com/ 10.0.0.1/- bj\xf6rn%ff GET myip=\xff",
        b"http://evil.com/\x00\x7f\xc0\xaf 10.0.0.1",
    ],
)
def test_bytes_that_are_not_utf8_are_blocked_and_rendered(mode: HelperMode, line: bytes) -> None:
    h = byte_helper(mode)
    reply = h.handle(line)
    assert reply.isascii() and reply.endswith("\n") and reply.count("\n") == 1
    assert _blocked(reply, mode), reply
    assert h.stats.blocked == 1 and h.stats.failures == 0


@pytest.mark.parametrize("mode", ALL_MODES)
@pytest.mark.parametrize("space", ["\u3000", "\u2000", "\u2005", "\u200a", "\u2028", "\u00a0"])
def test_unicode_space_inside_a_url_does_not_cut_it(mode: HelperMode, space: str) -> None:
    line = f"http://ads.example/x{space}/../banners/a.gif 10.0.0.1/- - GET".encode()
    assert _blocked(byte_helper(mode).handle(line), mode)


HOSTILE_SPELLINGS = [
    "http://ads.example/banners/x#/../../y",
    "http://ads.example/banners\\a.gif",
    "http://ads.example/x%23/../banners/a.gif",
    "http://ads.example/x%3F/../banners/a.gif",
    "http://ads.example/x%2523/../banners/a.gif",
    "http://ads.example/banners//../banners/a.gif",
    "http://ads.example/x/..%2fbanners/a.gif",
    "http://ads.example/%62anners/a.gif",
    "http://ads.example/banners%2fa.gif",
    "http://ads.example/x%00/../banners/",
    "http://ads.example/ok/a.gif",
    "http://ads.example/banners-not/a.gif",
    "http://evil.com%23.good.org/",
    "http://good.org/evil.com/",
    "http://good.org%2fevil.com/",
]


@pytest.mark.parametrize("url", HOSTILE_SPELLINGS)
def test_acl_and_redirect_modes_give_the_same_verdict(url: str) -> None:
    # What Squid 5.7 sends in each mode: the raw URL to url_rewrite, and to the external
    # ACL the URL with its non-URL bytes escaped ("#" and "\\" too) and "%" left as it is.
    redirect = byte_helper(HelperMode.REDIRECT).handle(f"{url} 10.0.0.1/- - GET".encode())
    escaped = url.replace("#", "%23").replace("\\", "%5C")
    acl = byte_helper(HelperMode.ACL).handle(f"{escaped} 10.0.0.1 - GET -".encode())
    assert _blocked(redirect, HelperMode.REDIRECT) == _blocked(acl, HelperMode.ACL), (
        redirect,
        acl,
    )
    try:
        expected = rules_filter().check(url).action == "block"
    except InvalidURL:
        expected = True  # fail closed
    assert _blocked(acl, HelperMode.ACL) == expected


@pytest.mark.parametrize("channels", [None, True])
def test_lone_channel_id_gets_bh_with_its_channel(channels: bool | None) -> None:
    assert (
        helper(channels=channels).handle("7")
        == '7 BH message="empty request line: expected a URL"\n'
    )


def test_a_failure_while_rendering_the_reply_is_answered_by_the_failure_mode() -> None:
    class Rule:
        @property
        def where(self) -> str:
            raise UnicodeError("cannot render")

    class Verdict:
        action = "block"
        category = "x"
        rule = Rule()

    class Odd:
        def check(self, url: str) -> Verdict:
            return Verdict()

    logged: list[str] = []
    for mode in ALL_MODES:
        h = SquidHelper(
            LiveRules(Odd),
            HelperSettings(mode=mode, redirect_url=None if mode is HelperMode.ACL else BLOCK_PAGE),
            log=logged.append,
        )
        reply = h.handle(b"5 http://evil.com/ 10.0.0.1")
        assert reply.startswith("5 OK "), reply
        assert "urlsieve-failure" in reply and h.stats.failures == 1
    opened = SquidHelper(
        LiveRules(Odd),
        HelperSettings(mode=HelperMode.ACL, failure_mode=FailureMode.OPEN),
        log=logged.append,
    )
    assert opened.handle(b"6 http://evil.com/").startswith("6 ERR log=")
    assert any("UnicodeError" in m for m in logged)


def test_a_logger_that_raises_does_not_stop_the_reply() -> None:
    def log(_message: str) -> None:
        raise OSError("stderr is gone")

    h = SquidHelper(LiveRules(rules_filter), HelperSettings(mode=HelperMode.ACL), log=log)
    assert h.handle(b"") == 'BH message="empty request line: expected a URL"\n'
    assert h.handle(b"1 javascript:x").startswith('1 OK tag="urlsieve-failure"')
    assert h.handle(b"2 http://good.org/") == "2 ERR\n"


_MODES_AND_CHANNELS = st.tuples(st.sampled_from(ALL_MODES), st.sampled_from([None, True, False]))


@settings(max_examples=300, deadline=None)
@given(line=st.binary(max_size=300), setup=_MODES_AND_CHANNELS)
def test_any_bytes_get_exactly_one_ascii_reply_line(
    line: bytes, setup: tuple[HelperMode, bool | None]
) -> None:
    mode, channels = setup
    line = line.replace(b"\n", b"")
    for candidate in (line, b"3 " + line, b"http://evil.com/" + line):
        reply = byte_helper(mode, channels=channels).handle(candidate)
        assert reply.isascii() and reply.endswith("\n") and reply.count("\n") == 1
        words = reply.rstrip("\n").split(" ")
        result = words[1] if words[0].isdigit() and len(words) > 1 else words[0]
        assert result in ("OK", "ERR", "BH")


def _serve_bytes(h: SquidHelper, payload: bytes, **kw: int) -> list[bytes]:
    in_r, in_w = os.pipe()
    out_r, out_w = os.pipe()

    def feed() -> None:
        with os.fdopen(in_w, "wb") as fh:
            for start in range(0, len(payload), 4093):
                fh.write(payload[start : start + 4093])
                fh.flush()

    collected = bytearray()

    def drain() -> None:
        while chunk := os.read(out_r, 65536):
            collected.extend(chunk)

    threads = [threading.Thread(target=feed), threading.Thread(target=drain)]
    for t in threads:
        t.start()
    serve(h, in_r, out_w, **kw)
    os.close(out_w)
    for t in threads:
        t.join()
    os.close(in_r)
    os.close(out_r)
    return bytes(collected).split(b"\n")[:-1]


def test_an_over_long_line_is_answered_bh_and_skipped_unbuffered() -> None:
    h = helper(HelperMode.ACL)
    buffered: list[int] = []
    real_handle = h.handle

    def spy(line: bytes | str) -> str:
        buffered.append(len(line))
        return real_handle(line)

    real_batch = h.answer_batch

    def spy_batch(lines: Sequence[bytes]) -> bytes:
        buffered.extend(len(line) for line in lines)
        return real_batch(lines)

    # A read without a too-long line is answered in one batch, the others line by line.
    h.handle = spy  # type: ignore[method-assign]
    h.answer_batch = spy_batch  # type: ignore[method-assign]
    long_line = b"4 http://evil.com/" + b"a" * 50_000
    payload = b"1 http://evil.com/\n" + long_line + b"\n2 http://good.org/\n" + long_line
    replies = _serve_bytes(h, payload, max_line=10_000)
    assert replies[0].startswith(b"1 OK ")
    assert replies[1] == b'4 BH message="request line longer than 131072 bytes"'.replace(
        b"131072", str(MAX_LINE).encode()
    )
    assert replies[2] == b"2 ERR"
    assert replies[3].startswith(b"4 BH ")
    assert len(replies) == 4
    assert max(buffered) < 10_000  # the long lines never reached handle()
    assert h.stats.bad_lines == 2


def test_unicode_spaces_and_raw_bytes_through_the_loop() -> None:
    h = helper(HelperMode.REDIRECT)
    payload = (
        "0 http://ads.example/x\u3000/../banners/a.gif 10.0.0.1/- - GET\n".encode()
        + b"1 http://evil.com/\xff 10.0.0.1/- \xe9ric GET\n"
        + b"2 http://good.org/\xff\r\n"
    )
    replies = _serve_bytes(h, payload)
    assert [r.split(b" ")[:2] for r in replies] == [[b"0", b"OK"], [b"1", b"OK"], [b"2", b"ERR"]]


def _raising_loader() -> Filter:
    raise RecursionError("symlink loop in lists/ut1")


def test_a_load_error_of_any_kind_keeps_the_helper_up() -> None:
    logged: list[str] = []
    rules = LiveRules(_raising_loader, log=logged.append)
    assert not rules.loaded and "RecursionError" in (rules.error or "")
    h = SquidHelper(rules, HelperSettings(mode=HelperMode.ACL), log=logged.append)
    assert h.handle("http://good.org/").startswith('OK tag="urlsieve-failure"')
    state = {"fail": False}

    def flaky() -> Filter:
        if state["fail"]:
            raise RuntimeError("boom")
        return rules_filter()

    live = LiveRules(flaky, log=logged.append)
    state["fail"] = True
    live.request_reload()
    assert live.poll() is False and live.failed_reloads == 1
    assert live.get().check("http://evil.com/").action == "block"  # the old rules stay


def test_a_snapshot_changed_in_place_is_not_trusted(tmp_path: Path) -> None:
    path = tmp_path / "rules.snap"
    compile_snapshot([parse_rule("evil.com", BLOCK, "malware")], path)
    logged: list[str] = []
    live = LiveRules(lambda: Filter.load(path), watch=str(path), check_seconds=0, log=logged.append)
    h = SquidHelper(live, HelperSettings(mode=HelperMode.ACL), log=logged.append)
    assert h.handle("http://evil.com/").startswith('OK tag="malware"')
    with open(path, "r+b") as fh:  # truncated in place, below one page
        fh.truncate(1000)
    live.poll()
    assert h.handle("http://evil.com/").startswith('OK tag="urlsieve-failure"')
    assert h.handle("http://good.org/").startswith('OK tag="urlsieve-failure"')
    assert any("changed in place" in m for m in logged)
    compile_snapshot([parse_rule("evil.com", BLOCK, "malware")], path)  # by rename: trusted
    live.poll()
    assert h.handle("http://good.org/") == "ERR\n"


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


# -- the batch path (issue 10): one compiled call per read, the same replies ---------------

_BATCH_LINES = st.lists(
    st.one_of(
        st.sampled_from(
            [
                b"http://evil.com/",
                b"4 http://evil.com/ok/x 10.0.0.1/- - GET",
                b"3 http://www.evil.com/x 10.0.0.1/- alice GET",
                b"http://good.org/ 10.0.0.2",
                b"12 EVIL.com:80/%2e%2e/x",
                b"0 evil.com:443 10.0.0.1/- - CONNECT",
                b"7 http://good.org/a%23b 10.0.0.1/-",
                b"http://evil.com/\xff",
                b"",
                b"5",
                b"javascript:alert(1)",
                b"9 http://evil.com%2F.good.org/",
            ]
        ),
        st.binary(max_size=40),
    ),
    max_size=12,
)


def _batch_rules(layered: bool) -> Filter:
    flt = Filter([*rules_filter().rules, parse_rule("evil.com/ok/", "allow", "fine", "ok.txt", 2)])
    if not layered:
        return flt
    learned = Filter.from_rules(["learned.test", "@@good.org/y", "evil.com/ok/z"])
    return LayeredFilter(flt, learned)


_TEMPLATES = [BLOCK_PAGE, "http://block.lan/?u=%u&c=%c&r=%r", "http://b.lan/%c/%u?%u", "http://b/"]


@settings(max_examples=400, deadline=None)
@given(
    lines=_BATCH_LINES,
    mode=st.sampled_from([HelperMode.REDIRECT, HelperMode.REWRITE, HelperMode.ACL]),
    channels=st.sampled_from([None, True, False]),
    template=st.sampled_from(_TEMPLATES),
    layered_crlf=st.tuples(st.booleans(), st.booleans()),
)
def test_a_batch_gets_the_replies_of_its_lines_one_by_one(
    lines: list[bytes],
    mode: HelperMode,
    channels: bool | None,
    template: str,
    layered_crlf: tuple[bool, bool],
) -> None:
    """The reference batch (handle_batch) and the one-call path (answer_batch, lines as
    read: CRLF endings too) give each line's own reply, and count the same."""
    layered, crlf = layered_crlf
    settings_ = HelperSettings(
        mode=mode, redirect_url=None if mode is HelperMode.ACL else template, channels=channels
    )
    one, batch, compiled = (
        SquidHelper(LiveRules(lambda: _batch_rules(layered)), settings_) for _ in range(3)
    )
    lines = [line.rstrip(b"\r") for line in lines]  # as serve() hands lines to handle()
    replies = [one.handle(line) for line in lines]
    assert batch.handle_batch(lines) == replies
    sent = [line + b"\r" for line in lines] if crlf else lines
    assert compiled.answer_batch(sent) == "".join(replies).encode("ascii")
    assert batch.stats == one.stats == compiled.stats


_reply = getattr(__import__("urlsieve._accel", fromlist=["speedups"]).speedups, "squid_reply", None)


def test_plain_lines_are_answered_by_the_compiled_call_alone() -> None:
    """Every plain line of a read is answered in C: nothing reaches the reference batch
    (a compiled path that gave up on them would pass the differential test above)."""
    if _reply is None:
        missing("urlsieve._speedups lacks squid_reply: a stale build (urlsieve doctor)")
    lines = [
        b"http://evil.com/x 10.0.0.1/- - GET",
        b"3 http://www.evil.com/%2e%2e/a 10.0.0.1/- - GET\r",
        b"http://good.org/ 10.0.0.2",
        b"http://good.org/x\r\r",
        b"4 http://evil.com/ok/x",
        b"5 http://ads.example/banners/../banners/a.gif",
    ]
    for template in (BLOCK_PAGE.replace("&client=%a", ""), "http://b.lan/%c/%u?%u"):
        h = SquidHelper(
            LiveRules(lambda: _batch_rules(False)),
            HelperSettings(redirect_url=template, channels=None),
        )
        answered = h._compiled_batch(lines)
        assert answered is not None
        out, holes, blocked, allowed = answered
        assert (holes, blocked, allowed) == ([], 3, 3)
        ref = SquidHelper(
            LiveRules(lambda: _batch_rules(False)),
            HelperSettings(redirect_url=template, channels=None),
        )
        assert out == "".join(ref.handle(line.rstrip(b"\r")) for line in lines).encode()


def test_the_compiled_call_leaves_what_the_reference_must_answer() -> None:
    if _reply is None:
        missing("urlsieve._speedups lacks squid_reply: a stale build (urlsieve doctor)")
    lines = [
        b"http://evil.com/ 10.0.0.1",  # block page needs %a: the reference renders it
        b"",  # not a request: BH
        b"http://good.org/",
        b"evil.com:443 10.0.0.1/- - CONNECT",
        b"http://EVIL.com/\xff",
        b"http://unknown.test/",
    ]
    h = helper()
    answered = h._compiled_batch(lines)
    assert answered is not None
    out, holes, blocked, allowed = answered
    assert [k for k, _ in holes] == [0, 1, 3, 4]
    assert out == b"ERR\nERR\n" and (blocked, allowed) == (0, 2)
    assert [at for _, at in holes] == [0, 0, 4, 4]
    # With learning on (or a learned overlay), an undecided URL is the reference's too.
    learning = SquidHelper(
        LiveRules(lambda: _batch_rules(True)), HelperSettings(redirect_url="http://b/")
    )
    answered = learning._compiled_batch(lines)
    assert answered is not None and [k for k, _ in answered[1]] == [1, 2, 3, 4, 5]


def test_the_compiled_call_refuses_misuse() -> None:
    if _reply is None:
        missing("urlsieve._speedups lacks squid_reply: a stale build (urlsieve doctor)")
    image = rules_filter().compiled
    assert image is not None
    args = [[b"http://evil.com/"], 2, False, image.view, image.layout, None, (("x",),), False]
    assert _reply(*args)[0] == b"x"  # type: ignore[misc]
    for at, bad, error in [
        (0, (b"http://evil.com/",), TypeError),
        (0, ["http://evil.com/"], TypeError),
        (1, 3, ValueError),
        (4, image.layout[:-1], TypeError),
        (4, (1 << 40, *image.layout[1:]), ValueError),
        (6, [("x",)], TypeError),
        (6, (("é",),), TypeError),
        (6, ((),), TypeError),
        (6, ((b"x",),), TypeError),
    ]:
        broken = list(args)
        broken[at] = bad
        with pytest.raises(error):
            _reply(*broken)  # type: ignore[misc]
    with pytest.raises(TypeError):
        _reply(*args[:-1])  # type: ignore[misc]


@settings(max_examples=300, deadline=None)
@given(
    lines=st.lists(st.binary(max_size=120), max_size=10),
    channels=st.sampled_from([0, 1, 2]),
    escaped=st.booleans(),
    unknown=st.booleans(),
)
def test_the_compiled_call_takes_any_bytes(
    lines: list[bytes], channels: int, escaped: bool, unknown: bool
) -> None:
    """Arbitrary bytes never crash it; each answered line gets one ASCII reply line."""
    if _reply is None:
        missing("urlsieve._speedups lacks squid_reply: a stale build (urlsieve doctor)")
    image = rules_filter().compiled
    assert image is not None
    pieces = (('OK url="http://b/?u=', '"\n'), None)
    out, holes, blocked, allowed = _reply(  # type: ignore[misc]
        lines, channels, escaped, image.view, image.layout, image.mask, pieces, unknown
    )
    assert out.isascii() and out.count(b"\n") == blocked + allowed
    assert blocked + allowed + len(holes) == len(lines)
    offsets = [at for _, at in holes]
    assert offsets == sorted(offsets) and all(0 <= at <= len(out) for at in offsets)
