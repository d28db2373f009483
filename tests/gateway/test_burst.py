"""The burst cap of unknown sites (issue 30, item 2) in the Squid helper and the service,
the checking page, and the helper's exit line adding up (item 9's last clause)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from starlette.testclient import TestClient

from urlsieve import Filter
from urlsieve.config import burst_gate, unknown_feed
from urlsieve.exceptions import ConfigError
from urlsieve.gateway.config import GatewayConfig, load_config
from urlsieve.gateway.live import LiveRules
from urlsieve.gateway.pending import pending_page
from urlsieve.gateway.protocol import HelperMode
from urlsieve.gateway.ruleset import LayeredLoader
from urlsieve.gateway.squid import HelperSettings, SquidHelper
from urlsieve.gateway.unknown import BurstGate, UnknownFeed, site_of
from urlsieve.learn.overlay import build_overlay
from urlsieve.learn.queue import MemoryQueue, open_queue
from urlsieve.learn.verdicts import Learned, VerdictStore
from urlsieve.service.app import create_app

BLOCK_PAGE = "http://block.test/?url=%u&category=%c"
PENDING_PAGE = "http://gw.test:8399/v1/pending?url=%u"


def line(n: int, url: str) -> bytes:
    return f"{n} {url} 10.0.0.5/- - GET".encode()


def helper_for(
    tmp: Path,
    *,
    mode: HelperMode = HelperMode.REDIRECT,
    pending: str = "check",
    pending_url: str | None = PENDING_PAGE,
    queue: MemoryQueue | None = None,
    limit: int = 3,
) -> tuple[SquidHelper, UnknownFeed]:
    base = tmp / "base.snap"
    Filter.from_rules(["evil.com", "@@good.test"]).save(base)
    overlay = tmp / "learned.snap"
    loader = LayeredLoader(lambda: Filter.load(base), str(base), str(overlay))
    live = LiveRules(loader, watch=[str(base), str(overlay)], check_seconds=0)
    queue = queue or MemoryQueue()
    feed = UnknownFeed(lambda batch: None, flush_seconds=0)
    helper = SquidHelper(
        live,
        HelperSettings(mode=mode, redirect_url=None if mode is HelperMode.ACL else BLOCK_PAGE),
        unknown=feed,
        burst=BurstGate(queue.admit, limit),
        pending=pending,
        pending_url=pending_url,
    )
    return helper, feed


def test_three_requests_of_an_unknown_site_pass_whatever_the_subdomain(tmp_path: Path) -> None:
    helper, feed = helper_for(tmp_path)
    urls = [f"http://a{i}.evil.test/p{i}.html" for i in range(10)]
    replies = helper.handle_batch([line(n, u) for n, u in enumerate(urls)])
    assert replies[:3] == ["0 ERR\n", "1 ERR\n", "2 ERR\n"]
    for n, reply in enumerate(replies[3:], 3):
        assert reply.startswith(f'{n} OK status=302 url="http://gw.test:8399/v1/pending?url='), (
            reply
        )
    # Another site has its own burst; decided URLs are not counted.
    assert helper.handle_batch([line(0, "http://other.test/")]) == ["0 ERR\n"]
    assert helper.handle_batch([line(0, "http://good.test/")]) == ["0 ERR\n"]
    assert helper.handle_batch([line(0, "http://x.evil.com/")])[0].startswith("0 OK")
    stats = helper.stats
    assert (stats.unknown, stats.unknown_passed, stats.unknown_pending) == (11, 4, 7)
    feed.close()
    assert feed.stats.seen == 11  # every unknown request is queued, pending ones too


def test_two_helper_children_share_one_count(tmp_path: Path) -> None:
    """Squid runs several helper processes: the count is in the queue's store."""
    spec = f"sqlite:{tmp_path / 'queue.db'}"
    config = GatewayConfig(lists=("x",), learn_queue=spec, unknown="allow-first")
    gates = [burst_gate(config, lambda _m: None) for _ in range(2)]
    assert all(g is not None for g in gates)
    answers = [g.allow("evil.test") for _ in range(3) for g in gates if g is not None]
    assert answers.count(True) == 3
    assert burst_gate(GatewayConfig(lists=("x",), learn_queue=spec, pending="pass"), print) is None
    blocking = GatewayConfig(lists=("x",), learn_queue=spec, unknown="block")
    assert burst_gate(blocking, print) is None


