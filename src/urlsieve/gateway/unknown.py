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

__all__ = ["UNKNOWN_CATEGORY", "Sighting", "UnknownFeed", "UnknownStats"]

#: The category a blocked unknown URL is reported under (``learn.unknown = "block"``).
UNKNOWN_CATEGORY = "unclassified"

#: ``(url, client, seen_at)``: one request for an unknown URL.
Sighting = tuple[str, str | None, float]


@dataclass
class UnknownStats:
    seen: int = 0  # add() calls
    delivered: int = 0  # sightings the sink took
    dropped: int = 0  # sightings not kept: the buffer was full
    sink_errors: int = 0  # sink calls that raised (the buffer was kept and retried)


class UnknownFeed:
    """A bounded buffer of unknown-URL sightings drained into ``sink`` by a daemon thread.

    Sightings of one URL by one client within a flush are merged (the first time kept), so
    a page's burst of requests costs one entry. ``capacity`` bounds the distinct
    ``(url, client)`` pairs held; beyond it sightings are dropped and counted.
    """

    def __init__(
        self,
        sink: Callable[[Sequence[Sighting]], object],
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
                if key not in pending:
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
        """Deliver what is buffered (within ``timeout``), then stop the thread."""
        self.flush(timeout)
        self._stopping = True
        self._wake.set()
        self._thread.join(timeout)

    def _take(self) -> list[Sighting]:
        with self._lock:
            pending, self._pending = self._pending, {}
        return [(url, client, at) for (url, client), at in pending.items()]

    def _give_back(self, batch: list[Sighting]) -> None:
        with self._lock:
            pending = self._pending
            for url, client, at in batch:
                key = (url, client)
                if key in pending or len(pending) < self._capacity:
                    pending[key] = min(at, pending.get(key, at))
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
