"""The crawler against real loopback origins: pages, robots.txt, redirects checked by the
URL filter, the byte cap (also on decoded bytes: a gzip bomb), content types, timeouts,
content encodings and per-host politeness."""

from __future__ import annotations

import asyncio
import gzip
import itertools
import time
import tracemalloc
import zlib
from collections.abc import Iterator

import aiohttp.web
import brotli
import pytest

from tests.learn.origin import (
    BLOCKED_HOST,
    PAGES,
    Origin,
    Route,
    load_test_phrases,
    origin_server,
)
from urlsieve.exceptions import ConfigError
from urlsieve.learn.classify import Classifier
from urlsieve.learn.crawl import (
    BROWSER_USER_AGENT,
    Crawler,
    CrawlSettings,
    Fetched,
    is_subresource_type,
)

HOSTS = {"casino.test": "127.0.0.1", BLOCKED_HOST: "127.0.0.1", "other.test": "127.0.0.1"}


def _settings(**kw: object) -> CrawlSettings:
    values: dict[str, object] = {
        "timeout": 5.0,
        "allow_networks": ("127.0.0.0/8",),
        "hosts": HOSTS,
    }
    values.update(kw)
    return CrawlSettings(**values)  # type: ignore[arg-type]


def _block_blocked_host(url: str) -> tuple[str, str] | None:
    host = url.split("://", 1)[1].split("/", 1)[0]
    return ("gambling", "base:gambling/domains:1") if host == BLOCKED_HOST else None


def _crawl(
    urls: list[str], settings: CrawlSettings | None = None, **kw: object
) -> tuple[list[Fetched], Crawler]:
    async def go() -> tuple[list[Fetched], Crawler]:
        async with Crawler(settings or _settings(), **kw) as crawler:  # type: ignore[arg-type]
            return [await crawler.fetch(u, queued_at=123.0) for u in urls], crawler

    return asyncio.run(go())


@pytest.fixture(scope="module")
def origin() -> Iterator[Origin]:
    with origin_server() as server:
        yield server


def test_pages_are_fetched_with_status_headers_and_bytes(origin: Origin) -> None:
    paths = ["/en/casino.html", "/zh/gbk-header.html", "/zh/big5-bare.html"]
    results, _ = _crawl([f"http://casino.test:{origin.port}{p}" for p in paths])
    for path, fetched in zip(paths, results, strict=True):
        assert fetched.outcome == "page", fetched
        page = fetched.page
        assert page is not None
        assert page.status == 200
        assert page.body == PAGES[path].body
        assert page.content_type == dict(PAGES[path].headers)["Content-Type"]
        assert page.header("content-length") == str(len(PAGES[path].body))
        assert page.url == page.final_url == f"http://casino.test:{origin.port}{path}"
        assert page.hops == () and not page.truncated and page.queued_at == 123.0


def test_robots_disallowed_page_is_not_fetched_and_robots_is_fetched_once_per_host() -> None:
    with origin_server() as origin:
        base = f"http://casino.test:{origin.port}"
        urls = [f"{base}/private/casino.html", f"{base}/en/clean.html", f"{base}/en/news.html"]
        urls.append(f"http://other.test:{origin.port}/private/casino.html")
        results, crawler = _crawl(urls)
        assert [r.outcome for r in results] == ["robots", "page", "page", "robots"]
        assert "robots.txt of casino.test disallows" in results[0].reason
        assert origin.fetched("/private/casino.html") == 0
        assert sorted(h for h in origin.hits if h.endswith("/robots.txt")) == [
            "casino.test/robots.txt",
            "other.test/robots.txt",
        ]
        assert crawler.stats.robots_fetched == 2


def test_robots_fetched_once_under_concurrency() -> None:
    with origin_server() as origin:
        urls = [(f"http://casino.test:{origin.port}/en/clean.html?{i}", None) for i in range(20)]

        async def go() -> list[Fetched]:
            async with Crawler(_settings(per_host=8)) as crawler:
                return [f async for f in crawler.fetch_all(urls)]

        results = asyncio.run(go())
        assert {r.outcome for r in results} == {"page"}
        assert origin.fetched("/robots.txt") == 1


