"""Scrapy integration: a duplicate filter on any seen store, a request fingerprinter,
and a downloader middleware that drops requests a urlsieve filter blocks.

Settings (``settings.py`` of a Scrapy project)::

    DUPEFILTER_CLASS = "urlsieve.integrations.scrapy.UrlsieveDupeFilter"
    REQUEST_FINGERPRINTER_CLASS = "urlsieve.integrations.scrapy.UrlsieveFingerprinter"

    URLSIEVE_SEEN_STORE = "bloom:/var/lib/crawl/seen.bloom?capacity=100000000&error=0.001"
    URLSIEVE_PROFILE = "crawler"        # or "filter"; the canonicalisation profile
    URLSIEVE_BATCH = 1000               # new requests written to the store together
    URLSIEVE_FLUSH_SECONDS = 5.0        # fsync the store at most this often
    URLSIEVE_FLUSH_EVERY = 0            # and/or every N new requests (0: by time only)

Which store (first match wins):

1. ``URLSIEVE_SEEN_STORE``, any spec :func:`urlsieve.seen.open_seen` accepts;
   ``{jobdir}`` in it is replaced by the ``JOBDIR`` setting.
2. With ``JOBDIR`` set: a persistent store in the job directory, so that a
   resumed crawl remembers what it fetched — ``exact:{jobdir}/urlsieve.exact``
   when the ``exact`` backend is installed, else ``buckets:{jobdir}/urlsieve.buckets``
   (seed 001's table: exact, 16 bytes per URL plus 16 MB at the start).
3. Otherwise ``memory:`` (forgotten at the end of the crawl, like Scrapy's own).

The duplicate filter keys a GET request on its URL, so that every spelling
of one URL (case, ``/./``, ``%61``, a fragment, with the crawler profile
parameter order and ``utm_*``) is fetched once. Other methods, and requests
with a body, are keyed on the URL plus the method and a hash of the body
(as extra query parameters), so two different POSTs to one URL are two
requests. A URL urlsieve cannot canonicalise (``data:``, ``about:``) is
never filtered.

The middleware checks each request against a rule set before it is
downloaded and drops blocked ones (``IgnoreRequest``, counted in the stats as
``urlsieve/blocked`` and ``urlsieve/blocked/<category>``)::

    DOWNLOADER_MIDDLEWARES = {"urlsieve.integrations.scrapy.UrlsieveFilterMiddleware": 50}
    URLSIEVE_RULES = "/etc/urlsieve/rules.snap"   # a compiled snapshot, or list files/trees
    URLSIEVE_ALLOW_LISTS = []                     # allow lists (with list files only)
    URLSIEVE_DROP_INVALID = False                 # drop URLs urlsieve cannot canonicalise

With a gateway configuration file (``URLSIEVE_CONFIG``), the middleware enforces what the
Squid helper and the service enforce for it (:mod:`urlsieve.config` builds all three):
its policy when it has one, else its rules (snapshot or lists, the selected categories,
the learned overlay beside them); its relative paths are relative to the file.

With a policy (``URLSIEVE_POLICY``: a gateway TOML file with ``[[acl]]`` tables, or
``URLSIEVE_SQUIDGUARD_CONF``: a squidGuard.conf), each request is decided by the policy:
who asks is the request's ``meta["urlsieve_user"]``, else the spider's ``urlsieve_user``
attribute, else the spider's name (as the user; write ``user = ["my_spider"]`` in a
source), with the time rules on the clock. A request a rewrite changes is replaced by
the rewritten one; blocked ones count as ``urlsieve/blocked/<category>`` and
``urlsieve/policy/<source>/<acl>/<action>``.

**Writing.** A request is answered at once (a new URL is remembered in the process at
once), but new URLs go to a persistent store ``URLSIEVE_BATCH`` at a time, in one
batch write (``memory:`` is written at once). Stores that several crawler processes
share while they run see each other's URLs a batch late: set ``URLSIEVE_BATCH = 1`` for
them (each new URL one ``add``, which takes no file lock: about as fast, see
``benchmarks/RESULTS.md``). The file stores are memory-mapped, so
a crawler that is killed loses none of what was written, only its batch in the making
(those pages may be fetched again on resume); ``flush()`` (an ``fsync``) guards against
the machine going down, and runs every ``URLSIEVE_FLUSH_SECONDS`` as a batch is
written, every ``URLSIEVE_FLUSH_EVERY`` new requests when set, and at the end of the
crawl. Scrapy's own ``RFPDupeFilter`` writes its ``requests.seen`` through a buffer
and never syncs it.

The fingerprinter gives Scrapy (its HTTP cache, its own filters) the same
notion of "same request": the 128-bit urlsieve fingerprint of the canonical
URL, mixed with the method and body for requests other than a plain GET.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Self

import numpy as np
import xxhash
from scrapy.dupefilters import BaseDupeFilter
from scrapy.utils.request import referer_str

from urlsieve.exceptions import ConfigError, InvalidURL
from urlsieve.fingerprint import (
    canonical_bytes,
    fingerprint128,
    fingerprint_one64,
    fingerprint_one128,
    key_function,
)
from urlsieve.seen.base import BACKENDS, SeenStore, open_seen
from urlsieve.seen.bloom import BloomStore
from urlsieve.seen.exact import ExactStore
from urlsieve.seen.memory import MemoryStore
from urlsieve.url import CRAWLER, Profile
from urlsieve.url.profile import PROFILES

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from scrapy.http import Request
    from scrapy.settings import BaseSettings
    from scrapy.spiders import Spider

    from urlsieve.filter import Filter
    from urlsieve.policy.engine import PolicyEngine

__all__ = ["UrlsieveDupeFilter", "UrlsieveFilterMiddleware", "UrlsieveFingerprinter", "store_spec"]

logger = logging.getLogger(__name__)


def _profile(settings: BaseSettings) -> Profile:
    name = settings.get("URLSIEVE_PROFILE", "crawler")
    try:
        return PROFILES[name]
    except KeyError:
        raise ConfigError(
            f"URLSIEVE_PROFILE={name!r} is not a profile (choose {', '.join(sorted(PROFILES))})"
        ) from None


def store_spec(settings: BaseSettings) -> str:
    """The seen-store spec the duplicate filter opens for these Scrapy settings."""
    jobdir = settings.get("JOBDIR")
    spec: str | None = settings.get("URLSIEVE_SEEN_STORE")
    if spec:
        if "{jobdir}" in spec:
            if not jobdir:
                raise ConfigError(
                    f"URLSIEVE_SEEN_STORE={spec!r} uses {{jobdir}} but JOBDIR is not set: "
                    "set JOBDIR or give a full path"
                )
            spec = spec.replace("{jobdir}", str(jobdir))
        return spec
    if jobdir:
        if "exact" in BACKENDS:
            return f"exact:{jobdir}/urlsieve.exact"
        return f"buckets:{jobdir}/urlsieve.buckets"
    return "memory:"


def _has_body_or_method(request: Request) -> bool:
    return request.method != "GET" or bool(request.body)


def _key(request: Request) -> str:
    """The URL the seen store keys a request on (see the module docstring)."""
    if not _has_body_or_method(request):
        return request.url
    body = xxhash.xxh3_64_hexdigest(request.body or b"")
    url = request.url.partition("#")[0]
    sep = "&" if "?" in url else "?"
    return f"{url}{sep}urlsieve-method={request.method}&urlsieve-body={body}"


class UrlsieveFingerprinter:
    """``REQUEST_FINGERPRINTER_CLASS``: urlsieve's 128-bit fingerprint of a request, as bytes."""

    def __init__(self, profile: Profile = CRAWLER) -> None:
        self.profile = profile

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        return cls(_profile(crawler.settings))

    def fingerprint(self, request: Request) -> bytes:
        try:
            if not _has_body_or_method(request):
                return fingerprint128(request.url, self.profile)
            canonical = canonical_bytes(request.url, self.profile)
        except InvalidURL:
            # Not a URL urlsieve canonicalises (data:, about:): hash it as it is.
            canonical = b"raw:" + request.url.encode("utf-8", "surrogateescape")
        return xxhash.xxh3_128_digest(
            request.method.encode("ascii") + b"\0" + canonical + b"\0" + (request.body or b"")
        )


