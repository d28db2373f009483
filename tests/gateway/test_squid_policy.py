"""A real Squid with ``urlsieve squid-helper`` deciding by a policy: the client address Squid
sends chooses the source, a time rule the pass list; hostile bytes through the proxy get the
policy's block page, and a SIGHUP picks up a changed policy without dropping requests."""

from __future__ import annotations

import os
import shutil
import signal
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

POLICY = """
[squid]
mode = "redirect"
failure_mode = "closed"

[[time]]
name = "always"
weekly = ["* 00:00-24:00"]

[[time]]
name = "never"
dates = ["1999.01.01"]

[[dest]]
name = "games"
domainlist = "games/domains"
urllist = "games/urls"

[[dest]]
name = "good"
domainlist = "good/domains"

[[source]]
name = "nobody-here"
ip = ["10.99.0.0/16"]

[[source]]
name = "local"
ip = ["127.0.0.0/8"]
within = "always"

[[acl]]
source = "nobody-here"
pass = ["none"]
redirect = "http://block.test/wrong-source"

[[acl]]
source = "local"
within = "{window}"
pass = ["good", "!games", "!in-addr", "all"]
redirect = "http://block.test/local?t=%t&s=%s&a=%a&u=%u"
else = {{ pass = ["!good", "all"], redirect = "http://block.test/else?t=%t" }}

[[acl]]
source = "default"
pass = ["none"]
redirect = "http://block.test/default"
"""


@dataclass
class PolicyGateway:
    squid: Squid
    origin: Origin
    config: Path

    def url(self, path: str, host: str = "origin.test") -> str:
        return f"http://{host}:{self.origin.port}{path}"


@pytest.fixture(scope="module")
def gateway() -> Iterator[PolicyGateway]:
    squid_binary()
    directory = world_readable_tempdir("urlsieve-squid-policy-")
    try:
        wrapper = stage_runtime(directory / "runtime")
        for name, domains, urls in (
            ("games", "games.test\n", "origin.test/games/\n"),
            ("good", "good.test\n", ""),
        ):
            (directory / name).mkdir()
            (directory / name / "domains").write_text(domains)
            (directory / name / "urls").write_text(urls)
        config = directory / "urlsieve.toml"
        config.write_text(POLICY.format(window="always"), encoding="utf-8")
        make_world_readable(directory)
        with origin_server() as origin:
            hosts = {
                "origin.test": "127.0.0.1",
                "games.test": "127.0.0.1",
                "good.test": "127.0.0.1",
            }
            with running_squid(
                wrapper,
                config,
                directory,
                hosts,
                children=2,
                concurrency=8,
                probe_url=f"http://origin.test:{origin.port}/probe",
            ) as squid:
                yield PolicyGateway(squid, origin, config)
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def blocked_to(gw: PolicyGateway, url: str) -> tuple[str, dict[str, list[str]]]:
    status, headers, _ = request(gw.squid.rewrite_port, url)
    assert status == 302, (url, status)
    location = urlsplit(headers["location"])
    return location.path, parse_qs(location.query)


def test_the_client_address_chooses_the_source_and_its_block_page(gateway: PolicyGateway) -> None:
    path, query = blocked_to(gateway, "http://games.test/x")
    assert path == "/local"
    assert query["t"] == ["games"] and query["s"] == ["local"] and query["a"] == ["127.0.0.1"]
    assert query["u"] == ["http://games.test/x"]
    path, query = blocked_to(gateway, gateway.url("/games/level1"))
    assert (path, query["t"]) == ("/local", ["games"])
    status, _, body = request(gateway.squid.rewrite_port, gateway.url("/hello"))
    assert status == 200 and body.startswith(b"origin")
    status, _, _ = request(gateway.squid.rewrite_port, gateway.url("/gamesx/"))
    assert status == 200  # a urllist entry matches at segment boundaries


def test_the_external_acl_denies_by_the_policy(gateway: PolicyGateway) -> None:
    status, _, _ = request(gateway.squid.acl_port, "http://games.test/acl")
    assert status == 403
    status, _, _ = request(gateway.squid.acl_port, gateway.url("/acl-ok"))
    assert status == 200


HOSTILE = [
    b"http://GAMES.test/\xff",
    b"http://games.test./%2e%2e/x",
    b"http://user:pw@games.test:80/",
    b"ORIGIN/x%23/../games/a",
    b"ORIGIN/games\\a",
    "ORIGIN/x\u3000/../games/a".encode(),
    b"http://127.0.0.1:1/\xff\xfe",  # an IP host: !in-addr
    b"http://2130706433/",  # the same address as a number
]


@pytest.mark.parametrize("target", HOSTILE)
def test_hostile_bytes_get_the_policy_block_page(gateway: PolicyGateway, target: bytes) -> None:
    target = target.replace(b"ORIGIN", f"http://origin.test:{gateway.origin.port}".encode())
    host = urlsplit(target.decode("latin-1")).hostname or "origin.test"
    hits = len(gateway.origin.hits)
    status, headers = raw_request(gateway.squid.rewrite_port, target, host)
    assert status == 302, (target, status)
    assert urlsplit(headers["location"]).path == "/local"
    status, _ = raw_request(gateway.squid.acl_port, target, host)
    assert status == 403, (target, status)
    assert gateway.origin.hits[hits:] == []
    assert len(gateway.squid.helper_pids()) == 4


def test_sighup_applies_a_changed_policy_without_dropping_requests(gateway: PolicyGateway) -> None:
    """The ACL's time rule is switched to one that never holds: the else pass list applies
    (games pass, good is blocked); every request meanwhile gets an answer."""
    statuses = []
    gateway.config.write_text(POLICY.format(window="never"), encoding="utf-8")
    os.chmod(gateway.config, 0o644)
    for pid in gateway.squid.helper_pids():
        os.kill(pid, signal.SIGHUP)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        status, headers, _ = request(gateway.squid.rewrite_port, gateway.url("/x", "good.test"))
        statuses.append(status)
        if status == 302 and urlsplit(headers["location"]).path == "/else":
            break
        time.sleep(0.05)
    else:
        pytest.fail(f"the changed policy was not applied: {statuses[-5:]}")
    assert set(statuses) <= {200, 302}
    status, _, _ = request(gateway.squid.rewrite_port, gateway.url("/now-allowed", "games.test"))
    assert status == 200
    gateway.config.write_text(POLICY.format(window="always"), encoding="utf-8")
    for pid in gateway.squid.helper_pids():
        os.kill(pid, signal.SIGHUP)


def test_no_helper_reported_a_problem(gateway: PolicyGateway) -> None:
    log = gateway.squid.cache_log()
    for bad in ("fail-closed", "internal error", "crashing too rapidly", "reload (SIGHUP) failed"):
        assert bad not in log, bad
