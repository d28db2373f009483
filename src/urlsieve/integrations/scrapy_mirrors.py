"""Scrapy, seed 004: alias-aware de-duplication and near-duplicate responses.

Settings (``settings.py``)::

    DUPEFILTER_CLASS = "urlsieve.integrations.scrapy_mirrors.AliasDupeFilter"
    DOWNLOADER_MIDDLEWARES = {"urlsieve.integrations.scrapy_mirrors.MirrorMiddleware": 60}
    DNS_RESOLVER = "urlsieve.integrations.scrapy_mirrors.UrlsieveResolver"  # optional

    URLSIEVE_RESOLVER = "system:"          # or "dns://10.0.0.53:53?timeout=2"
    URLSIEVE_SEEN_STORE = "memory:"        # name IDs: any seen-store spec ({jobdir} works)
    URLSIEVE_ADDRESS_STORE = "memory:"     # IP IDs: any seen-store spec
    URLSIEVE_NEARDUP_INDEX = "memory:"     # page SimHashes: any near-duplicate index spec
    URLSIEVE_MIRROR_DISTANCE = 10          # bits: two same-location pages within it agree
    URLSIEVE_NEARDUP_DISTANCE = 3          # bits: the index's k (near duplicates, pairing)
    URLSIEVE_MIRROR_MIN_PAIRS = 3          # same-location page pairs a host-pair decision needs
    URLSIEVE_MIRROR_MIN_RATIO = 0.9        # share of them that must be near duplicates
    URLSIEVE_DROP_NEAR_DUPLICATES = False  # drop a response whose text is a near duplicate
    URLSIEVE_ALIAS_REPORT = None           # path: every host-pair decision as JSON at the end

The duplicate filter runs :class:`~urlsieve.neardup.AliasTracker` on every
GET request: a known name ID is a duplicate; a URL whose IP ID is known but
whose name is new is a *candidate* and is fetched (``urlsieve/alias_candidates``).
The middleware hands each text response's SimHash to the tracker, which
declares two hosts aliases once enough same-location pages agree; from then
on a request for the alias is canonicalised onto the original host, and one
that was already seen there is dropped — at scheduling by the duplicate
filter, or at download time by the middleware for requests scheduled before
the decision (both counted as ``urlsieve/aliases``). With
``URLSIEVE_DROP_NEAR_DUPLICATES`` a response whose text is within
``URLSIEVE_NEARDUP_DISTANCE`` of a page already fetched under another URL is dropped
(``urlsieve/near_duplicates``) and its links are not followed.

``UrlsieveResolver`` makes Scrapy connect through the same resolver (in
Twisted's thread pool), so the crawl and the IDs see the same DNS.

The tracker lives for one crawl process: the stores behind the IDs may be
shared and persistent, but the candidate pairs and the page evidence are in
memory (see :mod:`urlsieve.neardup.aliases`).
"""

from __future__ import annotations

import contextlib
import json
import logging
import weakref
from typing import TYPE_CHECKING, Any, Self

from scrapy.exceptions import IgnoreRequest
from twisted.internet import threads
from twisted.internet.error import DNSLookupError
from twisted.internet.interfaces import IResolverSimple
from zope.interface import implementer

from urlsieve.exceptions import ConfigError, InvalidURL, ResolveError, StoreClosed
from urlsieve.integrations.scrapy import UrlsieveDupeFilter, _has_body_or_method, _profile
from urlsieve.integrations.scrapy import store_spec as _store_spec
from urlsieve.neardup.aliases import DISTANCE, AliasTracker, MirrorDetector
from urlsieve.neardup.resolver import DNSResolver, StaticResolver, open_resolver
from urlsieve.neardup.simhash import EMPTY, simhash
from urlsieve.seen.base import open_seen
from urlsieve.url import parse_url

if TYPE_CHECKING:
    from collections.abc import Sequence

    from scrapy.crawler import Crawler
    from scrapy.http import Request, Response
    from scrapy.settings import BaseSettings
    from scrapy.spiders import Spider
    from twisted.internet.defer import Deferred

__all__ = ["AliasDupeFilter", "MirrorMiddleware", "UrlsieveResolver", "page_text"]

logger = logging.getLogger(__name__)

_TEXT_TYPES = (b"text/html", b"application/xhtml+xml", b"text/plain")


