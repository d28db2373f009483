"""The self-learning gateway end to end: a real Squid with ``urlsieve squid-helper``
queueing unknown URLs, a real ``urlsieve learn run`` process crawling a loopback origin
and classifying its pages, and Squid enforcing the learned verdicts seconds later.

With ``unknown = "allow-first"`` (seed 001's first-time allow) the first request to an
unknown dirty page passes and a later one is blocked with the learned category; with
``unknown = "block"`` the first is blocked as unclassified and the verdict decides later.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest

from tests.gateway.servers import (
    Squid,
    make_world_readable,
    running_squid,
    squid_binary,
    stage_runtime,
    world_readable_tempdir,
)
from tests.gateway.servers import request as proxy_get
from tests.learn.origin import (
    ATTACK_PAGES,
    BLOCKED_HOST,
    PAGES,
    RESOURCE_PAGES,
    Origin,
    origin_server,
)
from urlsieve.cli import main
from urlsieve.learn.crawl import BROWSER_USER_AGENT, CRAWLER_USER_AGENT
from urlsieve.learn.queue import Sighting, open_queue

PHRASES = Path(__file__).parent / "data" / "phrases"
BLOCK_PAGE = "http://block.test/blocked?url=%u&category=%c"
HOSTS = (
    "dirty.test",
    "clean.test",
    "zh.test",
    "redirect.test",
    "robots.test",
    "bin.test",
    "huge.test",
    "slow.test",
    "cloak.test",
    "pad.test",
)


@dataclass
class Learning:
    unknown: str
    squid: Squid
    origin: Origin
    state: Path
    config: Path
    learner: subprocess.Popen[bytes]
    log: Path

    def url(self, host: str, path: str) -> str:
        return f"http://{host}:{self.origin.port}{path}"

    def learner_log(self) -> str:
        return self.log.read_text("utf-8", "replace")


def _config(
    directory: Path,
    state: Path,
    unknown: str,
    *,
    hosts: dict[str, str],
    promote_after: int = 0,
) -> Path:
    lists = directory / "lists"
    (lists / "blocked").mkdir(parents=True)
    (lists / "blocked" / "domains").write_text(f"{BLOCKED_HOST}\n", encoding="utf-8")
    (directory / "allow").write_text("probe.test\n", encoding="utf-8")
    phrases = directory / "phrases"
    shutil.copytree(PHRASES, phrases)
    config = directory / "urlsieve.toml"
    config.write_text(
        f"""
[rules]
lists = ["{lists}"]
allow = ["{directory / "allow"}"]

[squid]
mode = "redirect"
redirect_url = "{BLOCK_PAGE}"
reload_check_seconds = 0.1

[learn]
queue = "sqlite:{state / "queue.db"}"
unknown = "{unknown}"
overlay = "{state / "learned.snap"}"
directory = "{state}"
phrases = ["{phrases / "weightedphraselist"}"]
banned = ["{phrases / "bannedphraselist"}"]
exceptions = ["{phrases / "exceptionphraselist"}"]
limit = 50
promote_after = {promote_after}
batch = 8

[learn.crawl]
timeout = 2.0
max_bytes = 1000000
scan_bytes = 3000000
allow_networks = ["127.0.0.0/8"]
hosts = {json.dumps(hosts).replace('":', '" =')}

[learn.spool]
segment_seconds = 0.1
""",
        encoding="utf-8",
    )
    return config


@contextlib.contextmanager
def learning_gateway(
    unknown: str, *, promote_after: int = 0, extra_hosts: tuple[str, ...] = ()
) -> Iterator[Learning]:
    """A real Squid (2 helper children) with the learner beside it, on a loopback origin
    that serves every name in ``HOSTS`` and ``extra_hosts``."""
    squid_binary()
    directory = world_readable_tempdir("urlsieve-learn-")
    try:
        wrapper = stage_runtime(directory / "runtime")
        state = directory / "state"
        state.mkdir()
        hosts = dict.fromkeys((*HOSTS, *extra_hosts, BLOCKED_HOST, "probe.test"), "127.0.0.1")
        config = _config(directory, state, unknown, hosts=hosts, promote_after=promote_after)
        # The queue is shared by Squid's helpers (the proxy user) and the learner (us).
        open_queue(f"sqlite:{state / 'queue.db'}").close()
        make_world_readable(directory)
        os.chmod(state, 0o777)
        os.chmod(state / "queue.db", 0o666)
        with (
            origin_server({**PAGES, **ATTACK_PAGES, **RESOURCE_PAGES}) as origin,
            running_squid(
                wrapper,
                config,
                directory,
                hosts,
                children=2,
                concurrency=4,
                probe_url=f"http://probe.test:{origin.port}/en/clean.html",
            ) as squid,
        ):
            log = directory / "learner.log"
            with open(log, "wb") as out:
                learner = subprocess.Popen(
                    [sys.executable, "-m", "urlsieve", "learn", "--config", str(config),
                     "run", "--consumer", "test-learner"],
                    stdout=out,
                    stderr=subprocess.STDOUT,
                )  # fmt: skip
            try:
                yield Learning(unknown, squid, origin, state, config, learner, log)
            finally:
                learner.send_signal(signal.SIGTERM)
                try:
                    learner.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    learner.kill()
                    learner.wait()
    finally:
        shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture(params=["allow-first", "block"])
def learning(request: pytest.FixtureRequest) -> Iterator[Learning]:
    with learning_gateway(request.param) as gw:
        yield gw


def verdict(gw: Learning, url: str) -> tuple[int, str | None]:
    """Squid's answer through the url_rewrite port: (status, block category or None)."""
    status, headers, _ = proxy_get(gw.squid.rewrite_port, url)
    if status != 302:
        return status, None
    location = urlsplit(headers["location"])
    if location.netloc != "block.test":  # the origin's own redirect, passed through
        return status, None
    return status, parse_qs(location.query)["category"][0]