@pytest.mark.parametrize(
    ("status", "outcome"), [(404, "page"), (403, "page"), (503, "robots"), (429, "robots")]
)
def test_robots_failures_4xx_allow_5xx_disallow(status: int, outcome: str) -> None:
    pages = {
        "/robots.txt": Route(status, (), b"User-agent: *\nDisallow: /\n", None),
        "/a.html": Route(200, (("Content-Type", "text/html"),), b"<p>a</p>", None),
    }
    with origin_server(pages) as origin:
        url = f"http://casino.test:{origin.port}/a.html"
        results, _ = _crawl([url, url])
        assert [r.outcome for r in results] == [outcome, outcome]
        assert origin.fetched("/robots.txt") == 1  # the failure is cached too
        if outcome == "robots":
            assert f"HTTP {status}" in results[0].reason
            assert origin.fetched("/a.html") == 0


def test_robots_body_is_capped() -> None:
    rules = b"User-agent: *\n" + b"# filler\n" * 2000 + b"Disallow: /late/\n"
    pages = {
        "/robots.txt": Route(200, (("Content-Type", "text/plain"),), rules, None),
        "/late/x.html": Route(200, (("Content-Type", "text/html"),), b"<p>x</p>", None),
    }
    with origin_server(pages) as origin:
        url = f"http://casino.test:{origin.port}/late/x.html"
        (capped,), _ = _crawl([url], _settings(robots_max_bytes=1000))
        (full,), _ = _crawl([url])
        assert capped.outcome == "page"  # the rule past the cap was never read
        assert full.outcome == "robots"


def test_redirect_to_a_blocked_host_blocks_the_start_url_and_is_never_contacted() -> None:
    with origin_server() as origin:
        (result,), _ = _crawl(
            [f"http://casino.test:{origin.port}/redirect/blocked"], check_hop=_block_blocked_host
        )
        assert result.outcome == "redirect-blocked"
        assert result.blocked == ("gambling", "base:gambling/domains:1")
        assert "http://blocked.test/landing" in result.reason
        assert result.page is None
        assert not [h for h in origin.hits if h.startswith(BLOCKED_HOST)]


def test_redirect_to_a_clean_page_returns_the_page_with_its_hops(origin: Origin) -> None:
    seen: list[str] = []

    def check(url: str) -> tuple[str, str] | None:
        seen.append(url)
        return None

    start = f"http://casino.test:{origin.port}/redirect/clean"
    (result,), _ = _crawl([start], check_hop=check)
    assert result.outcome == "page"
    page = result.page
    assert page is not None
    final = f"http://casino.test:{origin.port}/en/clean.html"
    assert page.url == start and page.final_url == final
    assert page.hops == (start, final)
    assert page.body == PAGES["/en/clean.html"].body
    assert seen == ["http://casino.test/en/clean.html"]  # the filter sees canonical URLs


def test_redirect_loops_and_chains_are_bounded() -> None:
    pages = {f"/r{i}": Route(302, (("Location", f"/r{i + 1}"),), b"", None) for i in range(10)}
    pages["/loop"] = Route(301, (("Location", "/loop"),), b"", None)
    pages["/robots.txt"] = Route(404, (), b"", None)
    with origin_server(pages) as origin:
        base = f"http://casino.test:{origin.port}"
        results, _ = _crawl([f"{base}/r0", f"{base}/loop"], _settings(max_redirects=3))
        assert [r.outcome for r in results] == ["too-many-redirects", "too-many-redirects"]
        assert origin.fetched("/r4") == 0


def test_huge_page_is_truncated_at_max_bytes_without_reading_the_rest(origin: Origin) -> None:
    cap = 100_000
    (result,), crawler = _crawl(
        [f"http://casino.test:{origin.port}/huge.html"], _settings(max_bytes=cap)
    )
    assert result.outcome == "page"
    page = result.page
    assert page is not None and page.truncated
    assert page.body == PAGES["/huge.html"].body[:cap]
    robots = len(PAGES["/robots.txt"].body)
    assert crawler.stats.bytes_read - robots <= cap + 2 * 65536  # ~5.5 MB were on offer
    assert len(PAGES["/huge.html"].body) > 50 * cap