class _Shared:
    """What the resolver, the duplicate filter and the middleware of one crawler share."""

    def __init__(self, settings: BaseSettings) -> None:
        spec = settings.get("URLSIEVE_RESOLVER")
        if not spec:
            raise ConfigError(
                "URLSIEVE_RESOLVER is not set: 'system:' uses /etc/resolv.conf, "
                "'dns://HOST:PORT' a given name server"
            )
        self.resolver: DNSResolver | StaticResolver = open_resolver(spec)
        index_spec = settings.get("URLSIEVE_NEARDUP_INDEX", "memory:")
        from urlsieve.neardup.index import open_index

        self.index = open_index(index_spec, k=settings.getint("URLSIEVE_NEARDUP_DISTANCE", 3))
        detector = MirrorDetector(
            distance=settings.getint("URLSIEVE_MIRROR_DISTANCE", DISTANCE),
            min_pairs=settings.getint("URLSIEVE_MIRROR_MIN_PAIRS", 3),
            min_ratio=settings.getfloat("URLSIEVE_MIRROR_MIN_RATIO", 0.9),
            index=self.index,
        )
        profile = _profile(settings)
        address_spec = settings.get("URLSIEVE_ADDRESS_STORE", "memory:")
        jobdir = settings.get("JOBDIR")
        if "{jobdir}" in address_spec:
            if not jobdir:
                raise ConfigError("URLSIEVE_ADDRESS_STORE uses {jobdir} but JOBDIR is not set")
            address_spec = address_spec.replace("{jobdir}", str(jobdir))
        names_spec = _store_spec(settings)
        self.tracker = AliasTracker(
            self.resolver,
            detector=detector,
            profile=profile,
            # canonicalised through the aliases: a persistent store records that profile
            names=lambda alias_profile: open_seen(names_spec, profile=alias_profile),
            addresses=open_seen(address_spec, profile=profile),
        )
        self.closed = False

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            for store in (self.tracker.names, self.tracker.addresses):
                with contextlib.suppress(StoreClosed):  # the duplicate filter closed its own
                    store.flush()
                    store.close()
            self.index.close()


_SHARED: weakref.WeakKeyDictionary[Crawler, _Shared] = weakref.WeakKeyDictionary()


def _shared(crawler: Crawler) -> _Shared:
    state = _SHARED.get(crawler)
    if state is None:
        state = _SHARED[crawler] = _Shared(crawler.settings)
    return state


def _inc(crawler: Crawler | None, key: str, count: int = 1) -> None:
    if crawler is not None and crawler.stats is not None:
        crawler.stats.inc_value(key, count)


@implementer(IResolverSimple)
class UrlsieveResolver:
    """``DNS_RESOLVER``: Scrapy connects through urlsieve's resolver (``URLSIEVE_RESOLVER``)."""

    def __init__(self, reactor: Any, resolver: DNSResolver | StaticResolver) -> None:
        self.reactor = reactor
        self.resolver = resolver

    @classmethod
    def from_crawler(cls, crawler: Crawler, reactor: Any) -> Self:
        return cls(reactor, _shared(crawler).resolver)

    def install_on_reactor(self) -> None:
        self.reactor.installResolver(self)

    def getHostByName(self, name: str, timeout: Sequence[int] = ()) -> Deferred[str]:
        def first(addresses: tuple[str, ...]) -> str:
            v4 = [a for a in addresses if ":" not in a]
            if not addresses:
                raise DNSLookupError(f"{name}: no address")
            return (v4 or list(addresses))[0]

        def failed(failure: Any) -> Any:
            if failure.check(ResolveError):
                raise DNSLookupError(str(failure.value))
            return failure

        d: Deferred[str] = threads.deferToThreadPool(
            self.reactor, self.reactor.getThreadPool(), self.resolver.resolve, name
        ).addCallback(first)
        d.addErrback(failed)
        return d


