"""The learner: queue → crawler → WARC spool → classifier → verdicts → overlay snapshot.

Two loops, as seed 001 decouples them, which can run in one process (``urlsieve learn
run``) or in separate ones (``--crawl-only`` / ``--classify-only``) sharing the spool
directory:

* the **crawl loop** claims unknown URLs from the queue, fetches them (robots, SSRF
  guard, every redirect hop checked against the gateway's rules) and appends each page
  to the spool (fsynced), the job's key with it;
* the **classify loop** reads closed spool segments, classifies every page, stores the
  verdicts, finishes the pages' jobs in the queue, and rebuilds the overlay snapshot the
  gateway swaps in.

A job stays leased until its verdict is stored: a learner that dies anywhere between the
claim and the verdict loses nothing, since the queue hands the job to another learner
when the lease runs out (a verdict stored twice is the same row).

A redirect to a blocked URL is a verdict of its own (``redirect``): the start URL is
blocked with the hop's category, without a page to classify.

A URL the crawler cannot read is a verdict too, so that hiding from the crawler never
keeps a site reachable (issue 30): category ``unclassifiable``, action
``unclassifiable`` (``learn.unclassifiable``: ``block`` by default, or ``allow``; a policy
may warn on the category), the fetch's outcome and reason as its note. It is given when a
fetch ends in robots.txt (a disallow, a robots.txt that answers 5xx/429, redirects to a
refused address, cannot be fetched), an HTTP error, a body that is not HTML or text, too
many redirects, a time-out or a network error, or a refusal at a redirect hop; it is
stored as soon as the fetch ends (within ``learn.crawl.timeout``, 10 s by default, of the
claim). A time-out or a network error is tried again as well (``retry_seconds`` later,
until the queue's attempts run out): a page read then replaces the verdict. A URL whose own
address the guard refuses (an intranet name, ``learn.crawl.allow_networks``) gets none: it
is the administrator's, not the site's, choice.

A URL whose answer is a **subresource** (a 2xx answer of an image, media, font, style sheet
or script type: :data:`~urlsieve.learn.crawl.SUBRESOURCE_TYPES`) is not unclassifiable: it
gets a ``resource`` verdict whose enforced action follows its site's pages, rendered at
every overlay build (:func:`~urlsieve.learn.overlay.render_resource`). When the site has
no page verdict yet, the learner queues its host's root page (``scheme://host/``), once
per learner process, so that the site gets judged by its pages.

The crawler honours robots.txt (``learn.crawl.robots``, on by default): it does not read
what a site asks robots not to read — and the site's URL is then unclassifiable, blocked
by default, never "allowed for ever".

**Cloaking** (issue 30, item 5). The crawler fetches as a browser does (a browser's
User-Agent, Accept and Accept-Language: ``learn.crawl.user_agent``, ``accept``,
``accept_language``). A page that classifies clean is fetched once more under a second
identity (``learn.crawl.check_user_agent``, the crawler saying what it is; ``""`` turns the
check off), and classified again: where the two disagree the worse verdict wins (the
dirty page is the one kept and spooled) and the disagreement is in the verdict's note,
which ``learn show`` prints. Only clean pages are fetched twice, since a second look can
only make a verdict worse: the cost is one more request and one more classification per
clean page (and none per dirty page). A second fetch that ends without a page (many
sites refuse bots) changes nothing: that is not evidence of a dirty page. The check needs
the classifier in the crawling process: a ``--crawl-only`` learner takes no second look.

**Long pages** (issue 30, item 7). A page longer than ``learn.crawl.max_bytes`` is read
on, up to ``learn.crawl.scan_bytes`` (32 MB by default), and classified as it is read
(:class:`~urlsieve.learn.classify.PageScan`, memory bounded by a segment of 1 MiB and the
first ``max_bytes`` kept as the page); its verdict is stored at once, the page is not
spooled. Past ``scan_bytes`` — or when the crawler has no classifier (``--crawl-only``),
so only the first ``max_bytes`` reach the classifier — a page is blocked when what was
read is dirty, and otherwise gets an ``unclassifiable`` verdict with reason
``too-large``: a clean verdict is never given on a sample that padding can fill.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import os
import socket
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from urlsieve.exceptions import InvalidURL, LearnError, QueueUnavailable, SpoolCorrupt
from urlsieve.learn.classify import Classification, Classifier
from urlsieve.learn.crawl import Crawler, CrawlSettings, Fetched
from urlsieve.learn.overlay import CLEAN_CATEGORY, RESOURCE, UNCLASSIFIABLE, build_overlay
from urlsieve.learn.page import Page
from urlsieve.learn.queue import Job, Sighting, UnknownQueue
from urlsieve.learn.spool import Spool, claim_next
from urlsieve.learn.verdicts import Learned, Verdicts, rule_key
from urlsieve.url import parse_url
from urlsieve.url.expressions import learning_domain

__all__ = [
    "LATENCY_BUCKETS",
    "UNCLASSIFIABLE",
    "UNCLASSIFIABLE_OUTCOMES",
    "LearnStats",
    "Learner",
    "category_of",
    "learned_from",
    "redirect_verdict",
    "resource_verdict",
    "root_of",
    "too_large_verdicts",
    "unclassifiable_verdict",
]

#: Seconds: the buckets of the first-sighting-to-enforcement histogram.
LATENCY_BUCKETS = (0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 300.0, 3600.0)

#: Outcomes tried again later (with an ``unclassifiable`` verdict meanwhile).
_RETRY = ("timeout", "error")
#: Outcomes that give the URL an ``unclassifiable`` verdict (a "refused" too when the
#: site chose the refused target: a redirect hop or robots.txt).
UNCLASSIFIABLE_OUTCOMES = (
    "robots",
    "not-html",
    "http-error",
    "too-many-redirects",
    "timeout",
    "error",
)

HopCheck = Callable[[str], "tuple[str, str] | None"]


@dataclass
class LearnStats:
    """What one learner did (``urlsieve learn stats`` and the metrics file)."""

    claimed: int = 0
    outcomes: Counter[str] = field(default_factory=Counter)
    classified: Counter[str] = field(default_factory=Counter)  # category or "clean"
    queue_errors: int = 0
    spool_errors: int = 0
    stale: int = 0  # pages whose job another learner had finished first
    #: URLs not fetched because the guard refused their address or port, by the setting
    #: that would allow them (``learn.crawl.allow_networks``, ``learn.crawl.ports``).
    refused: Counter[str] = field(default_factory=Counter)
    second_looks: int = 0  # clean pages fetched again as the second identity
    cloaked: int = 0  # ... that were dirty that way (cloaking)
    overlay_builds: int = 0
    overlay_seconds: float = 0.0
    latency_buckets: list[int] = field(default_factory=lambda: [0] * len(LATENCY_BUCKETS))
    latency_count: int = 0
    latency_sum: float = 0.0
    latencies: list[float] = field(default_factory=list)  # the last 10,000

    def observe(self, seconds: float) -> None:
        self.latency_count += 1
        self.latency_sum += seconds
        for at, bound in enumerate(LATENCY_BUCKETS):
            if seconds <= bound:
                self.latency_buckets[at] += 1
        self.latencies.append(seconds)
        del self.latencies[:-10_000]

    def prometheus(self, depth: int | None, dropped: int | None = None) -> str:
        """The counters in Prometheus' text format (written for the textfile collector)."""
        out = [
            "# TYPE urlsieve_learn_claimed_total counter",
            f"urlsieve_learn_claimed_total {self.claimed}",
            "# TYPE urlsieve_learn_fetch_total counter",
        ]
        out += [
            f'urlsieve_learn_fetch_total{{outcome="{k}"}} {v}' for k, v in self.outcomes.items()
        ]
        out.append("# TYPE urlsieve_learn_classified_total counter")
        out += [
            f'urlsieve_learn_classified_total{{category="{_label(k)}"}} {v}'
            for k, v in self.classified.items()
        ]
        out += [
            "# TYPE urlsieve_learn_queue_errors_total counter",
            f"urlsieve_learn_queue_errors_total {self.queue_errors}",
            "# TYPE urlsieve_learn_refused_total counter",
            *(
                f'urlsieve_learn_refused_total{{setting="{_label(k)}"}} {v}'
                for k, v in self.refused.items()
            ),
            "# TYPE urlsieve_learn_second_looks_total counter",
            f"urlsieve_learn_second_looks_total {self.second_looks}",
            "# TYPE urlsieve_learn_cloaked_total counter",
            f"urlsieve_learn_cloaked_total {self.cloaked}",
            "# TYPE urlsieve_learn_overlay_builds_total counter",
            f"urlsieve_learn_overlay_builds_total {self.overlay_builds}",
        ]
        if depth is not None:
            out += [
                "# TYPE urlsieve_learn_queue_depth gauge",
                f"urlsieve_learn_queue_depth {depth}",
            ]
        out.append("# TYPE urlsieve_learn_enforcement_seconds histogram")
        for bound, count in zip(LATENCY_BUCKETS, self.latency_buckets, strict=True):
            out.append(f'urlsieve_learn_enforcement_seconds_bucket{{le="{bound:g}"}} {count}')
        out += [
            f'urlsieve_learn_enforcement_seconds_bucket{{le="+Inf"}} {self.latency_count}',
            f"urlsieve_learn_enforcement_seconds_sum {self.latency_sum:.6f}",
            f"urlsieve_learn_enforcement_seconds_count {self.latency_count}",
        ]
        return "\n".join(out) + "\n"


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", " ")