def wait_for(gw: Learning, url: str, category: str | None, timeout: float = 30.0) -> float:
    """Seconds until Squid answers ``url`` with ``category`` (None: lets it through)."""
    started = time.monotonic()
    last: tuple[int, str | None] = (0, None)
    while time.monotonic() - started < timeout:
        last = verdict(gw, url)
        if (category is None and last[0] == 200) or (category is not None and last[1] == category):
            return time.monotonic() - started
        time.sleep(0.1)
    raise AssertionError(
        f"{url}: still {last} after {timeout} s; learner says:\n{gw.learner_log()[-3000:]}"
    )


def test_unknown_pages_are_learned_and_enforced_through_squid(learning: Learning) -> None:
    gw = learning
    block = gw.unknown == "block"
    dirty = gw.url("dirty.test", "/en/casino.html")
    zh = gw.url("zh.test", "/zh/big5-bare.html")
    clean = gw.url("clean.test", "/en/clean.html")
    redirect = gw.url("redirect.test", "/redirect/blocked")
    robots = gw.url("robots.test", "/private/casino.html")
    binary = gw.url("bin.test", "/file.bin")
    huge = gw.url("huge.test", "/huge.html")  # 5.4 MB: classified from its first MB
    slow = gw.url("slow.test", "/slow.html")  # slower than the crawler's timeout
    first = {
        url: verdict(gw, url) for url in (dirty, zh, clean, redirect, robots, binary, huge, slow)
    }
    for url, answer in first.items():
        if block:
            assert answer == (302, "unclassified"), (url, answer)
        else:
            assert answer[0] in (200, 302) and answer[1] is None, (url, answer)  # allowed
    seconds = wait_for(gw, dirty, "gambling")
    wait_for(gw, zh, "gambling")  # Big5 without a charset, Traditional → Simplified
    wait_for(gw, redirect, "blocked")  # a redirect to a blocked host blocks the start URL
    wait_for(gw, clean, None)
    wait_for(gw, huge, "gambling")
    assert seconds < 30
    # The crawler fetched each page once (a client's own fetch through Squid adds one when
    # it was allowed), never the robots-disallowed page, never the blocked host.
    crawler_fetches = 1
    client_fetches = 0 if block else 1
    hits = gw.origin.hits
    assert hits.count("dirty.test/en/casino.html") >= crawler_fetches + client_fetches
    assert not any(h.startswith(BLOCKED_HOST) for h in hits)
    learned = (gw.state / "learned" / "allow" / "clean" / "urls").read_text("utf-8")
    assert "clean.test/en/clean.html" in learned
    crawler = (BROWSER_USER_AGENT, CRAWLER_USER_AGENT)
    by_crawler = [where for agent, where in gw.origin.agents if agent in crawler]
    # The huge page is dirty at its start: the crawler fetched it once (read to scan_bytes,
    # classified as read); a client's requests pass through Squid until the verdict lands.
    assert by_crawler.count("huge.test/huge.html") == 1, by_crawler
    # What the crawler cannot read (robots.txt, not HTML, too slow) is unclassifiable, and
    # blocked as such: hiding from the crawler does not keep a page reachable (issue 30).
    for url in (robots, binary, slow):
        assert wait_for(gw, url, "unclassifiable") < 30
    crawled = [where for agent, where in gw.origin.agents if agent in crawler]
    assert "dirty.test/en/casino.html" in crawled
    assert "robots.test/private/casino.html" not in crawled  # robots.txt is honoured