def test_binary_file_is_not_html_and_its_body_is_not_read(origin: Origin) -> None:
    (result,), crawler = _crawl([f"http://casino.test:{origin.port}/file.bin"])
    assert result.outcome == "not-html"
    assert "application/octet-stream" in result.reason
    assert crawler.stats.bytes_read == len(PAGES["/robots.txt"].body)


@pytest.mark.parametrize(
    ("media", "resource"),
    [
        ("image/png", True),
        ("image/svg+xml", True),
        ("video/mp4", True),
        ("audio/ogg", True),
        ("font/woff2", True),
        ("application/font-woff", True),
        ("text/css", True),
        ("text/javascript", True),
        ("application/javascript", True),
        ("application/wasm", True),
        ("application/octet-stream", False),
        ("application/pdf", False),
        ("application/zip", False),
        ("application/json", False),
        ("text/csv", False),
        ("imagex/png", False),
        ("", False),
    ],
)
def test_which_types_are_subresources(media: str, resource: bool) -> None:
    assert is_subresource_type(media) is resource


def test_an_image_answer_is_a_resource_and_its_body_is_not_read() -> None:
    png = b"\x89PNG\r\n" + b"\x00" * 100_000
    pages = {
        "/a.png": Route(200, (("Content-Type", "image/PNG; q=1"),), png, None),
        "/gone.png": Route(404, (("Content-Type", "image/png"),), png, None),
    }
    with origin_server(pages) as served:
        (ok, gone), crawler = _crawl(
            [
                f"http://casino.test:{served.port}/a.png",
                f"http://casino.test:{served.port}/gone.png",
            ]
        )
    assert (ok.outcome, ok.reason) == ("resource", "Content-Type image/png (a subresource)")
    assert gone.outcome == "http-error"  # an error answer stays unclassifiable
    assert crawler.stats.bytes_read < 2 * 65536


def test_slow_page_times_out(origin: Origin) -> None:
    (result,), _ = _crawl([f"http://casino.test:{origin.port}/slow.html"], _settings(timeout=1.0))
    assert result.outcome == "timeout"
    assert "1.0 s" in result.reason


def test_http_errors_and_hostile_urls_never_raise(origin: Origin) -> None:
    urls = [
        f"http://casino.test:{origin.port}/missing",
        "http://exa mple.com/",
        "javascript:alert(1)",
        "",
        "http://" + "a" * 70_000,
        "ftp://casino.test/x",
        f"http://nowhere.invalid:{origin.port}/",
    ]
    results, _ = _crawl(urls)
    assert [r.outcome for r in results] == [
        "http-error",
        "error",
        "error",
        "error",
        "error",
        "refused",
        "error",
    ]
    assert "HTTP 404" in results[0].reason


def _encoded_pages(bomb: bytes) -> dict[str, Route]:
    body = b"<html><body>" + "caf\xe9 \u4e2d ".encode() * 2000 + b"</body></html>"
    deflate_raw = zlib.compressobj(6, zlib.DEFLATED, -15)
    raw = deflate_raw.compress(body) + deflate_raw.flush()
    html = ("Content-Type", "text/html; charset=utf-8")
    return {
        "/robots.txt": Route(404, (), b"", None),
        "/plain.html": Route(200, (html,), body, None),
        "/gzip.html": Route(200, (html, ("Content-Encoding", "gzip")), gzip.compress(body), None),
        "/deflate.html": Route(
            200, (html, ("Content-Encoding", "deflate")), zlib.compress(body), None
        ),
        "/raw-deflate.html": Route(200, (html, ("Content-Encoding", "deflate")), raw, None),
        "/br.html": Route(200, (html, ("Content-Encoding", "br")), brotli.compress(body), None),
        "/bomb.html": Route(200, (html, ("Content-Encoding", "gzip")), bomb, None),
        "/br-bomb.html": Route(
            200,
            (html, ("Content-Encoding", "br")),
            brotli.compress(b"\0" * (96 << 20), quality=5),
            None,
        ),
        "/bad-gzip.html": Route(200, (html, ("Content-Encoding", "gzip")), b"\x1f\x8bnope", None),
        "/zstd.html": Route(200, (html, ("Content-Encoding", "zstd")), b"x", None),
    }


