"""The gateway's one hook for learning: URLs no rule decides go to a sink, off the request path.

The Squid helper and the service call :meth:`UnknownFeed.add` for every *unknown* URL
(no base rule and no learned rule decides it). ``add`` never blocks and never raises:
it puts the URL in a bounded buffer, and a background thread hands the buffer to the
sink (the learner's queue, wired by the command line, so the gateway never imports
:mod:`urlsieve.learn`). A sink that fails (a queue server down) is retried with the
buffer kept; what does not fit in the buffer is dropped and counted, never waited for.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from urlsieve.url import parse_url
from urlsieve.url.expressions import learning_domain

__all__ = [
    "DEFAULT_BURST",
    "PENDING_ANSWERS",
    "PENDING_CATEGORY",
    "UNKNOWN_CATEGORY",
    "BurstGate",
    "SightingRow",
    "UnknownFeed",
    "UnknownStats",
    "site_of",
]

#: The category a blocked unknown URL is reported under (``learn.unknown = "block"``).
UNKNOWN_CATEGORY = "unclassified"
#: The category of the pending answer (``learn.pending = "check"``): the site is checked.
PENDING_CATEGORY = "pending"
#: Requests of one unknown site that pass with ``allow-first`` (``learn.burst``).
DEFAULT_BURST = 3
#: What a request of an unknown site gets once its burst is spent (``learn.pending``):
#: a "checking this site" page that reloads itself, a block, or a pass (no cap).
PENDING_ANSWERS = ("check", "block", "pass")

#: ``(url, client, seen_at)``: one request for an unknown URL.
SightingRow = tuple[str, str | None, float]


@dataclass
class UnknownStats:
    """Every sighting (``seen``) ends in exactly one of ``delivered``, ``merged``,
    ``dropped`` and ``unsent``; ``sink_errors`` counts failed sink calls, not sightings."""

    seen: int = 0  # add() calls
    delivered: int = 0  # sightings the sink took
    merged: int = 0  # sightings of a URL and client already in the buffer (one entry)
    dropped: int = 0  # sightings not kept: the buffer was full, or the URL too long
    unsent: int = 0  # sightings still in the buffer when the feed was closed
    sink_errors: int = 0  # sink calls that raised (the buffer was kept and retried)

    @property
    def buffered(self) -> int:
        """Sightings in the buffer or with the sink now (what no other bucket holds)."""
        return self.seen - self.delivered - self.merged - self.dropped - self.unsent


class UnknownFeed:
    """A bounded buffer of unknown-URL sightings drained into ``sink`` by a daemon thread.

    Sightings of one URL by one client within a flush are merged (the first time kept), so
    a page's burst of requests costs one entry. ``capacity`` bounds the distinct
    ``(url, client)`` pairs held; beyond it sightings are dropped and counted.
    """

    def __init__(
        self,
        sink: Callable[[Sequence[SightingRow]], object],
        *,
        capacity: int = 10_000,
        flush_seconds: float = 0.05,
        retry_seconds: float = 1.0,
        max_url: int = 8192,
        log: Callable[[str], None] = lambda _msg: None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._sink = sink
        self._capacity = capacity
        self._flush_seconds = flush_seconds
        self._retry_seconds = retry_seconds
        self._max_url = max_url
        self._log = log
        self._clock = clock
        self._lock = threading.Lock()
        self._pending: dict[tuple[str, str | None], float] = {}
        self._wake = threading.Event()
        self._stopping = False
        self._busy = False  # a batch is with the sink
        self.stats = UnknownStats()
        self._thread = threading.Thread(target=self._run, name="urlsieve-unknown", daemon=True)
        self._thread.start()

    def add(self, url: str, client: str | None = None) -> None:
        """Note one request for an unknown URL; never blocks, never raises."""
        try:
            stats = self.stats
            stats.seen += 1
            if len(url) > self._max_url:
                stats.dropped += 1
                return
            key = (url, client)
            with self._lock:
                pending = self._pending
                if key in pending:
                    stats.merged += 1
                    return
                if len(pending) >= self._capacity:
                    stats.dropped += 1
                    return
                pending[key] = self._clock()
            self._wake.set()
        except Exception:  # the request path must not fail for learning
            self.stats.dropped += 1

    @property
    def pending(self) -> int:
        return len(self._pending)

    def flush(self, timeout: float = 5.0) -> bool:
        """Wait until the buffer is handed to the sink (True) or ``timeout`` passes."""
        deadline = time.monotonic() + timeout
        self._wake.set()
        while (self._pending or self._busy) and time.monotonic() < deadline:
            self._wake.set()
            time.sleep(0.01)
        return not (self._pending or self._busy)

    def close(self, timeout: float = 5.0) -> None:
        """Deliver what is buffered (within ``timeout``), then stop the thread; what is
        left in the buffer is counted ``unsent``."""
        self.flush(timeout)
        self._stopping = True
        self._wake.set()
        self._thread.join(timeout)
        if not self._thread.is_alive():
            with self._lock:
                left, self._pending = len(self._pending), {}
            self.stats.unsent += left

    def _take(self) -> list[SightingRow]:
        with self._lock:
            pending, self._pending = self._pending, {}
        return [(url, client, at) for (url, client), at in pending.items()]

    def _give_back(self, batch: list[SightingRow]) -> None:
        with self._lock:
            pending = self._pending
            for url, client, at in batch:
                key = (url, client)
                if key in pending:  # seen again while with the sink: one entry again
                    pending[key] = min(at, pending[key])
                    self.stats.merged += 1
                elif len(pending) < self._capacity:
                    pending[key] = at
                else:
                    self.stats.dropped += 1

    def _run(self) -> None:
        failing = False
        while not self._stopping:
            self._wake.wait()
            self._wake.clear()
            if self._flush_seconds and not self._stopping:
                time.sleep(self._flush_seconds)  # let a burst gather into one sink call
            self._busy = True
            batch = self._take()
            if not batch:
                self._busy = False
                continue
            try:
                self._sink(batch)
            except Exception as exc:  # the queue is down: keep the batch, retry later
                self.stats.sink_errors += 1
                self._give_back(batch)
                self._busy = False
                if not failing:
                    self._log(f"learning queue failed, retrying: {type(exc).__name__}: {exc}")
                failing = True
                if not self._stopping:
                    time.sleep(self._retry_seconds)
                self._wake.set()
                continue
            if failing:
                self._log("learning queue reachable again")
                failing = False
            self.stats.delivered += len(batch)
            self._busy = False


def site_of(url: str) -> str | None:
    """The site a URL belongs to for the burst cap (its registrable domain:
    :func:`~urlsieve.url.expressions.learning_domain`); None when it has no host (never
    raises: the caller is on the request path)."""
    try:
        host = parse_url(url).host
        return learning_domain(host) if host else None
    except Exception:  # InvalidURL, or anything a hostile name trips: no site
        return None


class BurstGate:
    """At most ``limit`` requests of one unknown site pass (``learn.burst``).

    ``admit(site, limit)`` counts a request in the store every gateway process shares
    (the learner's queue: :meth:`urlsieve.learn.queue.UnknownQueue.admit`) and says
    whether it is within the limit, so Squid's helper children together let ``limit``
    requests through, not ``limit`` each. A site found over its limit is remembered for
    ``remember`` seconds, so its later requests cost no store round trip. When the store
    cannot be reached, requests are counted in this process (the cap then holds per
    process) and the failure is logged once.
    """

    def __init__(
        self,
        admit: Callable[[str, int], bool],
        limit: int = DEFAULT_BURST,
        *,
        remember: float = 60.0,
        capacity: int = 100_000,
        log: Callable[[str], None] = lambda _msg: None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._admit = admit
        self.limit = limit
        self._remember = remember
        self._capacity = capacity
        self._log = log
        self._clock = clock
        self._spent: dict[str, float] = {}  # site → when it was found over its limit
        self._local: dict[str, int] = {}  # counts while the store is unreachable
        self._failing = False
        site_of("http://warm.example/")  # reads the suffix list now, not at a request

    def allow(self, site: str) -> bool:
        """Count one request of ``site``; True when it may pass. Never raises."""
        now = self._clock()
        spent = self._spent.get(site)
        if spent is not None and now - spent < self._remember:
            return False
        try:
            passed = bool(self._admit(site, self.limit))
            if self._failing:
                self._failing = False
                self._log("burst counts: the queue's store is reachable again")
        except Exception as exc:  # the store is down: count here, never fail the request
            if not self._failing:
                self._failing = True
                self._log(
                    f"burst counts: the queue's store failed ({type(exc).__name__}: {exc}); "
                    "counting in this process until it is back"
                )
            if len(self._local) >= self._capacity:
                self._local.clear()
            count = self._local[site] = self._local.get(site, 0) + 1
            passed = count <= self.limit
        if not passed:
            if len(self._spent) >= self._capacity:
                self._spent.clear()
            self._spent[site] = now
        return passed