def test_cloaking_and_padding_do_not_get_through_squid(
    learning: Learning, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 30, items 5 and 7: a site that shows crawlers a clean page, one that shows the
    crawler's own identity something else than browsers, dirty words after 2 MB of padding,
    a 2.1 MB page and a page longer than ``scan_bytes`` — none is learned clean."""
    gw = learning
    urls = {path: gw.url("cloak.test" if "cloak" in path else "pad.test", path) for path in
            ATTACK_PAGES}  # fmt: skip
    for url in urls.values():
        verdict(gw, url)  # the first sighting
    for path, route in ATTACK_PAGES.items():
        assert route.expect is not None
        wait_for(gw, urls[path], route.expect)
    # The crawler came as a browser (and got the dirty page the cloaker shows browsers)...
    agents = [agent for agent, where in gw.origin.agents if where.startswith("cloak.test")]
    assert BROWSER_USER_AGENT in agents
    # ...and the page that is clean for browsers was dirty for the crawler's identity: the
    # worse verdict won, and `learn show` says why.
    capsys.readouterr()
    assert main(["learn", "--config", str(gw.config), "show",
                 urls["/cloak/browsers-see-clean.html"]]) == 0  # fmt: skip
    shown = capsys.readouterr().out
    assert "block (gambling)" in shown and "cloaking:" in shown, shown
    assert main(["learn", "--config", str(gw.config), "show", urls["/pad/beyond.html"]]) == 0
    shown = capsys.readouterr().out
    assert "unclassifiable" in shown and "too-large" in shown, shown


def test_a_new_sites_images_and_style_sheets_follow_its_pages_through_squid(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Issue 30: a page's image and style sheet used to end blocked as unclassifiable
    (not HTML). Now they are allowed on a site whose pages are clean, and blocked with the
    site's category on a site with a dirty page."""
    with learning_gateway("allow-first", extra_hosts=("pics.test", "dirtypics.test")) as gw:
        pages = (("pics.test", "/en/clean.html"), ("dirtypics.test", "/en/casino.html"))
        loads = {
            site: [gw.url(site, page), gw.url(site, "/res/logo.png"), gw.url(site, "/res/site.css")]
            for site, page in pages
        }
        for urls in loads.values():  # a first page load: the page and its subresources
            for url in urls:
                assert verdict(gw, url) == (200, None), url  # within the burst: they pass
        for url in loads["dirtypics.test"]:
            wait_for(gw, url, "gambling")
        # Past the burst, an unknown URL of the site gets the pending answer: a 200 now
        # means a learned allow.
        for url in loads["pics.test"]:
            wait_for(gw, url, None)
        capsys.readouterr()
        for url, wanted in (
            (loads["pics.test"][1], "allow (resource)"),
            (loads["pics.test"][2], "its site pics.test has no dirty page"),
            (loads["dirtypics.test"][1], "block (gambling)"),
            (loads["dirtypics.test"][2], "a resource; its site dirtypics.test has 1 page"),
        ):
            assert main(["learn", "--config", str(gw.config), "show", url]) == 0
            shown = capsys.readouterr().out
            assert wanted in shown, (url, shown)
        hidden = gw.state / "learned" / "block" / "unclassifiable" / "urls"
        assert "/res/" not in (hidden.read_text("utf-8") if hidden.exists() else "")


def test_a_private_address_is_never_fetched(
    learning: Learning, capsys: pytest.CaptureFixture[str]
) -> None:
    gw = learning
    queue = open_queue(f"sqlite:{gw.state / 'queue.db'}")
    try:
        queue.offer([Sighting("http://10.1.2.3/x"), Sighting("http://[fd00::1]/y")])
    finally:
        queue.close()
    metrics = gw.state / "learn.prom"
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        text = metrics.read_text("utf-8") if metrics.exists() else ""
        if 'urlsieve_learn_fetch_total{outcome="refused"} 2' in text:
            break
        time.sleep(0.2)
    else:
        raise AssertionError(f"not refused: {text}\n{gw.learner_log()[-2000:]}")
    # Why, and the setting that would allow it: in `learn stats` and in `learn show`.
    assert 'urlsieve_learn_refused_total{setting="learn.crawl.allow_networks"} 2' in text
    capsys.readouterr()
    assert main(["learn", "--config", str(gw.config), "stats"]) == 0
    assert "the setting that would allow them: learn.crawl.allow_networks" in (
        capsys.readouterr().out
    )
    assert main(["learn", "--config", str(gw.config), "show", "http://10.1.2.3/x"]) == 1
    shown = capsys.readouterr().out
    assert "the crawler does not fetch it" in shown and "learn.crawl.allow_networks" in shown