def _gzip_bomb(size: int) -> bytes:
    compressor = zlib.compressobj(9, zlib.DEFLATED, 31)
    chunk = b"\0" * (1 << 20)
    return b"".join(compressor.compress(chunk) for _ in range(size >> 20)) + compressor.flush()


def test_content_encodings_are_decoded_and_bombs_capped() -> None:
    bomb = _gzip_bomb(256 << 20)  # 256 MiB of zeros in ~250 kB
    pages = _encoded_pages(bomb)
    with origin_server(pages) as origin:
        base = f"http://casino.test:{origin.port}"
        names = ["gzip", "deflate", "raw-deflate", "br"]
        results, _ = _crawl([f"{base}/{n}.html" for n in names])
        for fetched in results:
            assert fetched.outcome == "page", fetched
            assert fetched.page is not None and fetched.page.body == pages["/plain.html"].body
            assert fetched.page.header("Content-Encoding") is not None  # as received
        cap = 1_000_000
        tracemalloc.start()
        try:
            bombs, crawler = _crawl(
                [f"{base}/bomb.html", f"{base}/br-bomb.html"], _settings(max_bytes=cap)
            )
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        for fetched in bombs:
            assert fetched.outcome == "page"
            assert fetched.page is not None and fetched.page.truncated
            assert fetched.page.body == b"\0" * cap
        assert peak < 40 * cap  # 256 MiB and 96 MiB decoded would not fit
        assert crawler.stats.bytes_read < len(bomb) // 2  # stopped early in the gzip stream
        bad, _ = _crawl([f"{base}/bad-gzip.html", f"{base}/zstd.html"])
        assert [b.outcome for b in bad] == ["error", "error"]
        assert "gzip" in bad[0].reason and "zstd" in bad[1].reason


# -- politeness: an aiohttp origin that counts requests in flight per host ---------------


class _Counting:
    def __init__(self, pause: float) -> None:
        self.pause = pause
        self.now: dict[str, int] = {}
        self.peak: dict[str, int] = {}
        self.total_now = 0
        self.total_peak = 0
        self.starts: dict[str, list[float]] = {}

    async def handle(self, request: aiohttp.web.Request) -> aiohttp.web.Response:
        if request.path == "/robots.txt":
            return aiohttp.web.Response(status=404)
        host = request.host.split(":")[0]
        self.starts.setdefault(host, []).append(time.monotonic())
        self.now[host] = self.now.get(host, 0) + 1
        self.peak[host] = max(self.peak.get(host, 0), self.now[host])
        self.total_now += 1
        self.total_peak = max(self.total_peak, self.total_now)
        try:
            await asyncio.sleep(self.pause)
        finally:
            self.now[host] -= 1
            self.total_now -= 1
        return aiohttp.web.Response(text="<p>ok</p>", content_type="text/html")


async def _serve_and_crawl(
    counting: _Counting, settings: CrawlSettings, urls: list[str]
) -> list[Fetched]:
    app = aiohttp.web.Application()
    app.router.add_get("/{tail:.*}", counting.handle)
    runner = aiohttp.web.AppRunner(app, access_log=None)
    await runner.setup()
    site = aiohttp.web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        async with Crawler(settings) as crawler:
            pairs = [(u.format(port=port), None) for u in urls]
            return [f async for f in crawler.fetch_all(pairs)]
    finally:
        await runner.cleanup()


def test_per_host_and_overall_concurrency_are_respected() -> None:
    hosts = {f"h{i}.test": "127.0.0.1" for i in range(4)}
    urls = [f"http://h{i % 4}.test:{{port}}/p{i}" for i in range(40)]
    counting = _Counting(pause=0.05)
    settings = _settings(hosts=hosts, per_host=2, concurrency=6)
    results = asyncio.run(_serve_and_crawl(counting, settings, urls))
    assert len(results) == 40 and {r.outcome for r in results} == {"page"}
    assert counting.peak == {f"h{i}.test": 2 for i in range(4)}  # reached, never passed
    assert counting.total_peak <= 6