class AliasDupeFilter(UrlsieveDupeFilter):
    """``DUPEFILTER_CLASS``: the urlsieve duplicate filter, through confirmed aliases."""

    def __init__(self, shared: _Shared, **kwargs: Any) -> None:
        super().__init__(shared.tracker.names, **kwargs)
        self.shared = shared
        self.tracker = shared.tracker

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        shared = _shared(crawler)
        logger.info("urlsieve alias-aware duplicate filter, resolver %r", shared.resolver)
        return cls(
            shared,
            debug=crawler.settings.getbool("DUPEFILTER_DEBUG"),
            flush_every=crawler.settings.getint("URLSIEVE_FLUSH_EVERY", 1000),
            crawler=crawler,
        )

    def request_seen(self, request: Request) -> bool:
        if _has_body_or_method(request):
            return super().request_seen(request)
        try:
            sighting = self.tracker.see(request.url)
        except InvalidURL:
            self._inc("urlsieve/uncanonical")
            return False
        if sighting.verdict == "candidate":
            self._inc("urlsieve/alias_candidates")
        if sighting.verdict == "duplicate":
            if sighting.aliased:
                self._inc("urlsieve/aliases")
            return True
        if sighting.resolve_error:
            self._inc("urlsieve/resolve_errors")
        self._since_flush += 1
        if self._since_flush >= self.flush_every:
            self.store.flush()
            self._since_flush = 0
        return False

    def close(self, reason: str) -> None:
        if self.crawler is not None and self.crawler.stats is not None:
            confirmed = self.tracker.detector.aliases
            self.crawler.stats.set_value("urlsieve/confirmed_aliases", len(confirmed))
            for host, target in sorted(confirmed.items()):
                logger.info("urlsieve: %s is an alias of %s", host, target)
        report = self.crawler.settings.get("URLSIEVE_ALIAS_REPORT") if self.crawler else None
        if report:
            self._write_report(str(report))
        super().close(reason)
        self.shared.close()

    def _write_report(self, path: str) -> None:
        detector = self.tracker.detector
        body = {
            "thresholds": {
                "distance": detector.distance,
                "min_pairs": detector.min_pairs,
                "min_ratio": detector.min_ratio,
            },
            "aliases": dict(sorted(detector.aliases.items())),
            "decisions": [d.as_dict() for d in detector.decisions()],
            "counts": self.tracker.counts,
        }
        try:
            with open(path, "w", encoding="utf-8") as out:
                json.dump(body, out, indent=1)
        except OSError as exc:
            logger.error("urlsieve: cannot write the alias report %s: %s", path, exc)


def page_text(response: Response) -> str | None:
    """The visible text of an HTML or plain-text response (None for other content)."""
    ctype = (response.headers.get(b"Content-Type") or b"text/html").split(b";")[0].strip().lower()
    if ctype not in _TEXT_TYPES or not hasattr(response, "text"):
        return None
    if ctype == b"text/plain":
        return str(response.text)
    parts = response.xpath(
        "//body//text()[not(ancestor::script or ancestor::style or ancestor::noscript)]"
    ).getall()
    return " ".join(parts)


class MirrorMiddleware:
    """``DOWNLOADER_MIDDLEWARES`` entry: aliases at download time, SimHash of every text page."""

    def __init__(self, shared: _Shared, *, crawler: Crawler | None = None, drop: bool = False):
        self.shared = shared
        self.tracker = shared.tracker
        self.crawler = crawler
        self.drop = drop

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        drop = crawler.settings.getbool("URLSIEVE_DROP_NEAR_DUPLICATES")
        return cls(_shared(crawler), crawler=crawler, drop=drop)

    def process_request(self, request: Request, spider: Spider | None = None) -> None:
        if _has_body_or_method(request):
            return
        try:
            now = self.tracker.canonical(request.url)
            base_host = parse_url(request.url, self.tracker.base_profile).host
        except InvalidURL:
            return
        if now.host != base_host and not self.tracker.names.add(now.canonical):
            # Scheduled before its host was found to be an alias; the original has it.
            _inc(self.crawler, "urlsieve/aliases")
            raise IgnoreRequest(f"{request.url} is {now.canonical}, already seen (alias)")

    def process_response(
        self, request: Request, response: Response, spider: Spider | None = None
    ) -> Response:
        if response.status != 200:
            return response
        text = page_text(response)
        if text is None:
            return response
        fp = simhash(text)
        if fp == EMPTY:
            return response
        try:
            page = parse_url(response.url, self.tracker.base_profile)
        except InvalidURL:
            return response
        hits = self.shared.index.query(fp, self.tracker.detector.search)
        near = [key for key, _ in hits if key != page.canonical]
        self.tracker.detector.observe(page, fp, hits=hits)  # adds the page to the index
        if near and self.drop:
            _inc(self.crawler, "urlsieve/near_duplicates")
            raise IgnoreRequest(f"{response.url} is a near duplicate of {near[0]}")
        return response
