"""A loopback origin for the learning tests: pages in English and Chinese (UTF-8, GBK and
Big5, with and without a charset in the header or in ``<meta>``), clean pages, pages with
phrases of the test lists (``tests/learn/data/phrases``), a redirect to a blocked host, a
page robots.txt disallows, a huge page, a binary file and a slow page.

Every host name is served the same pages (Squid and the crawler map the test names to
127.0.0.1); ``hits`` records ``host+path`` of every request, so a test can assert that no
page was fetched twice.

``PAGES`` says, per path, what a correct classifier decides with the test lists:
``expect`` is the category that blocks it, ``None`` for a clean page, ``"-"`` for a page
that is never classified (not fetched or not HTML).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path

from tests.gateway.servers import serving
from urlsieve.learn.phrases import PhraseSet

__all__ = [
    "ATTACK_PAGES",
    "BLOCKED_HOST",
    "PAGES",
    "PHRASES",
    "RESOURCE_PAGES",
    "Origin",
    "Route",
    "load_test_phrases",
    "origin_server",
]

#: The phrase lists of the learning tests, in E2Guardian's format.
PHRASES = Path(__file__).parent / "data" / "phrases"


def load_test_phrases() -> PhraseSet:
    """The test lists as the classifier tests load them: weighted, banned, exception, and
    the Chinese lexicon under ``gambling`` with weight 30."""
    return PhraseSet.load(
        weighted=[PHRASES / "weightedphraselist"],
        banned=[PHRASES / "bannedphraselist"],
        exception=[PHRASES / "exceptionphraselist"],
        lexicons=[(PHRASES / "lexicon_zh.txt", "gambling", 30)],
    )


#: The host the base lists of the end-to-end tests block; ``/redirect/blocked`` goes there.
BLOCKED_HOST = "blocked.test"


@dataclass(frozen=True)
class Route:
    status: int
    headers: tuple[tuple[str, str], ...]
    body: bytes
    expect: str | None
    delay: float = 0.0
    what: str = ""
    #: ``(User-Agent substring, body)``: what a client whose User-Agent holds the
    #: substring is served instead (cloaking); the first that matches wins.
    agents: tuple[tuple[str, bytes], ...] = ()

    def body_for(self, agent: str) -> bytes:
        return next((body for part, body in self.agents if part in agent), self.body)


def _html(title: str, body: str, *, meta: str | None = None) -> str:
    head = f'<meta charset="{meta}">' if meta else ""
    return (
        f"<!DOCTYPE html><html><head>{head}<title>{title}</title>"
        "<style>body { color: #333 } /* casino jackpot poker in a style sheet */</style>"
        "<script>var words = 'online casino jackpot roulette 博彩 六合彩';</script>"
        f"</head><body>{body}</body></html>"
    )


_CASINO_EN = (
    "<h1>Best online casino of 2026</h1><p>Win the jackpot at our online casino! Poker, "
    "roulette and sports betting with a casino welcome bonus.</p><p>Play poker &amp; "
    "roulette now.</p>"
)
_CLEAN_EN = (
    "<h1>Growing tomatoes</h1><p>Tomatoes need sun, water and patience. Pick them when "
    "they are red. Compost helps the soil; mulch keeps it moist.</p>"
)
# Hard negatives: pages that mention listed words once, in a context that is not the
# category's. A single hit (or one weak phrase) must not block them.
_MEDICAL_EN = (
    "<h1>Breast cancer screening</h1><p>A mammogram finds breast cancer early. Ask your "
    "doctor about breast cancer screening and mammogram schedules.</p>"
)
_NEWS_EN = (
    "<h1>City council news</h1><p>The council refused a licence for a new casino near the "
    "school. Residents also discussed parking and the new library.</p>"
)
_NEWS_ZH = (
    "<h1>本地新闻</h1><p>警方昨天开展行动，严厉打击赌博违法犯罪活动。市民反映天气转凉，"
    "学校将调整作息时间。他赌气不吃饭。</p>"
)
_EDU_ZH = "<h1>数学课</h1><p>今天学习概率：掷骰子得到六点的可能性是六分之一。老师布置了作业。</p>"
_CASINO_ZH = (
    "<h1>网上赌场</h1><p>最好的网上赌场，百家乐、六合彩、体育博彩，注册就送彩金！"
    "网上赌场每天返水，赌博娱乐一站式。</p><p>百家乐真人荷官，六合彩开奖直播。</p>"
)
_CASINO_ZH_TRADITIONAL = (
    "<h1>網上賭場</h1><p>最好的網上賭場，百家樂、六合彩、體育博彩，註冊就送彩金！"
    "網上賭場每天返水，賭博娛樂一站式。</p><p>百家樂真人荷官，六合彩開獎直播。"
    "歡迎來到我們的網站，這裡有最新的優惠活動和會員福利。</p>"
)
_CLEAN_ZH_TRADITIONAL = (
    "<h1>今日天氣</h1><p>臺北市今天多雲，午後有雷陣雨。氣象局提醒民眾出門攜帶雨具，"
    "注意交通安全。明天氣溫回升，週末天氣晴朗，適合戶外活動。</p>"
)
_BANNED_EN = "<p>Cheap goods here. We sell stolen credit cards, fresh every day.</p>"
_EXCEPTION_EN = (
    "<p>This page studies gambling addiction: online casino, jackpot, poker, roulette, "
    "sports betting. urlsieve research exception.</p>"
)
_ROBOTS = b"User-agent: *\nDisallow: /private/\n"


def _page(text: str, charset: str, *, header: bool, meta: bool, expect: str | None) -> Route:
    ctype = f"text/html; charset={charset}" if header else "text/html"
    body = text.encode(charset)
    return Route(200, (("Content-Type", ctype),), body, expect)


def _pages() -> dict[str, Route]:
    utf8 = "utf-8"
    pages = {
        "/en/clean.html": _page(
            _html("Tomatoes", _CLEAN_EN), utf8, header=True, meta=False, expect=None
        ),
        "/en/casino.html": _page(
            _html("Casino", _CASINO_EN), utf8, header=True, meta=False, expect="gambling"
        ),
        "/en/medical.html": _page(
            _html("Health", _MEDICAL_EN), utf8, header=True, meta=False, expect=None
        ),
        "/en/news.html": _page(_html("News", _NEWS_EN), utf8, header=True, meta=False, expect=None),
        "/en/banned.html": _page(
            _html("Shop", _BANNED_EN), utf8, header=True, meta=False, expect="banned"
        ),
        "/en/exception.html": _page(
            _html("Study", _EXCEPTION_EN), utf8, header=True, meta=False, expect=None
        ),
        "/zh/news.html": _page(
            _html("新闻", _NEWS_ZH, meta=utf8), utf8, header=False, meta=True, expect=None
        ),
        "/zh/edu.html": _page(_html("数学", _EDU_ZH), utf8, header=True, meta=False, expect=None),
        "/zh/utf8-casino.html": _page(
            _html("赌场", _CASINO_ZH, meta=utf8), utf8, header=False, meta=True, expect="gambling"
        ),
        "/zh/gbk-header.html": _page(
            _html("赌场", _CASINO_ZH), "gbk", header=True, meta=False, expect="gambling"
        ),
        "/zh/gbk-meta.html": _page(
            _html("赌场", _CASINO_ZH, meta="gbk"), "gbk", header=False, meta=True, expect="gambling"
        ),
        "/zh/big5-meta.html": _page(
            _html("賭場", _CASINO_ZH_TRADITIONAL, meta="big5"),
            "big5",
            header=False,
            meta=True,
            expect="gambling",
        ),
        "/zh/big5-bare.html": _page(
            _html("賭場", _CASINO_ZH_TRADITIONAL),
            "big5",
            header=False,
            meta=False,
            expect="gambling",
        ),
        "/zh/big5-clean.html": _page(
            _html("天氣", _CLEAN_ZH_TRADITIONAL, meta="big5"),
            "big5",
            header=False,
            meta=True,
            expect=None,
        ),
    }
    # A page far over any sane byte cap; the phrases sit at its start.
    filler = "<p>" + "lorem ipsum dolor sit amet " * 40 + "</p>"
    huge = _html("Huge", _CASINO_EN + filler * 5000).encode()  # ~5.5 MB
    pages["/huge.html"] = Route(
        200, (("Content-Type", "text/html; charset=utf-8"),), huge, "gambling", what="huge"
    )
    pages["/file.bin"] = Route(
        200,
        (("Content-Type", "application/octet-stream"),),
        bytes(range(256)) * 64,
        "-",
        what="binary",
    )
    pages["/slow.html"] = Route(
        200,
        (("Content-Type", "text/html"),),
        _html("Slow", _CASINO_EN).encode(),
        "-",
        delay=4.0,
        what="slow",
    )
    pages["/private/casino.html"] = Route(
        200,
        (("Content-Type", "text/html"),),
        _html("Casino", _CASINO_EN).encode(),
        "-",
        what="robots-disallowed",
    )
    pages["/redirect/blocked"] = Route(
        302,
        (("Location", f"http://{BLOCKED_HOST}/landing"),),
        b"",
        "redirect",
        what="redirect to a blocked host",
    )
    pages["/redirect/clean"] = Route(
        302, (("Location", "/en/clean.html"),), b"", None, what="redirect to a clean page"
    )
    pages["/robots.txt"] = Route(200, (("Content-Type", "text/plain"),), _ROBOTS, "-")
    return pages


PAGES: dict[str, Route] = _pages()


def _attack_pages() -> dict[str, Route]:
    """Pages of a site that wants to stay reachable (issue 30): cloaking by User-Agent and
    padding. ``expect`` as in :data:`PAGES` (``"unclassifiable"`` for a page too long to be
    read whole)."""
    html = (("Content-Type", "text/html; charset=utf-8"),)
    dirty = _html("Casino", _CASINO_EN).encode()
    clean = _html("Tomatoes", _CLEAN_EN).encode()
    padding = "<p>" + "lorem ipsum dolor sit amet " * 40 + "</p>"  # 1,087 bytes

    def padded(size: int) -> bytes:
        return _html("Padded", padding * (size // len(padding)) + _CASINO_EN).encode()

    return {
        # The classic: crawlers (by their User-Agent) get a clean page, browsers the dirty one.
        "/cloak/crawlers-see-clean.html": Route(
            200, html, dirty, "gambling", what="cloaks for crawlers",
            agents=(("urlsieve", clean), ("bot", clean), ("curl", clean)),
        ),
        # The reverse: browsers get the clean page, the crawler's own identity the dirty one
        # (the second look finds it).
        "/cloak/browsers-see-clean.html": Route(
            200, html, clean, "gambling", what="cloaks for browsers",
            agents=(("urlsieve-learn", dirty),),
        ),
        "/pad/2mb.html": Route(200, html, padded(2_000_000), "gambling", what="2 MB of padding"),
        "/pad/2.1mb.html": Route(200, html, padded(2_100_000), "gambling", what="2.1 MB page"),
        # Beyond the tests' scan_bytes (3 MB): never learned clean.
        "/pad/beyond.html": Route(
            200, html, padded(3_500_000), "unclassifiable", what="beyond scan_bytes"
        ),
    }  # fmt: skip


ATTACK_PAGES: dict[str, Route] = _attack_pages()

#: A page's subresources (issue 30): an image and a style sheet; ``expect`` "resource"
#: (their verdict is their site's).
RESOURCE_PAGES: dict[str, Route] = {
    "/res/logo.png": Route(
        200, (("Content-Type", "image/png"),), b"\x89PNG\r\n\x1a\n" + bytes(64), "resource"
    ),
    "/res/site.css": Route(
        200, (("Content-Type", "text/css; charset=utf-8"),), b"body { margin: 0 }\n", "resource"
    ),
}


@dataclass
class Origin:
    port: int
    hits: list[str] = field(default_factory=list)
    #: ``(User-Agent, host+path)`` of every request, in order.
    agents: list[tuple[str, str]] = field(default_factory=list)
    #: The request headers of every request, in order (names lower-cased).
    headers: list[dict[str, str]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def fetched(self, path: str) -> int:
        """How many times any host was asked for ``path``."""
        with self.lock:
            return sum(1 for hit in self.hits if hit.split("/", 1)[-1] == path.lstrip("/"))


@contextlib.contextmanager
def origin_server(
    pages: dict[str, Route] | None = None, *, host: str = "127.0.0.1"
) -> Iterator[Origin]:
    """Serve ``pages`` (default :data:`PAGES`) on ``host`` (a loopback address), any Host;
    404 elsewhere. A key ``name/path`` serves ``path`` to the Host ``name`` only."""
    table = PAGES if pages is None else pages
    origin = Origin(port=0)

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            host = (self.headers.get("Host") or "-").split(":")[0]
            with origin.lock:
                origin.hits.append(f"{host}{self.path}")
                origin.agents.append((self.headers.get("User-Agent") or "", f"{host}{self.path}"))
                origin.headers.append({k.lower(): v for k, v in self.headers.items()})
            path = self.path.split("?", 1)[0]
            route = table.get(f"{host}{path}") or table.get(path)
            if route is None:
                route = Route(404, (("Content-Type", "text/plain"),), b"not found\n", "-")
            if route.delay:
                time.sleep(route.delay)
            body = route.body_for(self.headers.get("User-Agent") or "")
            self.send_response(route.status)
            for name, value in route.headers:
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            with contextlib.suppress(OSError):
                self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass

    with serving(Handler, host) as port:
        origin.port = port
        yield origin
