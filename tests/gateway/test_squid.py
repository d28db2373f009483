"""A real Squid on loopback with ``urlsieve squid-helper`` as url_rewrite_program (port
"rewrite") and as external_acl_type (port "acl"), both with concurrency and several children,
in front of a local origin server."""

from __future__ import annotations

import shutil
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest

from tests.gateway.servers import (
    Origin,
    Squid,
    make_world_readable,
    origin_server,
    raw_request,
    request,
    running_squid,
    squid_binary,
    stage_runtime,
    world_readable_tempdir,
)
from urlsieve.match.snapshot import compile_snapshot
from urlsieve.rules.model import ALLOW, BLOCK, Rule, parse_rule

BLOCK_PAGE = "http://block.test/blocked?url=%u&category=%c&client=%a"


def base_rules() -> list[Rule]:
    return [
        parse_rule("evil.test", BLOCK, "malware", "lists/malware/domains", 1),
        parse_rule("origin.test/banners/", BLOCK, "ads", "lists/ads/urls", 1),
        parse_rule("origin.test/banners/ok/", ALLOW, "allowed", "lists/allowed/urls", 1),
    ]


@dataclass
class Gateway:
    squid: Squid
    origin: Origin
    snapshot: Path

    def url(self, path: str, host: str = "origin.test") -> str:
        return f"http://{host}:{self.origin.port}{path}"


@pytest.fixture(scope="module")
def gateway() -> Iterator[Gateway]:
    squid_binary()  # skip (locally) or fail (CI) before any work when squid is missing
    directory = world_readable_tempdir("urlsieve-squid-")
    try:
        wrapper = stage_runtime(directory / "runtime")
        snapshot = directory / "rules.snap"
        compile_snapshot(base_rules(), snapshot)
        config = directory / "urlsieve.toml"
        config.write_text(
            f"""
[rules]
snapshot = "{snapshot}"

[squid]
mode = "redirect"
redirect_url = "{BLOCK_PAGE}"
failure_mode = "closed"
reload_check_seconds = 0.2
""",
            encoding="utf-8",
        )
        make_world_readable(directory)
        with origin_server() as origin:
            hosts = {"origin.test": "127.0.0.1", "new.test": "127.0.0.1"}
            with running_squid(
                wrapper,
                config,
                directory,
                hosts,
                children=3,
                concurrency=8,
                probe_url=f"http://origin.test:{origin.port}/probe",
            ) as squid:
                yield Gateway(squid, origin, snapshot)
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def assert_redirected(gw: Gateway, url: str, category: str) -> None:
    status, headers, _ = request(gw.squid.rewrite_port, url)
    assert status == 302, (url, status)
    location = urlsplit(headers["location"])
    assert (location.netloc, location.path) == ("block.test", "/blocked")
    query = parse_qs(location.query)
    assert query["category"] == [category]
    assert query["client"] == ["127.0.0.1"]
    assert query["url"][0].lower().startswith("http://")


def assert_denied(gw: Gateway, url: str) -> None:
    status, headers, _ = request(gw.squid.acl_port, url)
    assert status == 403, (url, status)
    assert headers.get("x-squid-error", "").startswith("ERR_ACCESS_DENIED")


def test_helpers_run_with_concurrency_and_several_children(gateway: Gateway) -> None:
    # 3 url_rewrite children + 3 external ACL children, all urlsieve.
    assert len(gateway.squid.helper_pids()) == 6


def test_allowed_url_reaches_the_origin(gateway: Gateway) -> None:
    for port in (gateway.squid.rewrite_port, gateway.squid.acl_port):
        status, _, body = request(port, gateway.url(f"/hello/{port}"))
        assert status == 200
        assert body.decode() == f"origin origin.test:{gateway.origin.port} /hello/{port}\n"
    status, _, _ = request(gateway.squid.rewrite_port, gateway.url("/banners/ok/a.gif"))
    assert status == 200  # the more specific allow rule wins


def test_blocked_url_gets_the_block_redirect(gateway: Gateway) -> None:
    assert_redirected(gateway, "http://evil.test/x?y=1", "malware")
    status, headers, _ = request(gateway.squid.rewrite_port, gateway.url("/banners/b.gif"))
    assert status == 302
    assert parse_qs(urlsplit(headers["location"]).query)["url"] == [gateway.url("/banners/b.gif")]


def test_blocked_url_is_denied_by_the_external_acl_with_its_category(gateway: Gateway) -> None:
    assert_denied(gateway, "http://evil.test/acl-check")
    assert_denied(gateway, gateway.url("/banners/acl.gif"))
    wanted = ("/acl-check 403 tag=malware", "/banners/acl.gif 403 tag=ads")
    # Squid buffers its access log: wait (boundedly) for the lines to be written.
    deadline = time.monotonic() + 15
    log = gateway.squid.access_log()
    while not all(w in log for w in wanted) and time.monotonic() < deadline:
        time.sleep(0.1)
        log = gateway.squid.access_log()
    for w in wanted:
        assert any(w in line for line in log.splitlines()), (w, log[-2000:])


EVASIONS = [
    "http://EVIL.TEST/",
    "http://evil.test./",
    "http://www.evil.test/",
    "http://a.b.evil.test/deep/path",
    "http://evil.test:8080/",
    "http://user:password@evil.test/",
    "http://evil.test/%2e%2e/x",
    "ORIGIN/banners/../banners/x.gif",
    "ORIGIN//banners//x.gif",
    "ORIGIN/%62anners/x.gif",
    "ORIGIN/banners/./x.gif#frag",
]