@pytest.mark.parametrize(
    ("mode", "pending", "pending_url", "expect"),
    [
        (HelperMode.REDIRECT, "check", None, 'OK status=302 url="http://block.test/?url='),
        (HelperMode.REWRITE, "check", PENDING_PAGE, 'OK rewrite-url="http://gw.test:8399/'),
        (HelperMode.ACL, "check", None, 'OK tag="pending"'),
        (HelperMode.REDIRECT, "block", PENDING_PAGE, "category=unclassified"),
        (HelperMode.ACL, "block", None, 'OK tag="unclassified"'),
    ],
)
def test_the_pending_answer(
    tmp_path: Path, mode: HelperMode, pending: str, pending_url: str | None, expect: str
) -> None:
    helper, feed = helper_for(tmp_path, mode=mode, pending=pending, pending_url=pending_url)
    replies = helper.handle_batch([line(n, f"http://new.test/{n}") for n in range(4)])
    assert all(r.endswith("ERR\n") for r in replies[:3])
    assert expect in replies[3], replies[3]
    if pending_url is None and mode is HelperMode.REDIRECT:
        assert "category=pending" in replies[3]  # the block page, told it is pending
    feed.close()


def test_a_site_known_clean_is_not_capped(tmp_path: Path) -> None:
    with VerdictStore(tmp_path / "v.db") as store:
        store.put(
            [
                Learned(key=f"garden.test/{i}", host="garden.test", action="allow",
                        category="clean", source="learned", url=f"http://garden.test/{i}")
                for i in range(3)
            ]
        )  # fmt: skip
        build_overlay(store, tmp_path / "tree", tmp_path / "learned.snap", promote_after=3)
    helper, feed = helper_for(tmp_path)
    urls = [f"http://www.garden.test/new{i}" for i in range(10)]
    assert helper.handle_batch([line(0, u) for u in urls]) == ["0 ERR\n"] * 10
    feed.close()
    assert feed.stats.seen == 10  # still queued: a dirty page gets a rule of its own


def test_the_gate_counts_here_when_the_store_fails() -> None:
    logged: list[str] = []
    calls: list[str] = []

    def down(site: str, limit: int) -> bool:
        calls.append(site)
        raise ConnectionError("store down")

    gate = BurstGate(down, 2, log=logged.append)
    assert [gate.allow("a.test") for _ in range(4)] == [True, True, False, False]
    assert len(logged) == 1 and "counting in this process" in logged[0]
    assert len(calls) == 3  # a site found spent is remembered: no more store calls
    assert site_of("http://x.a1.evil.test:8080/p") == "evil.test"
    assert site_of("not a url") is None


def test_settings_are_checked() -> None:
    for bad in ({"burst": -1}, {"pending": "maybe"}, {"pending_url": "http://x/%q"}):
        with pytest.raises(ConfigError):
            GatewayConfig(lists=("x",), learn_queue="memory:", **bad).validate()


_HOSTILE = st.one_of(
    st.binary(max_size=120),
    st.builds(
        lambda host, path: f"0 http://{host}/{path} 10.0.0.1/- - GET".encode(
            "utf-8", "surrogatepass"
        ),
        st.text(st.characters(blacklist_categories=()), max_size=40),
        st.text(max_size=40),
    ),
)