def test_per_host_delay_spaces_fetches() -> None:
    counting = _Counting(pause=0.0)
    settings = _settings(hosts={"h.test": "127.0.0.1"}, per_host=4, delay=0.15)
    urls = [f"http://h.test:{{port}}/p{i}" for i in range(4)]
    asyncio.run(_serve_and_crawl(counting, settings, urls))
    starts = counting.starts["h.test"]
    gaps = [b - a for a, b in itertools.pairwise(starts)]
    assert len(starts) == 4
    assert min(gaps) >= 0.1  # a lower bound: a slow machine only widens the gaps


# -- identities (cloaking) and long pages (issue 30, items 5 and 7) ------------------------


def test_the_crawler_fetches_as_a_browser_and_matches_robots_by_its_own_name() -> None:
    pages = dict(PAGES)
    pages["/robots.txt"] = Route(
        200, (("Content-Type", "text/plain"),), b"User-agent: urlsieve-learn\nDisallow: /en/\n", "-"
    )
    with origin_server(pages) as origin:
        base = f"http://casino.test:{origin.port}"
        results, _ = _crawl([f"{base}/en/clean.html", f"{base}/zh/utf8-casino.html"])
        assert [r.outcome for r in results] == ["robots", "page"]  # robots.txt still binds it
        agents = {agent for agent, where in origin.agents if not where.endswith("robots.txt")}
        assert agents == {BROWSER_USER_AGENT}
        sent = origin.headers[-1]
        assert sent["accept"].startswith("text/html,application/xhtml+xml")
        assert sent["accept-language"] == "en-US,en;q=0.9"

        async def second() -> Fetched:
            async with Crawler(_settings()) as crawler:
                return await crawler.fetch(f"{base}/zh/gbk-header.html", user_agent="other-id/1")

        assert asyncio.run(second()).outcome == "page"
        assert origin.agents[-1] == ("other-id/1", "casino.test/zh/gbk-header.html")
        assert "accept-language" not in origin.headers[-1]  # the crawler's own identity


def test_a_long_page_is_scanned_to_scan_bytes_with_bounded_memory() -> None:
    padding = b"<p>" + b"lorem ipsum dolor sit amet " * 40 + b"</p>"
    late = b"<html><body>" + padding * 3000 + b"<p>online casino jackpot roulette</p></body></html>"
    bomb = _gzip_bomb(256 << 20)
    pages = {
        "/late.html": Route(200, (("Content-Type", "text/html"),), late, "gambling"),
        "/bomb.html": Route(
            200, (("Content-Type", "text/html"), ("Content-Encoding", "gzip")), bomb, "-"
        ),
        "/small.html": PAGES["/en/clean.html"],
    }
    classifier = Classifier(load_test_phrases())
    with origin_server(pages) as origin:
        base = f"http://casino.test:{origin.port}"
        cap, scan = 200_000, 8_000_000
        tracemalloc.start()
        try:
            results, _ = _crawl(
                [f"{base}/late.html", f"{base}/bomb.html", f"{base}/small.html"],
                _settings(max_bytes=cap, scan_bytes=scan),
                scanner=classifier.scan,
            )
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    long, bombed, small = results
    assert long.page is not None and long.page.truncated and long.page.body == late[:cap]
    assert long.scan is not None and long.scan.blocked and not long.scan.truncated
    assert long.scan.category == "gambling"  # the words after 3 MB of padding
    assert bombed.scan is not None and bombed.scan.truncated and not bombed.scan.blocked
    assert small.scan is None and small.page is not None and not small.page.truncated
    assert peak < 4 * scan  # 256 MiB of decoded bomb never held


def test_scan_bytes_below_max_bytes_is_refused() -> None:
    with pytest.raises(ConfigError, match="scan_bytes"):
        CrawlSettings(max_bytes=1000, scan_bytes=999)