@pytest.mark.parametrize("spelling", EVASIONS)
def test_evasion_spellings_are_blocked_through_the_proxy(gateway: Gateway, spelling: str) -> None:
    url = spelling.replace("ORIGIN", f"http://origin.test:{gateway.origin.port}")
    category = "malware" if "evil" in spelling.lower() else "ads"
    assert_redirected(gateway, url, category)
    assert_denied(gateway, url)


# Hostile bytes as a client sends them (issue 9): raw bytes that are not UTF-8, a "%23" or
# "%3F" that would cut the path if decoded too early, Unicode spaces that str.split() cuts on.
HOSTILE_TARGETS = [
    (b"http://evil.test/\xff", "evil.test"),
    (b"http://evil.test/\xe9t\xe9/\xc0\xaf", "evil.test"),
    (b"ORIGIN/banners/\xff.gif", "origin.test"),
    (b"ORIGIN/x%23/../banners/a.gif", "origin.test"),
    (b"ORIGIN/x%3F/../banners/a.gif", "origin.test"),
    (b"ORIGIN/x%2523/../banners/a.gif", "origin.test"),
    (b"ORIGIN/banners//../banners/a.gif", "origin.test"),
    (b"ORIGIN/banners/x#/../../y", "origin.test"),  # the ACL gets %23: a raw '#' or not?
    (b"ORIGIN/banners\\a.gif", "origin.test"),  # the ACL gets %5C
    ("ORIGIN/x\u3000/../banners/a.gif".encode(), "origin.test"),
    ("ORIGIN/x\u2003/../banners/a.gif".encode(), "origin.test"),
    ("ORIGIN/x\u2028/../banners/a.gif".encode(), "origin.test"),
]


@pytest.mark.parametrize(("target", "host"), HOSTILE_TARGETS)
def test_hostile_bytes_are_blocked_in_both_modes_and_squid_stays_up(
    gateway: Gateway, target: bytes, host: str
) -> None:
    origin = f"http://origin.test:{gateway.origin.port}".encode()
    target = target.replace(b"ORIGIN", origin)
    host_header = f"{host}:{gateway.origin.port}" if host == "origin.test" else host
    hits_before = len(gateway.origin.hits)
    status, headers = raw_request(gateway.squid.rewrite_port, target, host_header)
    assert status == 302, (target, status)
    assert urlsplit(headers["location"]).netloc == "block.test"
    status, headers = raw_request(gateway.squid.acl_port, target, host_header)
    assert status == 403, (target, status)
    assert gateway.origin.hits[hits_before:] == []  # nothing reached the origin
    # The helpers are all still there and Squid still serves.
    assert len(gateway.squid.helper_pids()) == 6
    status, _, _ = request(gateway.squid.rewrite_port, gateway.url("/still-up"))
    assert status == 200


def test_no_helper_reported_a_problem(gateway: Gateway) -> None:
    log = gateway.squid.cache_log()
    assert "fail-closed" not in log
    assert "bad request line" not in log
    assert "WARNING: url_rewriter" not in log
    assert "crashing too rapidly" not in log
    assert "internal error" not in log


def test_snapshot_reload_during_a_stream_of_requests_loses_none(gateway: Gateway) -> None:
    """Three clients stream requests while the snapshot is replaced; every request gets an
    answer, the allowed ones reach the origin, and new.test becomes blocked."""
    n_per_client, clients = 150, 3
    results: list[tuple[int, str, int]] = []  # (client, url, status)
    errors: list[BaseException] = []
    lock = threading.Lock()
    swapped = threading.Event()
    hits_before = len(gateway.origin.hits)

    def client(k: int) -> None:
        try:
            for i in range(n_per_client):
                url = (
                    f"http://new.test:{gateway.origin.port}/stream/{k}/{i}"
                    if i % 2
                    else gateway.url(f"/stream/{k}/{i}")
                )
                status, _, _ = request(gateway.squid.rewrite_port, url)
                with lock:
                    results.append((k, url, status))
                if k == 0 and i == n_per_client // 3:
                    compile_snapshot(
                        [*base_rules(), parse_rule("new.test", BLOCK, "phishing", "new", 1)],
                        gateway.snapshot,
                    )
                    make_world_readable(gateway.snapshot.parent)
                    swapped.set()
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=client, args=(k,)) for k in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not errors, errors
    assert swapped.is_set()
    assert len(results) == n_per_client * clients  # every request answered
    statuses = {status for _, _, status in results}
    assert statuses <= {200, 302}, statuses  # no error responses
    origin_urls = [u for _, u, _ in results if "origin.test" in u]
    assert all(s == 200 for _, u, s in results if "origin.test" in u)
    # Every allowed request reached the origin exactly once.
    new_hits = gateway.origin.hits[hits_before:]
    assert len([h for h in new_hits if "/stream/" in h]) == sum(
        1 for _, _, s in results if s == 200
    )
    # new.test was allowed at first and blocked in the end, on every client (each helper
    # child checks the file every 0.2 s; the stream goes on for a second after the swap).
    for k in range(clients):
        mine = [s for c, u, s in results if c == k and "new.test" in u]
        assert mine[0] == 200
        assert mine[-1] == 302
    assert len(origin_urls) == clients * ((n_per_client + 1) // 2)
    log = gateway.squid.cache_log()
    assert "rules loaded (file change)" in log