def category_of(result: Classification) -> str:
    """The category a classified page is learned under: its blocking category, or the
    learned allow list's."""
    if result.blocked:
        return result.category or "learned"
    return CLEAN_CATEGORY


def learned_from(page: Page, result: Classification, now: float) -> list[Learned]:
    """The verdicts one classified page gives: its start URL, and for a blocked page
    reached through redirects the final URL too."""
    digest = hashlib.sha256(page.body).hexdigest()
    evidence = tuple((h.phrase, h.weight, h.count) for h in result.evidence[:10])
    note = f"{result.reason}; {page.note}" if page.note else result.reason
    blocked = result.blocked
    category = category_of(result)
    urls = [page.url]
    if blocked and page.final_url != page.url:
        urls.append(page.final_url)
    out = []
    for url in urls:
        try:
            key, host = rule_key(url)
        except InvalidURL:
            continue
        out.append(
            Learned(
                key=key,
                host=host,
                action="block" if blocked else "allow",
                category=category,
                source="learned",
                score=result.score,
                evidence=evidence,
                url=page.url,
                final_url=page.final_url,
                content_hash=digest,
                fetched_at=page.fetched_at,
                first_seen=page.queued_at,
                decided_at=now,
                note=note[:1000],
            )
        )
    return out


def too_large_verdicts(
    page: Page, result: Classification, now: float, action: str = "block"
) -> list[Learned]:
    """The verdicts on a page only part of which was classified (longer than the crawler's
    ``scan_bytes``, or than ``max_bytes`` without a scan): what was read decides when it
    is dirty; a clean part gives ``unclassifiable`` (``too-large``), never a clean verdict
    — padding could fill any sample."""
    if result.blocked:
        return learned_from(page, result, now)
    out = []
    for verdict in learned_from(page, result, now):
        out.append(
            dataclasses.replace(
                verdict,
                action=action,
                category=UNCLASSIFIABLE,
                note=(
                    f"unclassifiable (too-large): only the first {result.chars} characters "
                    f"were classified ({result.reason}); a longer page is not learned clean"
                    + (f"; {page.note}" if page.note else "")
                )[:1000],
            )
        )
    return out