@settings(
    max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(lines=st.lists(_HOSTILE, min_size=1, max_size=8))
def test_hostile_lines_get_one_reply_each_with_the_cap_on(
    tmp_path: Path, lines: list[bytes]
) -> None:
    helper, feed = helper_for(tmp_path, limit=1)
    lines = [raw.replace(b"\n", b" ") for raw in lines]
    replies = helper.handle_batch(lines)
    assert len(replies) == len(lines)
    assert all(r.endswith("\n") and r.count("\n") == 1 and r.isascii() for r in replies)
    feed.close()


# -- the helper's exit line ------------------------------------------------------------


def test_the_exit_line_adds_up(tmp_path: Path) -> None:
    Filter.from_rules(["evil.com"]).save(tmp_path / "base.snap")
    conf = tmp_path / "gw.toml"
    conf.write_text(
        f'[rules]\nsnapshot = "base.snap"\n[squid]\nredirect_url = "{BLOCK_PAGE}"\n'
        f'[learn]\nqueue = "sqlite:queue.db"\nunknown = "allow-first"\n',
        encoding="utf-8",
    )
    urls = [f"http://s{i % 4}.test/{i % 7}" for i in range(60)] + ["http://evil.com/"] * 3
    lines = "".join(f"{u} 10.0.0.{i % 3}/- - GET\n" for i, u in enumerate(urls))
    done = subprocess.run(
        [sys.executable, "-m", "urlsieve", "squid-helper", "--config", str(conf)],
        input=lines.encode(),
        capture_output=True,
        check=True,
        env={**os.environ, "URLSIEVE_CONFIG": ""},
        timeout=120,
    )
    log = done.stderr.decode()
    found = re.search(
        r"(\d+) unknown \(answered: (\d+) passed, (\d+) pending, (\d+) blocked; learning: "
        r"(\d+) queued, (\d+) merged with a buffered sighting, (\d+) dropped, "
        r"(\d+) unsent at exit; (\d+) queue errors\)",
        log,
    )
    assert found, log
    unknown, passed, pending, blocked, queued, merged, dropped, unsent, _ = map(int, found.groups())
    assert unknown == 60 and passed + pending + blocked == unknown
    assert passed == 4 * 3  # three per site (s0.test … s3.test)
    assert queued + merged + dropped + unsent == unknown
    assert queued > 0
    queue = open_queue(f"sqlite:{tmp_path / 'queue.db'}")
    assert queue.stats().sightings == queued  # what the helper says it queued, the queue got
    queue.close()


# -- the service -----------------------------------------------------------------------


@pytest.fixture
def service(tmp_path: Path) -> Iterator[TestClient]:
    Filter.from_rules(["evil.com", "@@good.test"]).save(tmp_path / "base.snap")
    conf = tmp_path / "gw.toml"
    conf.write_text(
        '[rules]\nsnapshot = "base.snap"\n'
        '[learn]\nqueue = "sqlite:queue.db"\nunknown = "allow-first"\n',
        encoding="utf-8",
    )
    config = load_config(str(conf), env={})
    feed = unknown_feed(config, print)
    with TestClient(create_app(config, unknown=feed, burst=burst_gate(config, print))) as client:
        yield client
    assert feed is not None
    feed.close()


def test_the_service_caps_an_unknown_site_and_serves_the_checking_page(
    service: TestClient,
) -> None:
    urls = [f"http://a{i}.new.test/x" for i in range(5)]
    got = [service.get("/v1/check", params={"url": u}).json() for u in urls]
    assert [g["action"] for g in got] == ["none"] * 3 + ["block"] * 2
    assert got[3]["category"] == "pending" and got[3]["pending"] is True
    batch = service.post("/v1/check", json={"urls": [f"http://b{i}.new.test/" for i in range(3)]})
    assert [r["category"] for r in batch.json()["results"]] == ["pending"] * 3
    page = service.get("/v1/pending", params={"url": urls[4]})
    assert page.status_code == 200 and page.headers["cache-control"] == "no-store"
    assert '<meta http-equiv="refresh" content="1">' in page.text
    assert "Checking this site" in page.text and "<script" not in page.text
    allowed = service.get("/v1/pending", params={"url": "http://good.test/a?b=1&c=2"}).text
    assert '<meta http-equiv="refresh" content="0;url=http://good.test/a?b=1&amp;c=2">' in allowed
    blocked = service.get("/v1/pending", params={"url": "http://evil.com/x"}).text
    assert "Blocked" in blocked and "refresh" not in blocked
    # The page only reads: asking it again and again counts nothing.
    for _ in range(5):
        service.get("/v1/pending", params={"url": "http://c.other.test/"})
    assert service.get("/v1/check", params={"url": "http://other.test/"}).json()["action"] == "none"


@pytest.mark.parametrize(
    "url",
    [
        'http://good.test/"><script>alert(1)</script>',
        "javascript:alert(1)",
        "http://good.test/\u202e\x00",
    ],
)
def test_the_checking_page_escapes_what_it_shows(url: str) -> None:
    for state in ("checking", "allowed", "blocked"):
        page = pending_page(url, state, '<b>"cat"</b>')
        assert "<script>" not in page and "<b>" not in page
        assert "javascript:" not in page.split("<body>")[0]
        assert "\x00" not in page.split("<body>")[0]


@settings(max_examples=200, deadline=None)
@given(
    url=st.text(st.characters(blacklist_categories=()), max_size=300),
    state=st.sampled_from(["checking", "allowed", "blocked"]),
    category=st.none() | st.text(max_size=40),
)
def test_the_checking_page_never_lets_markup_through(
    url: str, state: str, category: str | None
) -> None:
    page = pending_page(url, state, category)
    head = page.partition("<body>")[0]
    plain = pending_page(url.replace("<", ""), state, (category or "").replace("<", "") or None)
    assert page.count("<") == plain.count("<")  # what is shown adds no markup
    for text in (url, category or ""):
        if "<" in text:
            assert text not in page  # shown escaped only
    if "refresh" in head and "url=" in head:
        assert url.lower().startswith(("http://", "https://")) and url.isascii()


def test_a_busy_store_does_not_hold_a_request(tmp_path: Path) -> None:
    import sqlite3

    spec = f"sqlite:{tmp_path / 'queue.db'}"
    open_queue(spec).close()
    config = GatewayConfig(lists=("x",), learn_queue=spec, unknown="allow-first")
    logged: list[str] = []
    gate = burst_gate(config, logged.append)
    assert gate is not None
    holder = sqlite3.connect(tmp_path / "queue.db", isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")  # the learner in a long write
    try:
        assert [gate.allow("busy.test") for _ in range(4)] == [True, True, True, False]
        assert logged and "counting in this process" in logged[0]
    finally:
        holder.execute("ROLLBACK")
        holder.close()