class UrlsieveDupeFilter(BaseDupeFilter):
    """``DUPEFILTER_CLASS`` on any urlsieve seen store (see the module docstring)."""

    def __init__(
        self,
        store: SeenStore,
        *,
        debug: bool = False,
        flush_every: int = 0,
        crawler: Crawler | None = None,
        batch: int = 1000,
        flush_seconds: float = 5.0,
    ) -> None:
        self.store = store
        self.debug = debug
        self.flush_every = max(0, flush_every)
        self.flush_seconds = flush_seconds
        self.crawler = crawler
        # memory: has no lock or file to spare: written at once
        self.batch = 1 if isinstance(store, MemoryStore) else max(1, batch)
        self._since_flush = 0
        self._last_flush = time.monotonic()
        self._logged_once = False
        #: new URLs not written to the store yet, by their fingerprint: the store's own for
        #: exact: (64 bits) and bloom: (128), which take the batch as fingerprints
        self._pending: dict[Any, str] = {}
        bits = 128 if isinstance(store, BloomStore) else 64
        self._fingerprint: Callable[[str], Any] = (
            fingerprint_one128(store.profile) if bits == 128 else fingerprint_one64(store.profile)
        )
        self._key_of = key_function(store.profile, bits)
        self._held_fp: Callable[[Any], bool] | None = None
        self._add_fps: Callable[[Any], object] | None = None
        if isinstance(store, (ExactStore, BloomStore)):
            self._held_fp, self._add_fps = store.contains_fingerprint, store.add_fingerprints

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        settings = crawler.settings
        spec = store_spec(settings)
        store = open_seen(spec, profile=_profile(settings))
        logger.info("urlsieve duplicate filter on %s", spec)
        return cls(
            store,
            debug=settings.getbool("DUPEFILTER_DEBUG"),
            flush_every=settings.getint("URLSIEVE_FLUSH_EVERY", 0),
            crawler=crawler,
            batch=settings.getint("URLSIEVE_BATCH", 1000),
            flush_seconds=settings.getfloat("URLSIEVE_FLUSH_SECONDS", 5.0),
        )

    def _inc(self, key: str, count: int = 1) -> None:
        if self.crawler is not None and self.crawler.stats is not None:
            self.crawler.stats.inc_value(key, count)

    def request_seen(self, request: Request) -> bool:
        key = request.url if request.method == "GET" and not request.body else _key(request)
        try:
            if self.batch == 1:
                new = self.store.add(key)
            else:  # remembered here at once, written with its batch
                key_of = self._key_of  # the compiled key (None: off its path)
                fp = key_of(key) if key_of is not None else None
                if fp is None:
                    fp = self._fingerprint(key)
                pending = self._pending
                held = self._held_fp
                new = fp not in pending and not (key in self.store if held is None else held(fp))
                if new:
                    pending[fp] = key
        except InvalidURL:
            self._inc("urlsieve/uncanonical")
            return False
        if new:
            self._since_flush += 1
            if len(self._pending) >= self.batch or (
                self.flush_every and self._since_flush >= self.flush_every
            ):
                self._write()
        return not new

    def _write(self) -> None:
        """The pending URLs to the store in one batch; a flush when one is due."""
        self._write_pending()
        now = time.monotonic()
        if now - self._last_flush >= self.flush_seconds or (
            self.flush_every and self._since_flush >= self.flush_every
        ):
            self.store.flush()
            self._since_flush = 0
            self._last_flush = now

    def _write_pending(self) -> None:
        if not self._pending:
            return
        if self._add_fps is not None:  # the fingerprints made already: no second hash
            self._add_fps(np.array(list(self._pending), dtype=np.uint64))
        else:
            self.store.add_many(list(self._pending.values()))
        self._pending.clear()

    def close(self, reason: str) -> None:
        self._write_pending()
        self.store.flush()  # close() alone does not make the last adds durable
        stats = self.store.stats()
        if self.crawler is not None and self.crawler.stats is not None:
            self.crawler.stats.set_value("urlsieve/seen_count", stats.count)
            self.crawler.stats.set_value(
                "urlsieve/expected_false_positives", stats.expected_false_positives
            )
        logger.info(
            "urlsieve %s store: %d URLs, expected false positives %.2f",
            stats.backend,
            stats.count,
            stats.expected_false_positives,
        )
        self.store.close()

    def log(self, request: Request, spider: Spider) -> None:
        if self.debug:
            logger.debug(
                "Filtered duplicate request: %(request)s (referer: %(referer)s)",
                {"request": request, "referer": referer_str(request)},
                extra={"spider": spider},
            )
        elif not self._logged_once:
            logger.debug(
                "Filtered duplicate request: %(request)s - no more duplicates will be shown "
                "(see DUPEFILTER_DEBUG to show all duplicates)",
                {"request": request},
                extra={"spider": spider},
            )
            self._logged_once = True
        self._inc("dupefilter/filtered")

    def __repr__(self) -> str:
        return f"UrlsieveDupeFilter({self.store!r})"

    def stats(self) -> dict[str, Any]:
        """The store's statistics, as a dict."""
        return self.store.stats().as_dict()