def _setting_of(reason: str) -> str:
    """The setting a refusal's reason names (the one that would allow the fetch)."""
    for setting in ("learn.crawl.ports", "learn.crawl.allow_networks"):
        if setting in reason:
            return setting
    return "other"


def _job_of(page: Page) -> Job:
    """The queue job a spooled page answers (what :meth:`UnknownQueue.done` needs)."""
    assert page.job is not None
    return Job(page.url, page.job, page.queued_at or 0.0, 0, 0, 0)


def _job_verdict(
    job: Job, now: float, *, action: str, category: str, source: str, note: str
) -> Learned | None:
    """A verdict on the URL of ``job`` without a page (None for a URL without a host)."""
    try:
        key, host = rule_key(job.url)
    except InvalidURL:
        return None
    return Learned(
        key=key,
        host=host,
        action=action,
        category=category,
        source=source,
        url=job.url,
        first_seen=job.first_seen,
        decided_at=now,
        note=note[:1000],
    )


def redirect_verdict(job: Job, fetched: Fetched, now: float) -> Learned | None:
    """The block a redirect to a blocked URL gives its start URL."""
    if fetched.blocked is None:
        return None
    category, where = fetched.blocked
    note = f"{fetched.reason} (rule {where})"
    return _job_verdict(job, now, action="block", category=category, source="redirect", note=note)


