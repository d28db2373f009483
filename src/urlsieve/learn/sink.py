"""The gateway's ``on_unknown`` sink: sightings of unknown URLs, canonicalised, into the queue.

The command line builds it (``squid-helper`` and ``serve`` with ``learn.queue`` set) and
hands it to :class:`urlsieve.gateway.unknown.UnknownFeed`, which calls it off the request
path; the gateway itself never imports this package.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from urlsieve.exceptions import InvalidURL
from urlsieve.learn.queue import Sighting, UnknownQueue, open_queue
from urlsieve.url import CRAWLER, canonicalize

__all__ = ["queue_sink"]

#: What the feed hands over: ``(url, client, seen_at)``.
Seen = tuple[str, str | None, float]


def queue_sink(queue: UnknownQueue | str) -> Callable[[Sequence[Seen]], int]:
    """A sink offering sightings to ``queue`` (a queue, or its spec, opened now so a bad
    spec fails at start-up). URLs are queued in canonical form, so every spelling of one
    page is one job; a URL that cannot be canonicalised is not queued (the filter has
    already answered it by its failure mode)."""
    opened = open_queue(queue) if isinstance(queue, str) else queue

    def sink(batch: Sequence[Seen]) -> int:
        sightings = []
        for url, client, at in batch:
            try:
                canonical = canonicalize(url, profile=CRAWLER)
            except InvalidURL:
                continue
            if canonical.startswith(("http://", "https://")):
                sightings.append(Sighting(canonical, client, at))
        return opened.offer(sightings) if sightings else 0

    return sink
