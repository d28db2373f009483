"""The crawler: fetch the pages of unknown URLs, politely and safely (aiohttp).

One :class:`Crawler` per learner process; :meth:`Crawler.fetch` fetches one URL and
:meth:`Crawler.fetch_all` many, ``concurrency`` at a time and results as they finish.
Neither raises for network errors or hostile input: every fetch ends in a
:class:`Fetched` whose ``outcome`` says what happened and ``reason`` why.

What a fetch does, in order:

1. The URL is read as the URL canonicaliser reads it (:func:`urlsieve.url.parse_url`);
   only ``http`` and ``https`` are fetched; userinfo is dropped, never sent.
2. The SSRF guard (:mod:`urlsieve.learn.guard`) checks the address and the port of every
   request the crawler makes — the page, each redirect hop, robots.txt and each of its
   redirects, a retry: IP-literal hosts here (:meth:`Crawler._admit`), every address of
   a name in the resolver aiohttp connects through. A refusal names the setting that
   would allow it (``learn.crawl.allow_networks``, ``learn.crawl.ports``).
3. robots.txt (protego) is fetched once per scheme+host+port, at most
   ``robots_max_bytes`` of it read, and cached for ``robots_ttl``. Like Google: a 4xx
   answer means "allow everything", a 5xx or 429 answer means "disallow everything"
   for ``robots_retry`` seconds; a robots.txt that cannot be fetched (timeout, refused,
   network error) fails the pages of that site the same way, for the same time.
4. At most ``per_host`` fetches run per host name (and ``concurrency`` overall), and two
   fetches to one host start at least ``delay`` seconds apart (or the robots.txt
   ``Crawl-delay``, capped at ``max_crawl_delay``, when it is longer).
5. Redirects are followed by hand: each ``Location`` is resolved against the current
   URL, must be http(s), is passed to ``check_hop`` (the URL filter: a hop it blocks
   blocks the start URL, outcome ``redirect-blocked``, and the blocked host is never
   contacted), to the guard and to robots.txt, at most ``max_redirects`` times.
6. Only ``content_types`` are read; a 2xx answer of a subresource type
   (:data:`SUBRESOURCE_TYPES`: images, media, fonts, style sheets, scripts) is outcome
   ``resource`` (its site decides it, see :mod:`urlsieve.learn.overlay`), any other type
   ``not-html``; the body of either is not read;
   ``gzip``, ``deflate`` and ``br`` are decoded here, with the byte cap applied to the
   decoded bytes as they are produced (a gzip bomb costs ``max_bytes``, not its
   expansion); the rest of a body past ``max_bytes`` is not read (``Page.truncated``) —
   unless the crawler has a scanner: then it is read on, up to ``scan_bytes``, and
   classified as it comes (``Fetched.scan``; bounded memory, the first ``max_bytes`` kept).
7. It fetches as a browser (``user_agent``, ``accept``, ``accept_language``); ``fetch(url,
   user_agent=…)`` fetches as another identity (the learner's second look, cloaking).
   ``timeout`` bounds each hop (connect, headers and body) and each robots.txt fetch.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import zlib
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal, Protocol
from urllib.parse import urljoin

import aiohttp
from protego import Protego
from yarl import URL as YURL

from urlsieve import __version__
from urlsieve.exceptions import ConfigError, InvalidURL
from urlsieve.learn.guard import AddressRefused, Guard, GuardedResolver
from urlsieve.learn.page import Page
from urlsieve.url import parse_url

if TYPE_CHECKING:
    from urlsieve.learn.classify import Classification

__all__ = [
    "BROWSER_ACCEPT",
    "BROWSER_USER_AGENT",
    "CRAWLER_USER_AGENT",
    "CrawlSettings",
    "CrawlStats",
    "Crawler",
    "Fetched",
    "Outcome",
    "PageScan",
    "SUBRESOURCE_PREFIXES",
    "SUBRESOURCE_TYPES",
    "is_subresource_type",
]

Outcome = Literal[
    "page",
    "robots",
    "refused",
    "redirect-blocked",
    "not-html",
    "resource",
    "http-error",
    "timeout",
    "too-many-redirects",
    "error",
]
#: ``check_hop(canonical_url)`` -> ``(category, where)`` of the rule that blocks it, or None.
HopCheck = Callable[[str], "tuple[str, str] | None"]

_REDIRECTS = frozenset({301, 302, 303, 307, 308})
_CHUNK = 1 << 16
#: The Accept header of the crawler's own identity (the second fetch).
_ACCEPT = "text/html,application/xhtml+xml,text/plain;q=0.9,*/*;q=0.1"
#: The identity the crawler fetches as by default: a current desktop browser's, so that a
#: site which shows crawlers a clean page (cloaking) shows the crawler what its users see.
BROWSER_USER_AGENT = (
    "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) "
    "Chrome/131.0.0.0 Safari/537.36"
)
BROWSER_ACCEPT = (
    "text/html,application/xhtml+xml,application/xml;q=0.9,image/avif,image/webp,*/*;q=0.8"
)
#: The second identity: the crawler saying what it is.
CRAWLER_USER_AGENT = f"urlsieve-learn/{__version__}"
#: The media types of a page's subresources (issue 30): a 2xx answer of one of these is not
#: read but learned as a ``resource``, whose verdict follows its site's pages (images,
#: media, fonts, style sheets, scripts, WebAssembly). Every other type the crawler does not
#: read (``application/octet-stream``, ``application/pdf``, archives, …) stays ``not-html``.
SUBRESOURCE_TYPES = frozenset(
    {
        "text/css",
        "text/javascript",
        "text/ecmascript",
        "application/javascript",
        "application/x-javascript",
        "application/ecmascript",
        "application/wasm",
        "application/vnd.ms-fontobject",
    }
)
#: ... and every type under these prefixes.
SUBRESOURCE_PREFIXES = ("image/", "audio/", "video/", "font/", "application/font-",
                        "application/x-font-")  # fmt: skip


def is_subresource_type(media: str) -> bool:
    """Whether ``media`` (a Content-Type's media type, lower case, no parameters) is a
    subresource type (:data:`SUBRESOURCE_TYPES`, :data:`SUBRESOURCE_PREFIXES`)."""
    return media in SUBRESOURCE_TYPES or media.startswith(SUBRESOURCE_PREFIXES)


#: Bytes fed to a page scan at a time (the classifier works in segments of its own).
_SCAN_FEED = 1 << 20


class PageScan(Protocol):
    """A page classified as it is read (:meth:`urlsieve.learn.classify.Classifier.scan`)."""

    def feed(self, data: bytes) -> None: ...

    def finish(self, *, complete: bool = True) -> Classification: ...


#: ``scanner(content_type)``: a new :class:`PageScan` for one page.
Scanner = Callable[["str | None"], PageScan]


def _brotli_capped() -> bool:
    """Whether the installed brotli can cap its output (1.2+); else ``br`` is not asked for."""
    try:
        import brotli

        brotli.Decompressor().process(b"", output_buffer_limit=1)
    except Exception:
        return False
    return True


@dataclass(frozen=True)
class CrawlSettings:
    """What the crawler fetches and how politely; see the module docstring."""

    user_agent: str = BROWSER_USER_AGENT
    accept: str = BROWSER_ACCEPT
    accept_language: str = "en-US,en;q=0.9"
    #: The second identity a clean page is fetched again as ("" for none): see
    #: :mod:`urlsieve.learn.runner` (cloaking).
    check_user_agent: str = CRAWLER_USER_AGENT
    #: The name robots.txt rules are matched against (the crawler's product token).
    robots_agent: str = "urlsieve-learn"
    timeout: float = 10.0
    max_bytes: int = 2_000_000
    #: A page longer than ``max_bytes`` is read on, up to this many bytes, and classified
    #: as it is read (when the crawler has a classifier): see ``Fetched.scan``.
    scan_bytes: int = 32_000_000
    concurrency: int = 64
    per_host: int = 2
    delay: float = 0.0
    max_redirects: int = 5
    content_types: tuple[str, ...] = ("text/html", "application/xhtml+xml", "text/plain")
    robots: bool = True
    robots_ttl: float = 3600.0
    robots_retry: float = 300.0
    robots_max_bytes: int = 500 * 1024
    max_crawl_delay: float = 10.0
    allow_networks: tuple[str, ...] = ()
    #: Ports fetched from public addresses (any port inside ``allow_networks``).
    ports: tuple[int, ...] = (80, 443, 8000, 8080, 8443)
    hosts: Mapping[str, str | Sequence[str]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.timeout <= 0 or self.delay < 0 or self.max_crawl_delay < 0:
            raise ConfigError("crawl: timeout must be > 0, delay and max_crawl_delay >= 0")
        if self.max_bytes < 1 or self.robots_max_bytes < 1:
            raise ConfigError("crawl: max_bytes and robots_max_bytes must be >= 1")
        if self.scan_bytes < self.max_bytes:
            raise ConfigError(
                f"crawl: scan_bytes ({self.scan_bytes}) must be >= max_bytes ({self.max_bytes})"
            )
        if self.concurrency < 1 or self.per_host < 1 or self.max_redirects < 0:
            raise ConfigError("crawl: concurrency and per_host >= 1, max_redirects >= 0")


@dataclass(frozen=True)
class Fetched:
    """The end of one fetch: ``page`` for outcome ``"page"`` (a truncated page too);
    ``blocked`` is ``(category, where)`` of the rule that blocked a redirect hop."""

    url: str
    outcome: Outcome
    reason: str
    page: Page | None = None
    blocked: tuple[str, str] | None = None
    #: Whether the fetch ended past the URL itself: at a redirect hop or in robots.txt
    #: (what the site chose, as opposed to the URL a client asked for).
    by_site: bool = False
    #: A page longer than ``max_bytes`` (``page`` holds its first ``max_bytes``) read on,
    #: up to ``scan_bytes``, and classified as it was read, when the crawler has a
    #: scanner; its ``truncated`` says the page was longer still.
    scan: Classification | None = None


@dataclass
class CrawlStats:
    """Counters of one crawler (for logs and metrics)."""

    outcomes: dict[str, int] = field(default_factory=dict)
    #: Bytes read from the network (before decoding), pages and robots.txt.
    bytes_read: int = 0
    robots_fetched: int = 0
    requests: int = 0


class _Stop(Exception):
    """Ends a fetch early with an outcome (internal)."""

    def __init__(
        self, outcome: Outcome, reason: str, blocked: tuple[str, str] | None = None
    ) -> None:
        super().__init__(reason)
        self.outcome: Outcome = outcome
        self.reason = reason
        self.blocked = blocked
        self.by_site = False


@dataclass(frozen=True)
class _Target:
    """A URL the crawler may request: its request form and its canonical form."""

    url: str  # what is requested (port kept, userinfo and fragment dropped)
    canonical: str  # what the URL filter sees
    scheme: str
    host: str
    port: int

    @property
    def origin(self) -> tuple[str, str, int]:
        return self.scheme, self.host, self.port


def _target(url: str) -> _Target:
    """Read ``url`` as the canonicaliser does; refuse what is not http(s)."""
    try:
        parsed = parse_url(url)
    except InvalidURL as exc:
        raise _Stop("error", f"invalid URL: {exc.reason}") from None
    if parsed.scheme not in ("http", "https"):
        raise _Stop("refused", f"scheme {parsed.scheme!r} is not fetched (http and https only)")
    default = 443 if parsed.scheme == "https" else 80
    port = parsed.port or default
    netloc = parsed.host if port == default else f"{parsed.host}:{port}"
    query = "" if parsed.query is None else f"?{parsed.query}"
    return _Target(
        f"{parsed.scheme}://{netloc}{parsed.path}{query}",
        parsed.canonical,
        parsed.scheme,
        parsed.host,
        port,
    )


class _Decoder:
    """Content-Encoding decoding that never produces more than it is asked for."""

    def __init__(self, encoding: str) -> None:
        self.encoding = encoding
        self._zlib: zlib._Decompress | None = None
        self._brotli: Any = None
        self._first = True
        self._rest = b""
        if encoding == "br":
            import brotli

            self._brotli = brotli.Decompressor()

    def _start_zlib(self, data: bytes) -> zlib._Decompress:
        if self.encoding in ("gzip", "x-gzip"):
            return zlib.decompressobj(16 + zlib.MAX_WBITS)
        # "deflate" is meant to be zlib-wrapped (RFC 9110) but many servers send it raw.
        wrapped = len(data) >= 2 and data[0] & 0x0F == 8 and (data[0] << 8 | data[1]) % 31 == 0
        return zlib.decompressobj(zlib.MAX_WBITS if wrapped else -zlib.MAX_WBITS)

    def feed(self, data: bytes, room: int) -> bytes:
        """Decode ``data``; at most ``room`` bytes come out. What is left of the input is
        kept: :attr:`pending` says so, and ``feed(b"", room)`` goes on with it."""
        if self._brotli is not None:
            return self._feed_brotli(data, room)
        data = self._rest + data if self._rest else data
        out = b""
        while data and len(out) < room:
            if self._zlib is None:
                self._zlib = self._start_zlib(data)
            out += self._zlib.decompress(data, room - len(out))
            if self._zlib.eof:  # a gzip stream may hold several members
                data = self._zlib.unused_data
                self._zlib = None if data else self._zlib
            else:
                data = self._zlib.unconsumed_tail
        self._rest = data
        return out

    @property
    def pending(self) -> bool:
        """Whether input given is not decoded yet (output was capped)."""
        if self._brotli is not None:
            return not self._brotli.can_accept_more_data()
        return bool(self._rest)

    def _feed_brotli(self, data: bytes, room: int) -> bytes:
        import brotli

        decoder = self._brotli
        try:
            out: bytes = decoder.process(data, output_buffer_limit=room)
            while len(out) < room and not decoder.can_accept_more_data():
                more: bytes = decoder.process(b"", output_buffer_limit=room - len(out))
                if not more:
                    break
                out += more
        except brotli.error as exc:
            raise ValueError(f"brotli: {exc}") from None
        return out


class _HostSlot:
    """Per-host politeness: a semaphore and the earliest time the next fetch may start."""

    __slots__ = ("next_start", "semaphore", "users")

    def __init__(self, per_host: int) -> None:
        self.semaphore = asyncio.Semaphore(per_host)
        self.next_start = 0.0
        self.users = 0


@dataclass
class _Robots:
    expires: float
    parser: Protego | None = None  # None: allow or disallow everything, by ``allow``
    allow: bool = True
    stop: _Stop | None = None  # robots.txt failed: pages of the site get this outcome


class Crawler:
    """An async crawler; use it as ``async with Crawler(settings) as crawler:``.

    ``check_hop`` receives the canonical URL of every redirect target and returns the
    ``(category, where)`` of the rule that blocks it, or None to follow it.
    """

    def __init__(
        self,
        settings: CrawlSettings,
        *,
        check_hop: HopCheck | None = None,
        scanner: Scanner | None = None,
    ) -> None:
        self.settings = settings
        self.check_hop = check_hop
        self.scanner = scanner
        self.guard = Guard(settings.allow_networks, settings.ports)
        self.stats = CrawlStats()
        self._session: aiohttp.ClientSession | None = None
        self._semaphore: asyncio.Semaphore | None = None
        self._hosts: dict[str, _HostSlot] = {}
        self._robots: dict[tuple[str, str, int], _Robots] = {}
        self._robots_pending: dict[tuple[str, str, int], asyncio.Task[_Robots]] = {}
        self._crawl_delays: dict[str, float] = {}  # host -> robots.txt Crawl-delay (capped)
        self._encodings = "gzip, deflate, br" if _brotli_capped() else "gzip, deflate"
        #: The headers of the crawler's identity (a browser's by default).
        self._identity = {"User-Agent": settings.user_agent, "Accept": settings.accept}
        if settings.accept_language:
            self._identity["Accept-Language"] = settings.accept_language

    async def __aenter__(self) -> Crawler:
        resolver = GuardedResolver(self.guard, hosts=self.settings.hosts)
        connector = aiohttp.TCPConnector(
            resolver=resolver, limit=self.settings.concurrency, limit_per_host=0
        )
        self._session = aiohttp.ClientSession(
            connector=connector,
            cookie_jar=aiohttp.DummyCookieJar(),
            trust_env=False,  # a proxy would resolve the target itself, past the guard
            auto_decompress=False,  # decoded here, under the byte cap
            headers={"Accept-Encoding": self._encodings},
        )
        self._semaphore = asyncio.Semaphore(self.settings.concurrency)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        for task in self._robots_pending.values():
            task.cancel()
        if self._session is not None:
            await self._session.close()
            self._session = None

    # -- one URL ---------------------------------------------------------------------------

    async def fetch(
        self, url: str, *, queued_at: float | None = None, user_agent: str | None = None
    ) -> Fetched:
        """Fetch ``url`` (following redirects); never raises for network errors or input.
        ``user_agent`` fetches under another identity (that User-Agent, the crawler's own
        Accept header, no Accept-Language) instead of the settings' one."""
        if self._session is None:
            raise RuntimeError("use the crawler inside 'async with Crawler(...)'")
        headers = self._identity
        if user_agent is not None:
            headers = {"User-Agent": user_agent, "Accept": _ACCEPT}
        try:
            result = await self._fetch(url, queued_at, headers)
        except _Stop as stop:
            result = Fetched(
                url, stop.outcome, stop.reason, blocked=stop.blocked, by_site=stop.by_site
            )
        except Exception as exc:  # a bug or an exotic failure must not end the crawl
            result = Fetched(url, "error", f"{type(exc).__name__}: {exc}"[:500])
        self.stats.outcomes[result.outcome] = self.stats.outcomes.get(result.outcome, 0) + 1
        return result

    async def _fetch(self, url: str, queued_at: float | None, headers: dict[str, str]) -> Fetched:
        target = _target(url)
        hops = [url]
        seen = {target.url}
        while True:
            try:
                response_or_page = await self._hop(target, url, hops, queued_at, headers)
            except _Stop as stop:
                stop.by_site = stop.by_site or len(hops) > 1
                raise
            if isinstance(response_or_page, tuple):
                page, scan = response_or_page
                return Fetched(url, "page", f"HTTP {page.status}", page, scan=scan)
            location = response_or_page
            if len(hops) > self.settings.max_redirects:
                raise _Stop(
                    "too-many-redirects", f"more than {self.settings.max_redirects} redirects"
                )
            target = self._next_hop(target, location)
            if target.url in seen:
                raise _Stop("too-many-redirects", f"redirect loop back to {target.url}")
            seen.add(target.url)
            hops.append(target.url)

    def _next_hop(self, current: _Target, location: str) -> _Target:
        absolute = urljoin(current.url, location.strip())
        scheme = absolute.partition(":")[0].lower()
        if scheme not in ("http", "https"):
            raise _Stop("refused", f"redirect to a {scheme!r} URL refused: {location[:200]!r}")
        try:
            target = _target(absolute)
        except _Stop as stop:
            raise _Stop(stop.outcome, f"redirect to {location[:200]!r}: {stop.reason}") from None
        if self.check_hop is not None:
            blocked = self.check_hop(target.canonical)
            if blocked is not None:
                category, where = blocked
                raise _Stop(
                    "redirect-blocked",
                    f"redirect to {target.canonical} is blocked ({category}, {where})",
                    blocked,
                )
        return target

    def _admit(self, target: _Target) -> None:
        """The guard's address and port checks, before any request (a page, a redirect hop,
        robots.txt or one of its redirects, a retry): an IP-literal host is checked here,
        since aiohttp calls no resolver for it; a name's addresses and port are checked by
        :class:`GuardedResolver` when aiohttp connects."""
        refused = self.guard.check_host(target.host)
        literal = self.guard.literal(target.host)
        if refused is None and literal is not None:
            refused = self.guard.check_port(target.host, target.port, [literal])
        if refused is not None:
            raise _Stop("refused", refused)

    async def _hop(
        self,
        target: _Target,
        start: str,
        hops: list[str],
        queued_at: float | None,
        headers: dict[str, str],
    ) -> tuple[Page, Classification | None] | str:
        """Request one URL: a Page (and its scan), or the Location of a redirect."""
        self._admit(target)
        if self.settings.robots:
            await self._robots_check(target)
        async with self._host_slot(target.host):
            return await self._request(target, start, hops, queued_at, headers)

    async def _request(
        self,
        target: _Target,
        start: str,
        hops: list[str],
        queued_at: float | None,
        headers: dict[str, str],
    ) -> tuple[Page, Classification | None] | str:
        assert self._session is not None and self._semaphore is not None
        async with self._semaphore:
            try:
                async with asyncio.timeout(self.settings.timeout):
                    self.stats.requests += 1
                    async with self._session.get(
                        YURL(target.url, encoded=True), allow_redirects=False, headers=headers
                    ) as response:
                        return await self._response(response, target, start, hops, queued_at)
            except TimeoutError:
                raise _Stop(
                    "timeout", f"{target.url}: no complete answer in {self.settings.timeout} s"
                ) from None
            except aiohttp.ClientError as exc:
                raise _network_stop(target.url, exc) from None

    async def _response(
        self,
        response: aiohttp.ClientResponse,
        target: _Target,
        start: str,
        hops: list[str],
        queued_at: float | None,
    ) -> tuple[Page, Classification | None] | str:
        status = response.status
        if status in _REDIRECTS:
            location = response.headers.get("Location")
            if location:
                return location
            raise _Stop("http-error", f"HTTP {status} without a Location")
        if status >= 300:
            raise _Stop("http-error", f"HTTP {status} from {target.url}")
        ctype = response.headers.get("Content-Type")
        if ctype is not None:
            media = ctype.partition(";")[0].strip().lower()
            if media not in self.settings.content_types:
                if is_subresource_type(media):
                    raise _Stop("resource", f"Content-Type {media} (a subresource)")
                raise _Stop("not-html", f"Content-Type {media or ctype!r} is not fetched")
        scan = None
        if self.scanner is not None:
            scan = _LazyScan(self.scanner, ctype)
        if scan is not None and self.settings.scan_bytes > self.settings.max_bytes:
            body, truncated = await self._read_scanning(response, self.settings.max_bytes, scan)
        else:
            body, truncated = await self._read(response, self.settings.max_bytes)
        if ctype is None and b"\x00" in body[:1024]:
            raise _Stop("not-html", "no Content-Type, and the body looks binary")
        headers = tuple(
            (name.decode("latin-1"), value.decode("latin-1"))
            for name, value in response.raw_headers
        )
        page = Page(
            url=start,
            final_url=target.url,
            status=status,
            headers=headers,
            body=body,
            fetched_at=time.time(),
            truncated=truncated,
            hops=tuple(hops) if len(hops) > 1 else (),
            queued_at=queued_at,
        )
        result = None
        if scan is not None and scan.scan is not None:
            result = await asyncio.to_thread(scan.scan.finish, complete=scan.complete)
        return page, result

    def _decoder(self, response: aiohttp.ClientResponse) -> tuple[str, _Decoder | None]:
        """The body's Content-Encoding and its decoder (None for ``identity``)."""
        coding = response.headers.get("Content-Encoding", "identity").strip().lower()
        if coding in ("", "identity"):
            return coding, None
        if coding not in ("gzip", "x-gzip", "deflate") and not (
            coding == "br" and "br" in self._encodings
        ):
            raise _Stop("error", f"unsupported Content-Encoding {coding[:50]!r}")
        return coding, _Decoder(coding)

    async def _read(self, response: aiohttp.ClientResponse, cap: int) -> tuple[bytes, bool]:
        """At most ``cap`` decoded bytes of the body, and whether there was more."""
        coding, decoder = self._decoder(response)
        parts: list[bytes] = []
        size = 0
        try:
            while size <= cap:
                chunk = await response.content.read(_CHUNK)
                if not chunk:
                    break
                self.stats.bytes_read += len(chunk)
                if decoder is not None:
                    chunk = decoder.feed(chunk, cap + 1 - size)
                parts.append(chunk)
                size += len(chunk)
        except (zlib.error, ValueError) as exc:
            raise _Stop("error", f"cannot decode Content-Encoding {coding}: {exc}") from None
        body = b"".join(parts)
        if len(body) > cap:
            response.close()  # the rest is never read: drop the connection
            return body[:cap], True
        return body, False

    async def _read_scanning(
        self, response: aiohttp.ClientResponse, cap: int, scan: _LazyScan
    ) -> tuple[bytes, bool]:
        coding, decoder = self._decoder(response)
        limit = self.settings.scan_bytes
        kept: list[bytes] = []  # the first ``cap`` bytes (and a chunk more): the page's body
        pending: list[bytes] = []  # bytes not yet fed to the scan (once it has started)
        size = waiting = 0
        try:
            while size < limit:
                data = await response.content.read(_CHUNK)
                if not data:
                    scan.complete = True
                    break
                self.stats.bytes_read += len(data)
                while True:  # a decoder's output is taken a megabyte at a time
                    chunk = data
                    if decoder is not None:
                        chunk = decoder.feed(data, min(limit - size, _SCAN_FEED))
                    data = b""
                    if size <= cap:
                        kept.append(chunk)
                    size += len(chunk)
                    if size > cap:
                        if scan.scan is None and not pending:
                            pending, waiting = list(kept), size  # the page is long: scan it
                        else:
                            pending.append(chunk)
                            waiting += len(chunk)
                        if waiting >= _SCAN_FEED:  # the classifier's work, off the event loop
                            await asyncio.to_thread(scan.feed, b"".join(pending))
                            pending, waiting = [], 0
                    if decoder is None or not decoder.pending or size >= limit:
                        break
        except (zlib.error, ValueError) as exc:
            raise _Stop("error", f"cannot decode Content-Encoding {coding}: {exc}") from None
        if size <= cap:
            return b"".join(kept), False  # an ordinary page: classified from the spool
        if pending:
            await asyncio.to_thread(scan.feed, b"".join(pending))
        if not scan.complete:
            response.close()  # past scan_bytes: the rest is never read
        return b"".join(kept)[:cap], True

    # -- politeness ------------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def _host_slot(self, host: str) -> AsyncIterator[None]:
        slot = self._hosts.get(host)
        if slot is None:
            slot = self._hosts[host] = _HostSlot(self.settings.per_host)
        slot.users += 1
        loop = asyncio.get_running_loop()
        try:
            async with slot.semaphore:
                delay = self._delay(host)
                if delay > 0:
                    while (wait := slot.next_start - loop.time()) > 0:
                        await asyncio.sleep(wait)
                    slot.next_start = loop.time() + delay
                yield
        finally:
            slot.users -= 1
            if slot.users == 0:
                wait = slot.next_start - loop.time()
                if wait <= 0:
                    self._hosts.pop(host, None)
                else:
                    loop.call_later(wait, self._forget_host, host, slot)

    def _forget_host(self, host: str, slot: _HostSlot) -> None:
        if slot.users == 0 and self._hosts.get(host) is slot:
            del self._hosts[host]

    def _delay(self, host: str) -> float:
        return max(self.settings.delay, self._crawl_delays.get(host, 0.0))

    # -- robots.txt ------------------------------------------------------------------------

    async def _robots_check(self, target: _Target) -> None:
        key = target.origin
        loop = asyncio.get_running_loop()
        entry = self._robots.get(key)
        if entry is None or entry.expires <= loop.time():
            task = self._robots_pending.get(key)
            if task is None:
                task = asyncio.ensure_future(self._fetch_robots(target))
                self._robots_pending[key] = task  # _fetch_robots removes it when done
            entry = await asyncio.shield(task)
        if entry.stop is not None:
            stop = _Stop(entry.stop.outcome, entry.stop.reason)
            stop.by_site = True
            raise stop
        if entry.parser is not None:
            allowed = entry.parser.can_fetch(target.url, self.settings.robots_agent)
        else:
            allowed = entry.allow
        if not allowed:
            raise _Stop("robots", f"robots.txt of {target.host} disallows {target.url}")

    async def _fetch_robots(self, target: _Target) -> _Robots:
        loop = asyncio.get_running_loop()
        try:
            entry = await self._robots_entry(target)
        finally:
            self._robots_pending.pop(target.origin, None)
        entry.expires += loop.time()
        self._robots.pop(target.origin, None)
        while len(self._robots) >= 100_000:
            del self._robots[next(iter(self._robots))]
        self._robots[target.origin] = entry
        if entry.parser is not None:
            crawl_delay = entry.parser.crawl_delay(self.settings.robots_agent)
            if crawl_delay:
                if len(self._crawl_delays) >= 100_000:
                    del self._crawl_delays[next(iter(self._crawl_delays))]
                capped = min(float(crawl_delay), self.settings.max_crawl_delay)
                self._crawl_delays[target.host] = capped
        return entry

    async def _robots_entry(self, target: _Target) -> _Robots:
        """robots.txt of ``target``'s site, with its lifetime in ``expires`` (relative).

        Every request, the first and each redirect, passes :meth:`_admit` as a page does: a
        robots.txt that redirects to a refused address or port fails the site's pages with
        the refusal (``refused``) and is not fetched."""
        default = 443 if target.scheme == "https" else 80
        netloc = target.host if target.port == default else f"{target.host}:{target.port}"
        url = f"{target.scheme}://{netloc}/robots.txt"
        retry = self.settings.robots_retry
        self.stats.robots_fetched += 1
        for hop in range(self.settings.max_redirects + 1):
            try:
                robots = _target(url)
                self._admit(robots)
                status, location, body = await self._robots_get(robots)
            except _Stop as stop:
                where = "robots.txt" if hop == 0 else f"robots.txt (redirected to {url[:200]})"
                return _Robots(retry, stop=_Stop(stop.outcome, f"{where}: {stop.reason}"))
            if status in _REDIRECTS and location:
                url = urljoin(robots.url, location.strip())
                if not url.startswith(("http://", "https://")):
                    return _Robots(self.settings.robots_ttl, allow=True)
                continue
            if 200 <= status < 300:
                text = body.decode("utf-8", "replace")
                try:
                    return _Robots(self.settings.robots_ttl, parser=Protego.parse(text))
                except Exception:  # an unreadable robots.txt restricts nothing
                    return _Robots(self.settings.robots_ttl, allow=True)
            if status == 429 or status >= 500:
                return _Robots(
                    retry,
                    stop=_Stop(
                        "robots",
                        f"robots.txt of {target.host} answered HTTP {status}: the site is "
                        f"treated as disallowed for {retry:g} s",
                    ),
                )
            return _Robots(self.settings.robots_ttl, allow=True)  # 4xx (and 1xx/3xx oddities)
        return _Robots(self.settings.robots_ttl, allow=True)  # too many redirects: no rules

    async def _robots_get(self, target: _Target) -> tuple[int, str | None, bytes]:
        assert self._session is not None and self._semaphore is not None
        async with self._semaphore:
            try:
                async with asyncio.timeout(self.settings.timeout):
                    self.stats.requests += 1
                    async with self._session.get(
                        YURL(target.url, encoded=True),
                        allow_redirects=False,
                        headers=self._identity,
                    ) as response:
                        location = response.headers.get("Location")
                        body = b""
                        if 200 <= response.status < 300:
                            body, _ = await self._read(response, self.settings.robots_max_bytes)
                        return response.status, location, body
            except TimeoutError:
                raise _Stop("timeout", f"no answer in {self.settings.timeout} s") from None
            except aiohttp.ClientError as exc:
                raise _network_stop(target.url, exc) from None

    # -- many URLs -------------------------------------------------------------------------

    async def fetch_all(self, urls: Iterable[tuple[str, float | None]]) -> AsyncIterator[Fetched]:
        """Fetch ``(url, queued_at)`` pairs, ``concurrency`` at a time, yielding results as
        they finish. URLs wait in per-host queues (at most ``16 × concurrency`` read ahead),
        so one slow or busy host does not hold up the others."""
        source = iter(urls)
        exhausted = False
        waiting: dict[str, deque[tuple[str, float | None]]] = {}
        buffered = 0
        running: dict[asyncio.Task[Fetched], str] = {}
        busy: dict[str, int] = {}
        ahead = 16 * self.settings.concurrency
        try:
            while True:
                while not exhausted and buffered < ahead:
                    item = next(source, None)
                    if item is None:
                        exhausted = True
                        break
                    waiting.setdefault(_host_key(item[0]), deque()).append(item)
                    buffered += 1
                for host in list(waiting):
                    queue = waiting[host]
                    while (
                        queue
                        and busy.get(host, 0) < self.settings.per_host
                        and len(running) < self.settings.concurrency
                    ):
                        url, queued_at = queue.popleft()
                        buffered -= 1
                        task = asyncio.ensure_future(self.fetch(url, queued_at=queued_at))
                        running[task] = host
                        busy[host] = busy.get(host, 0) + 1
                    if not queue:
                        del waiting[host]
                if not running:
                    if exhausted and not buffered:
                        return
                    continue
                done, _ = await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
                for task in done:
                    host = running.pop(task)
                    busy[host] -= 1
                    if not busy[host]:
                        del busy[host]
                    yield task.result()
        finally:
            for task in running:
                task.cancel()
            if running:
                await asyncio.gather(*running, return_exceptions=True)


class _LazyScan:
    """A page scan started only once a body passes ``max_bytes`` (ordinary pages are
    classified from the spool; no work is done twice for them)."""

    def __init__(self, scanner: Scanner, content_type: str | None) -> None:
        self.scanner = scanner
        self.content_type = content_type
        self.scan: PageScan | None = None
        self.complete = False

    def feed(self, data: bytes) -> None:
        if self.scan is None:
            self.scan = self.scanner(self.content_type)
        self.scan.feed(data)


def _host_key(url: str) -> str:
    try:
        return parse_url(url).host
    except InvalidURL:
        return ""


def _network_stop(url: str, exc: aiohttp.ClientError) -> _Stop:
    """A ``_Stop`` for an aiohttp failure: the guard's refusal, or a network error."""
    if isinstance(exc, aiohttp.ClientConnectorError) and isinstance(exc.os_error, AddressRefused):
        return _Stop("refused", exc.os_error.reason)
    return _Stop("error", f"{url}: {type(exc).__name__}: {exc}"[:500])