def resource_verdict(job: Job, fetched: Fetched, now: float) -> Learned | None:
    """The verdict on a subresource (outcome ``resource``): stored as an allow of category
    :data:`~urlsieve.learn.overlay.RESOURCE`; every overlay build renders it as its site's
    (see :func:`~urlsieve.learn.overlay.render_resource`)."""
    if fetched.outcome != "resource":
        return None
    return _job_verdict(
        job, now, action="allow", category=RESOURCE, source="learned", note=fetched.reason
    )


def root_of(url: str) -> str | None:
    """The root page (``scheme://host[:port]/``) of ``url``'s host, or None."""
    try:
        parsed = parse_url(url)
    except InvalidURL:
        return None
    if parsed.scheme not in ("http", "https"):
        return None
    default = 443 if parsed.scheme == "https" else 80
    port = f":{parsed.port}" if parsed.port not in (None, default) else ""
    host = f"[{parsed.host}]" if ":" in parsed.host else parsed.host
    return f"{parsed.scheme}://{host}{port}/"


def unclassifiable_verdict(
    job: Job, fetched: Fetched, now: float, action: str = "block"
) -> Learned | None:
    """The verdict on a URL the crawler could not read (see the module docstring), or None
    when the fetch says nothing about the site (a page, a redirect verdict, a refusal of
    the URL's own address)."""
    if fetched.outcome not in UNCLASSIFIABLE_OUTCOMES and not (
        fetched.outcome == "refused" and fetched.by_site
    ):
        return None
    note = f"unclassifiable ({fetched.outcome}): {fetched.reason}"
    return _job_verdict(
        job, now, action=action, category=UNCLASSIFIABLE, source="learned", note=note
    )