class UrlsieveFilterMiddleware:
    """``DOWNLOADER_MIDDLEWARES`` entry: drop requests a urlsieve filter blocks."""

    def __init__(
        self,
        rules: Filter,
        *,
        crawler: Crawler | None = None,
        drop_invalid: bool = False,
        policy: PolicyEngine | None = None,
    ) -> None:
        self.rules = rules
        self.crawler = crawler
        self.drop_invalid = drop_invalid
        self.policy = policy

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        from scrapy.exceptions import NotConfigured

        from urlsieve.config import open_rules, read_config, rules_loader
        from urlsieve.policy.engine import PolicyEngine

        settings = crawler.settings
        drop_invalid = settings.getbool("URLSIEVE_DROP_INVALID")
        policy_file = settings.get("URLSIEVE_POLICY")
        config_file = settings.get("URLSIEVE_CONFIG") or policy_file
        squidguard = settings.get("URLSIEVE_SQUIDGUARD_CONF")
        if config_file or squidguard:
            # What the gateway enforces for this configuration (the assembly room decides):
            # its policy, else its rules with the learned overlay beside them.
            config = read_config(
                config_file, env={}, overrides={"squidguard_conf": squidguard}
            ).gateway
            if policy_file and config.policy is None and not config.squidguard_conf:
                raise ConfigError(f"URLSIEVE_POLICY={policy_file!r} has no [[acl]] tables")
            loaded = rules_loader(config, lambda message: logger.info("urlsieve: %s", message))()
            source = config_file or squidguard
            if isinstance(loaded, PolicyEngine):
                logger.info("urlsieve filter middleware: policy from %s", source)
                return cls(loaded.rules, crawler=crawler, drop_invalid=drop_invalid, policy=loaded)
            logger.info("urlsieve filter middleware: %d rules from %s", len(loaded), source)
            return cls(loaded, crawler=crawler, drop_invalid=drop_invalid)
        paths = settings.getlist("URLSIEVE_RULES")
        allow = settings.getlist("URLSIEVE_ALLOW_LISTS")
        if not paths:
            raise NotConfigured(
                "set URLSIEVE_RULES to a compiled snapshot or to list paths (or "
                "URLSIEVE_CONFIG to a gateway configuration file)"
            )
        rules = open_rules(paths, allow)
        for warning in rules.warnings[:20]:
            logger.warning("urlsieve: %s", warning)
        logger.info("urlsieve filter middleware: %d rules from %s", len(rules), ", ".join(paths))
        return cls(rules, crawler=crawler, drop_invalid=drop_invalid)

    def _inc(self, key: str) -> None:
        if self.crawler is not None and self.crawler.stats is not None:
            self.crawler.stats.inc_value(key)

    def process_request(self, request: Request, spider: Spider | None = None) -> Request | None:
        from scrapy.exceptions import IgnoreRequest

        if self.policy is not None:
            return self._by_policy(request, spider)
        try:
            verdict = self.rules.check(request.url)
        except InvalidURL as exc:
            if self.drop_invalid:
                self._inc("urlsieve/invalid")
                raise IgnoreRequest(f"urlsieve cannot check {request.url}: {exc.reason}") from None
            return None
        rule = verdict.rule
        if verdict.action != "block" or rule is None:
            return None
        self._inc("urlsieve/blocked")
        self._inc(f"urlsieve/blocked/{rule.category}")
        logger.debug("urlsieve blocked %s by %r (%s)", request.url, rule.pattern, rule.where)
        raise IgnoreRequest(f"blocked by {rule.pattern!r} ({rule.where}, {rule.category})")

    def _by_policy(self, request: Request, spider: Spider | None) -> Request | None:
        from scrapy.exceptions import IgnoreRequest

        from urlsieve.policy.engine import BLOCK, REWRITE, WARN, Who

        assert self.policy is not None
        if spider is None and self.crawler is not None:  # Scrapy 2.13 passes no spider
            spider = getattr(self.crawler, "spider", None)
        user = request.meta.get("urlsieve_user") or getattr(spider, "urlsieve_user", None)
        if user is None and spider is not None:
            user = spider.name
        decision = self.policy.decide_many([request.url], [Who(None, None, user)])[0]
        if isinstance(decision, InvalidURL):
            if self.drop_invalid:
                self._inc("urlsieve/invalid")
                raise IgnoreRequest(f"urlsieve cannot check {request.url}: {decision.reason}")
            return None
        self._inc(f"urlsieve/policy/{decision.source}/{decision.acl}/{decision.action}")
        if decision.action in (BLOCK, WARN):  # a crawler cannot click "continue"
            self._inc("urlsieve/blocked")
            self._inc(f"urlsieve/blocked/{decision.category or 'none'}")
            raise IgnoreRequest(
                f"blocked by {decision.category or 'the pass list'} "
                f"(source {decision.source}, acl {decision.acl})"
            )
        if decision.action == REWRITE and decision.target and decision.target != request.url:
            if request.meta.get("urlsieve_rewritten"):
                return None  # rewritten once already: never a loop
            self._inc("urlsieve/rewritten")
            rewritten: Request = request.replace(url=decision.target)
            rewritten.meta["urlsieve_rewritten"] = True
            return rewritten
        return None