class Learner:
    """One learner process's loops (see the module docstring)."""

    def __init__(
        self,
        *,
        queue: UnknownQueue,
        store: Verdicts,
        classifier: Classifier | None,
        spool_dir: Path,
        tree: Path,
        overlay: Path,
        crawl: CrawlSettings | None = None,
        check_hop: HopCheck | None = None,
        batch: int = 32,
        lease: float = 120.0,
        promote_after: int = 3,
        unclassifiable: str = "block",
        segment_bytes: int = 64 << 20,
        segment_seconds: float = 0.1,
        spool_max_bytes: int = 1 << 30,
        consumer: str | None = None,
        poll_seconds: float = 0.05,
        retry_seconds: float = 30.0,
        metrics_file: Path | None = None,
        progress: Callable[[LearnStats, int | None], None] | None = None,
        log: Callable[[str], None] = lambda _msg: None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.queue = queue
        self.store = store
        self.classifier = classifier
        self.spool_dir = spool_dir
        self.tree = tree
        self.overlay = overlay
        self.crawl_settings = crawl or CrawlSettings()
        self.check_hop = check_hop
        self.batch = batch
        self.lease = lease
        self.promote_after = promote_after
        if unclassifiable not in ("block", "allow"):
            raise LearnError(f"unclassifiable must be 'block' or 'allow', not {unclassifiable!r}")
        self.unclassifiable = unclassifiable
        self.segment_bytes = segment_bytes
        self.segment_seconds = segment_seconds
        self.spool_max_bytes = spool_max_bytes
        self.consumer = consumer or f"{socket.gethostname()}-{os.getpid()}"
        self.poll_seconds = poll_seconds
        self.retry_seconds = retry_seconds
        self.metrics_file = metrics_file
        self.progress = progress
        self.log = log
        self.clock = clock
        self.stats = LearnStats()
        self._dirty = False  # verdicts stored since the last overlay build
        self._built_version: int | None = None  # the store's version the overlay shows
        self._spool: Spool | None = None
        self._crawling = 0  # jobs being fetched
        #: Sites whose root page this learner queued for a resource (once per site).
        self._rooted: set[str] = set()

    # -- the crawl loop ----------------------------------------------------------------

    async def crawl(self, stop: asyncio.Event, *, until_idle: bool = False) -> None:
        """Claim, fetch and spool until ``stop`` is set (or, ``until_idle``, until the queue
        has nothing left to hand out and nothing is in flight)."""
        spool = self._spool = Spool(
            self.spool_dir,
            segment_bytes=self.segment_bytes,
            max_bytes=self.spool_max_bytes,
            segment_seconds=self.segment_seconds,
        )
        inflight: set[asyncio.Task[tuple[Job, Fetched | Exception]]] = set()
        backoff = self.poll_seconds
        try:
            scanner = None if self.classifier is None else self.classifier.scan
            async with Crawler(
                self.crawl_settings, check_hop=self.check_hop, scanner=scanner
            ) as crawler:
                while not stop.is_set():
                    jobs: list[Job] = []
                    room = self.batch - len(inflight)
                    if room > 0:
                        try:
                            jobs = await asyncio.to_thread(
                                self.queue.claim, self.consumer, room, lease=self.lease
                            )
                            backoff = self.poll_seconds
                        except QueueUnavailable as exc:
                            self.stats.queue_errors += 1
                            self.log(f"queue unavailable, retrying in {backoff:.1f} s: {exc}")
                            await asyncio.sleep(backoff)
                            backoff = min(backoff * 2, 10.0)
                            continue
                    self.stats.claimed += len(jobs)
                    inflight.update(asyncio.create_task(self._fetch(crawler, j)) for j in jobs)
                    # A segment old enough is closed: the classifier sees its pages now.
                    await asyncio.to_thread(spool.rotate_if_due)
                    if inflight:
                        finished, inflight = await asyncio.wait(
                            inflight, timeout=self.poll_seconds, return_when="FIRST_COMPLETED"
                        )
                        if finished:
                            results = [task.result() for task in finished]
                            await asyncio.to_thread(self._finish, spool, results)
                    elif until_idle and not jobs:
                        break
                    elif not jobs:
                        await asyncio.sleep(self.poll_seconds)
                if inflight:
                    results = list(await asyncio.gather(*inflight))
                    await asyncio.to_thread(self._finish, spool, results)
        finally:
            await asyncio.to_thread(spool.close)
            self._spool = None

    async def _fetch(self, crawler: Crawler, job: Job) -> tuple[Job, Fetched | Exception]:
        try:
            fetched = await crawler.fetch(job.url, queued_at=job.first_seen)
            if fetched.page is not None and self.classifier is not None:
                fetched = await self._second_look(crawler, job, fetched)
            return job, fetched
        except Exception as exc:  # the crawler never raises for the network; a bug might
            return job, exc

    def _judge(self, fetched: Fetched) -> Classification:
        assert self.classifier is not None and fetched.page is not None
        if fetched.scan is not None:
            return fetched.scan
        return self.classifier.classify_page(fetched.page)

    async def _second_look(self, crawler: Crawler, job: Job, first: Fetched) -> Fetched:
        """Cloaking: a clean page is fetched again as ``check_user_agent``; the worse of the
        two is kept, the disagreement noted on its page (see the module docstring)."""
        other = self.crawl_settings.check_user_agent
        if not other:
            return first
        seen = await asyncio.to_thread(self._judge, first)
        if seen.blocked or seen.truncated:  # dirty, or unclassifiable (too-large) anyway
            return first
        second = await crawler.fetch(job.url, queued_at=job.first_seen, user_agent=other)
        self.stats.second_looks += 1
        if second.page is None:
            return first
        judged = await asyncio.to_thread(self._judge, second)
        if not judged.blocked:
            return first
        self.stats.cloaked += 1
        note = (
            f"cloaking: as a browser ({self.crawl_settings.user_agent[:40]}...) the page was "
            f"clean ({seen.reason}), as {other[:80]!r} it was blocked ({judged.reason}); "
            "the worse verdict is kept"
        )
        self.log(f"{job.url[:200]!r}: {note}")
        assert second.page is not None
        return dataclasses.replace(second, page=dataclasses.replace(second.page, note=note))

    def _finish(self, spool: Spool, results: list[tuple[Job, Fetched | Exception]]) -> None:
        """Hand the fetched pages of a batch to the spool with one fsync, then tell the
        queue: a job is done only once its page is on disk (or it has a verdict, or an
        outcome that gives none); a failed fetch is retried later."""
        pages, kept, verdicts, retry = [], [], [], []
        now = self.clock()
        for job, fetched in results:
            if isinstance(fetched, Exception):
                self.stats.outcomes["error"] += 1
                self.log(f"fetching {job.url[:200]!r} failed: {fetched!r}")
                retry.append(job)
                continue
            self.stats.outcomes[fetched.outcome] += 1
            if fetched.outcome == "page" and fetched.page is not None and fetched.scan is not None:
                # A long page, classified as it was read: its verdict now, no spooling.
                page, scan = fetched.page, fetched.scan
                self.stats.classified[category_of(scan)] += 1
                if scan.truncated:
                    verdicts += too_large_verdicts(page, scan, now, self.unclassifiable)
                else:
                    verdicts += learned_from(page, scan, now)
                kept.append(job)
            elif fetched.outcome == "page" and fetched.page is not None:
                # Done by the classifier, once the verdict is stored (the job stays leased).
                pages.append(dataclasses.replace(fetched.page, job=job.key))
            elif fetched.outcome == "resource":
                verdict = resource_verdict(job, fetched, now)
                if verdict is not None:
                    verdicts.append(verdict)
                kept.append(job)
            elif fetched.outcome == "redirect-blocked":
                verdict = redirect_verdict(job, fetched, now)
                if verdict is not None:
                    verdicts.append(verdict)
                kept.append(job)
            else:
                verdict = unclassifiable_verdict(job, fetched, now, self.unclassifiable)
                if verdict is not None:
                    verdicts.append(verdict)
                if fetched.outcome in _RETRY:
                    retry.append(job)
                else:
                    if fetched.outcome == "refused":  # the reason names the setting to change
                        self.stats.refused[_setting_of(fetched.reason)] += 1
                        self.log(f"not fetched {job.url[:200]!r}: {fetched.reason}")
                    kept.append(job)
        try:
            spool.extend(pages)
            if verdicts:
                self.store.put(verdicts)
                self._dirty = True
        except Exception as exc:  # the spool is full, the verdicts cannot be written
            self.stats.spool_errors += 1
            self.log(f"cannot keep {len(pages)} pages, they will be fetched again: {exc!r}")
            by_key = {job.key: job for job, _ in results}
            retry += [by_key[p.job] for p in pages if p.job in by_key]
            retry += kept
            kept = []
        try:
            if kept:
                self._queue_roots([v for v in verdicts if v.category == RESOURCE], now)
                self.queue.done(kept)
            if retry:
                self.queue.retry(retry, delay=self.retry_seconds)
        except QueueUnavailable as exc:  # the leases run out: another learner takes the jobs
            self.stats.queue_errors += 1
            self.log(f"queue unavailable while finishing {len(results)} jobs: {exc}")

    def _queue_roots(self, resources: list[Learned], now: float) -> None:
        """Queue the root page of each resource's host whose site has no page verdict (none
        on the site's pages in the store), once per site per learner process: the site is
        then judged by its pages, and its resources follow."""
        todo: dict[str, str] = {}
        for verdict in resources:
            site = learning_domain(verdict.host)
            root = root_of(verdict.url)
            if site in self._rooted or site in todo or root is None:
                continue
            todo[site] = root
        if not todo:
            return
        try:
            judged = {
                learning_domain(v.host)
                for v in self.store.all()
                if not v.is_host and v.category not in (RESOURCE, UNCLASSIFIABLE)
            }
            sightings = [Sighting(r, None, now) for site, r in todo.items() if site not in judged]
            if sightings:
                self.queue.offer(sightings)
        except LearnError as exc:  # the next resource of the site asks again
            self.stats.queue_errors += 1
            self.log(f"cannot queue the root pages of {len(todo)} sites: {exc}")
            return
        if len(self._rooted) > 100_000:  # bounded: a site may then be queued once more
            self._rooted.clear()
        self._rooted.update(todo)
        if sightings:
            self.log(f"queued {len(sightings)} root pages for resources of unjudged sites")

    # -- the classify loop -------------------------------------------------------------

    def classify_ready(self) -> int:
        """Classify every closed spool segment, store the verdicts and rebuild the overlay
        (also when a redirect verdict came in). Returns the pages classified."""
        if self.classifier is None:
            raise LearnError("no classifier: learn.phrases (or lexicons) are not set")
        pages = 0
        verdicts: list[Learned] = []
        while (claim := claim_next(self.spool_dir)) is not None:
            with claim:  # leaving without done() gives the segment back
                found: list[Learned] = []
                page_jobs: list[Job] = []
                try:
                    for page in claim.pages():
                        pages += 1
                        found += self._classify(page)
                        if page.job is not None:
                            page_jobs.append(_job_of(page))
                except SpoolCorrupt as exc:
                    self.stats.spool_errors += 1
                    aside = claim.path.with_name(claim.path.name + ".corrupt")
                    claim.path.rename(aside)
                    self.log(
                        f"{exc}; the pages before the damage were classified, the segment "
                        f"is kept as {aside.name} for inspection"
                    )
                if found:
                    self.store.put(found)  # stored before the segment is deleted
                    verdicts += found
                    self._dirty = True
                self._finish_jobs(page_jobs)
                claim.done()
        version = self._store_version()
        if self._dirty or version != self._built_version:
            self._dirty = False
            self._built_version = version  # before the build: a write during it rebuilds
            self.rebuild()
            now = self.clock()
            for verdict in verdicts:
                if verdict.first_seen is not None and verdict.key == rule_key(verdict.url)[0]:
                    self.stats.observe(max(0.0, now - verdict.first_seen))
        if pages or verdicts:
            self.write_metrics()
        return pages

    def _store_version(self) -> int | None:
        """The verdict store's version (another learner of a fleet, or an override, changes
        it); None when the store does not answer (the next round asks again)."""
        try:
            return self.store.version()
        except LearnError as exc:
            self.log(f"verdict store unavailable: {exc}")
            return self._built_version

    def _finish_jobs(self, jobs: list[Job]) -> None:
        """Tell the queue the pages' jobs are done (their verdicts are stored). A job another
        learner finished first counts as stale; a queue that does not answer leaves the
        jobs leased: they run out and are fetched again (nothing is lost)."""
        if not jobs:
            return
        try:
            finished = self.queue.done(jobs)
        except LearnError as exc:
            self.stats.queue_errors += 1
            self.log(f"queue unavailable, {len(jobs)} jobs will be fetched again: {exc}")
            return
        self.stats.stale += len(jobs) - finished

    def _classify(self, page: Page) -> list[Learned]:
        assert self.classifier is not None
        result = self.classifier.classify_page(page)
        self.stats.classified[category_of(result)] += 1
        if page.truncated or result.truncated:  # only part of the page was read
            return too_large_verdicts(page, result, self.clock(), self.unclassifiable)
        return learned_from(page, result, self.clock())

    def rebuild(self) -> None:
        """Render the learned lists and swap in a new overlay snapshot."""
        built = build_overlay(self.store, self.tree, self.overlay, promote_after=self.promote_after)
        self.stats.overlay_builds += 1
        self.stats.overlay_seconds += built.seconds
        self.log(
            f"overlay rebuilt: {built.rules} rules ({built.promoted} promoted sites) "
            f"in {built.seconds * 1000:.1f} ms"
        )

    async def classify(self, stop: asyncio.Event, *, until: asyncio.Event | None = None) -> None:
        """Classify closed segments as they come until ``stop`` is set, or until ``until``
        is set and nothing is left to classify."""
        while not stop.is_set():
            finished = until is not None and until.is_set()
            pages = await asyncio.to_thread(self.classify_ready)
            if not pages:
                if finished:
                    break
                await asyncio.sleep(self.poll_seconds)

    async def _tick(self) -> None:
        """Every second: the metrics file, and ``progress`` (a terminal's status line)."""
        while True:
            await asyncio.sleep(1.0)
            await asyncio.to_thread(self.write_metrics)
            if self.progress is not None:
                try:
                    depth = await asyncio.to_thread(self.queue.depth)
                except LearnError:
                    depth = None
                self.progress(self.stats, depth)

    def write_metrics(self) -> None:
        if self.metrics_file is None:
            return
        depth: int | None = None
        dropped: int | None = None
        try:
            queued = self.queue.stats()
            depth, dropped = queued.depth, queued.dropped
        except LearnError:
            pass  # the metrics without the queue's figures
        tmp = self.metrics_file.with_suffix(".tmp")
        try:
            tmp.write_text(self.stats.prometheus(depth, dropped), encoding="utf-8")
            os.replace(tmp, self.metrics_file)
        except OSError as exc:
            self.log(f"cannot write the metrics file {self.metrics_file}: {exc}")

    # -- both ----------------------------------------------------------------------------

    async def run(
        self,
        stop: asyncio.Event | None = None,
        *,
        crawl: bool = True,
        classify: bool = True,
        until_idle: bool = False,
    ) -> LearnStats:
        """Run the loops until ``stop`` is set (``until_idle``: until the queue and the spool
        are empty)."""
        stop = stop or asyncio.Event()
        crawled = asyncio.Event()

        async def crawl_then_say() -> None:
            try:
                await self.crawl(stop, until_idle=until_idle)
            finally:
                crawled.set()

        tasks = [asyncio.create_task(self._tick())]
        if crawl:
            tasks.append(asyncio.create_task(crawl_then_say()))
        else:
            crawled.set()
        if classify:
            until = crawled if until_idle else None
            tasks.append(asyncio.create_task(self.classify(stop, until=until)))
        try:
            await asyncio.gather(*tasks[1:])
        finally:
            for task in tasks:
                task.cancel()
        self.write_metrics()
        return self.stats
