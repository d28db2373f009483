"""The queue of unknown URLs: the gateway offers what no rule decides, learners claim it.

One protocol, :class:`UnknownQueue`, three backends chosen by a spec (:func:`open_queue`):

- ``memory:`` — one process (tests, a single learner that need not survive a restart);
- ``sqlite:/var/lib/urlsieve/queue.db`` — the default: one machine, several processes
  (Squid's helper children offer while a learner claims), WAL mode, crash-safe
  (:mod:`urlsieve.learn.queue_sqlite`);
- ``valkey://host:6379/0?prefix=urlsieve:learn&group=learners`` — a fleet: several gateways
  feed several learners through Valkey Streams and a consumer group
  (:mod:`urlsieve.learn.queue_valkey`).

Common parameters: ``recheck`` (seconds; a URL done less than this long ago is not queued
again, default a day), ``max_attempts`` (tries before a URL is given up as failed, default 3)
and ``max_url`` (bytes; a longer URL is dropped and counted, default 8192).

Semantics every backend keeps (one contract test proves them):

- **Queued once.** A URL that is waiting or leased is not queued again: its request count
  rises, and its distinct-client count, kept as a bounded set of up to :data:`MAX_CLIENTS`
  8-byte client digests per URL (the count saturates there; ranking needs no more).
- **Priority** (:func:`band`): a URL's band is ``4 × (its host has no verdict yet) + level``
  where ``level`` is 3 for 8+ distinct clients, 2 for 3+, 1 for 2 clients or 4+ requests,
  else 0. A host has a verdict once one of its URLs is done (not failed). Claims hand out
  the highest band first. Inside a band the SQLite and memory backends order by requests
  (more first), then first sighting (older first); Valkey Streams are FIFO inside a band
  (a URL whose counts lift it into a higher band is re-added there).
- **Leases.** ``claim`` leases jobs to a consumer for ``lease`` seconds. A lease that runs
  out (the learner died) hands the job out again and counts as a failed attempt. ``done``
  completes a URL once per queueing: the first ``done`` for it wins, whichever learner
  holds the lease; a later ``done`` for the same URL (a learner whose lease was taken over
  and who finished anyway) completes nothing and is counted as *stale*. ``done`` returns how
  many it completed, so a learner can discard work on a URL someone else finished.
  ``retry`` is accepted only from the current lease holder; it puts the job back after
  ``delay`` seconds, and after ``max_attempts`` tries the URL is done as *failed*.
- **Burst counts.** ``admit(site, limit)`` counts one request of an unknown site for the
  gateway's burst cap (``learn.burst``) in the store every gateway process shares (SQLite:
  a ``bursts`` table made on first use; Valkey: one counter key per site with a TTL) and
  says whether the count is within ``limit``; a count older than ``window`` (a day)
  starts again.
- **Hostile URLs.** Any ``str`` is stored exactly (lone surrogates and control characters
  included, as UTF-8 with ``surrogatepass``); an empty URL, a non-string or one longer than
  ``max_url`` bytes is dropped and counted (``stats().dropped``): ``offer`` never raises for
  a bad URL, only for a queue it cannot write (:class:`~urlsieve.exceptions.QueueCorrupt`,
  :class:`~urlsieve.exceptions.QueueUnavailable` — also for a full disk: nothing is written,
  nothing queued before is lost, retry later).
"""

from __future__ import annotations

import hashlib
import math
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Protocol, Self, runtime_checkable

from urlsieve.exceptions import ConfigError, LearnError
from urlsieve.store.base import ClosingStore
from urlsieve.store.spec import Backend, Registry
from urlsieve.store.valkey import SERVER_SCHEMES

__all__ = [
    "BANDS",
    "BURST_WINDOW",
    "Batch",
    "ClosingQueue",
    "DEFAULT_MAX_ATTEMPTS",
    "DEFAULT_RECHECK",
    "Job",
    "MAX_CLIENTS",
    "MAX_SITE",
    "MAX_URL_BYTES",
    "MemoryQueue",
    "QUEUE_BACKENDS",
    "QueueBackend",
    "QueueStats",
    "Sighting",
    "UnknownQueue",
    "band",
    "check_claim",
    "check_options",
    "client_digest",
    "decode_url",
    "encode_url",
    "group",
    "host_of",
    "level",
    "open_queue",
    "register_queue_backend",
]

#: Priority bands, 0 (lowest) to 7 (highest): see :func:`band`.
BANDS = 8
#: Distinct clients remembered per URL (8-byte digests); the count saturates here.
MAX_CLIENTS = 32
#: Longest URL kept, in bytes of UTF-8 (``surrogatepass``); a longer one is dropped.
MAX_URL_BYTES = 8192
#: A URL done less than this many seconds ago is not queued again.
DEFAULT_RECHECK = 86_400.0
#: Tries (claims that ended in ``retry`` or a lost lease) before a URL is failed.
DEFAULT_MAX_ATTEMPTS = 3


@dataclass(frozen=True, slots=True)
class Sighting:
    """The gateway saw a request for an unknown URL (``at``: epoch seconds, None = now)."""

    url: str
    client: str | None = None
    at: float | None = None


@dataclass(frozen=True, slots=True)
class Job:
    """A queued URL leased to a learner; hand it back to ``done`` or ``retry``.

    ``key`` is the backend's handle (row and lease, or stream entry); ``first_seen`` is the
    first sighting (time to enforcement is measured from it); ``attempts`` the tries that
    failed before this one.
    """

    url: str
    key: str
    first_seen: float
    requests: int
    clients: int
    attempts: int


@dataclass(frozen=True, slots=True)
class QueueStats:
    """Counts of a queue. ``waiting`` includes retries whose delay has not run out.

    ``done``/``failed``/``stale``/``dropped``/``sightings``/``queued`` count since the queue
    was created (shared by every process using it): completed URLs, URLs given up after
    ``max_attempts``, ``done``/``retry`` calls that completed nothing (a lease taken over),
    URLs dropped as unusable, sightings offered, and URLs newly queued.
    """

    backend: str
    waiting: int
    leased: int
    done: int
    failed: int
    stale: int
    dropped: int
    sightings: int
    queued: int
    extra: Mapping[str, Any] = field(default_factory=dict)

    @property
    def depth(self) -> int:
        return self.waiting + self.leased

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            k: getattr(self, k) for k in self.__dataclass_fields__ if k != "extra"
        }
        out["depth"] = self.depth
        out.update(self.extra)
        return out


#: How long a site's burst count lasts (``admit``): a day, as the queue's ``recheck``.
BURST_WINDOW = 86_400.0
#: The longest site name counted (a longer one is counted under its first bytes).
MAX_SITE = 255


@runtime_checkable
class UnknownQueue(Protocol):
    """The queue of unknown URLs (see the module docstring for the semantics)."""

    def offer(self, sightings: Sequence[Sighting]) -> int:
        """Record sightings in one batch; how many URLs were newly queued."""
        ...

    def claim(self, consumer: str, count: int, *, lease: float = 60.0) -> list[Job]:
        """Lease up to ``count`` jobs to ``consumer``, highest priority first."""
        ...

    def done(self, jobs: Sequence[Job]) -> int:
        """Complete jobs; how many URLs this completed (the rest were stale)."""
        ...

    def retry(self, jobs: Sequence[Job], *, delay: float = 30.0) -> int:
        """Put leased jobs back after ``delay`` seconds (or fail them); how many were taken."""
        ...

    def depth(self) -> int:
        """URLs waiting or leased."""
        ...

    def admit(self, site: str, limit: int, window: float = BURST_WINDOW) -> bool:
        """Count one request of the unknown ``site`` (every process sharing the queue counts
        into one number); True while the count is at most ``limit``. A count older than
        ``window`` seconds starts again."""
        ...

    def stats(self) -> QueueStats: ...

    def close(self) -> None: ...

    def __enter__(self) -> Self: ...

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None: ...


# ---------------------------------------------------------------------- shared rules


def level(requests: int, clients: int) -> int:
    """Demand level 0–3: 3 for 8+ distinct clients, 2 for 3+, 1 for 2 (or 4+ requests)."""
    if clients >= 8:
        return 3
    if clients >= 3:
        return 2
    if clients >= 2 or requests >= 4:
        return 1
    return 0


def band(new_host: bool, requests: int, clients: int) -> int:
    """Priority band 0–7: a host with no verdict yet first, then demand (:func:`level`)."""
    return (4 if new_host else 0) + level(requests, clients)


def encode_url(url: object, max_bytes: int = MAX_URL_BYTES) -> bytes | None:
    """A URL as stored (UTF-8, lone surrogates kept), or None when it must be dropped."""
    if not isinstance(url, str) or not url or len(url) > max_bytes:
        return None
    raw = url.encode("utf-8", "surrogatepass")
    return raw if len(raw) <= max_bytes else None


def decode_url(raw: bytes) -> str:
    """The inverse of :func:`encode_url`."""
    return raw.decode("utf-8", "surrogatepass")


def client_digest(client: object) -> bytes | None:
    """8 bytes naming a client (its address or user), or None for an unknown client."""
    if not isinstance(client, str) or not client:
        return None
    return hashlib.blake2b(client.encode("utf-8", "surrogatepass"), digest_size=8).digest()


def host_of(url: bytes) -> bytes:
    """The lower-cased host of a stored URL (no user, no port), ``b""`` when it has none.

    Linear and total: any bytes give an answer (hostile URLs reach here unchecked).
    """
    start = url.find(b"://")
    if start < 0:
        return b""
    rest = url[start + 3 :]
    end = len(rest)
    for stop in (b"/", b"?", b"#"):
        at = rest.find(stop, 0, end)
        if at >= 0:
            end = at
    authority = rest[:end]
    authority = authority[authority.rfind(b"@") + 1 :]
    if authority.startswith(b"["):
        close = authority.find(b"]")
        host = authority[: close + 1] if close >= 0 else authority
    else:
        host = authority.rsplit(b":", 1)[0] if b":" in authority else authority
    return host.lower()


@dataclass(slots=True)
class Batch:
    """Sightings of one ``offer`` call grouped by URL (backends store each URL once)."""

    urls: dict[bytes, _Seen]
    dropped: int
    sightings: int


@dataclass(slots=True)
class _Seen:
    requests: int
    first: float
    clients: list[bytes]


def group(sightings: Sequence[Sighting], now: float, max_url: int) -> Batch:
    """Validate and group a batch: per stored URL its requests, first time, client digests."""
    out: dict[bytes, _Seen] = {}
    dropped = 0
    for s in sightings:
        raw = encode_url(getattr(s, "url", None), max_url)
        if raw is None:
            dropped += 1
            continue
        at = getattr(s, "at", None)
        when = float(at) if isinstance(at, (int, float)) and math.isfinite(at) else now
        digest = client_digest(getattr(s, "client", None))
        seen = out.get(raw)
        if seen is None:
            out[raw] = _Seen(1, when, [] if digest is None else [digest])
            continue
        seen.requests += 1
        seen.first = min(seen.first, when)
        if digest is not None and digest not in seen.clients and len(seen.clients) < MAX_CLIENTS:
            seen.clients.append(digest)
    return Batch(out, dropped, len(sightings))


def check_claim(consumer: str, lease: float) -> None:
    if not isinstance(consumer, str) or not consumer:
        raise ConfigError(f"claim: consumer must be a non-empty name, not {consumer!r}")
    if not lease > 0:
        raise ConfigError(f"claim: lease={lease!r} must be > 0 seconds")


def check_options(recheck: float, max_attempts: int, max_url: int) -> None:
    if not recheck >= 0:
        raise ConfigError(f"recheck={recheck!r}: must be >= 0 seconds")
    if max_attempts < 1:
        raise ConfigError(f"max_attempts={max_attempts!r}: must be >= 1")
    if not 16 <= max_url <= 1 << 20:
        raise ConfigError(f"max_url={max_url!r}: must be between 16 and 1048576 bytes")


#: Base of the backends: a queue is a context manager, leaving the block closes it.
ClosingQueue = ClosingStore


# ---------------------------------------------------------------------- memory backend

_WAITING, _LEASED, _DONE, _FAILED = 0, 1, 2, 3


@dataclass(slots=True)
class _Entry:
    url: str
    host: bytes
    gen: int
    state: int = _WAITING
    first: float = 0.0
    requests: int = 0
    clients: set[bytes] = field(default_factory=set)
    attempts: int = 0
    ready: float = 0.0
    until: float = 0.0  # lease end (leased), completion time (done, failed)
    lease: int = 0
    seq: int = 0


class MemoryQueue(ClosingQueue):
    """``memory:`` — the reference backend: exact, one process, gone when it ends."""

    def __init__(
        self,
        location: str = "",
        *,
        recheck: float = DEFAULT_RECHECK,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
        max_url: int = MAX_URL_BYTES,
        clock: Callable[[], float] = time.time,
    ) -> None:
        check_options(recheck, max_attempts, max_url)
        self.recheck = recheck
        self.max_attempts = max_attempts
        self.max_url = max_url
        self._clock = clock
        self._lock = threading.Lock()
        self._entries: dict[bytes, _Entry] = {}
        self._judged: set[bytes] = set()
        self._counts = dict.fromkeys(
            ("done", "failed", "stale", "dropped", "sightings", "queued"), 0
        )
        self._seq = 0
        self._closed = False
        self._bursts: dict[str, tuple[int, float]] = {}

    def _open(self) -> dict[bytes, _Entry]:
        if self._closed:
            raise LearnError("memory queue: closed (its URLs are gone); open a new one")
        return self._entries

    def offer(self, sightings: Sequence[Sighting]) -> int:
        now = self._clock()
        batch = group(sightings, now, self.max_url)
        queued = 0
        with self._lock:
            entries = self._open()
            for raw, seen in batch.urls.items():
                entry = entries.get(raw)
                if entry is not None and entry.state in (_WAITING, _LEASED):
                    entry.requests += seen.requests
                    entry.first = min(entry.first, seen.first)
                    for digest in seen.clients:
                        if len(entry.clients) >= MAX_CLIENTS:
                            break
                        entry.clients.add(digest)
                    continue
                if entry is not None and now - entry.until < self.recheck:
                    continue  # done (or failed) recently: not queued again yet
                self._seq += 1
                entries[raw] = _Entry(
                    url=decode_url(raw),
                    host=host_of(raw),
                    # unique for the queue's life: an entry purged and queued again
                    # must not take a generation an old job still carries
                    gen=self._seq,
                    first=seen.first,
                    requests=seen.requests,
                    clients=set(seen.clients),
                    ready=now,
                    seq=self._seq,
                )
                queued += 1
            self._counts["dropped"] += batch.dropped
            self._counts["sightings"] += batch.sightings
            self._counts["queued"] += queued
        return queued

    def admit(self, site: str, limit: int, window: float = BURST_WINDOW) -> bool:
        now = self._clock()
        key = str(site)[:MAX_SITE]
        with self._lock:
            self._open()
            count, since = self._bursts.get(key, (0, now))
            if now - since >= window:
                count, since = 0, now
            if count >= limit:
                return False
            self._bursts[key] = (count + 1, since)
            return True

    def _rank(self, e: _Entry) -> tuple[int, int, float, int]:
        b = band(e.host not in self._judged, e.requests, len(e.clients))
        return (-b, -e.requests, e.first, e.seq)

    def claim(self, consumer: str, count: int, *, lease: float = 60.0) -> list[Job]:
        check_claim(consumer, lease)
        if count <= 0:
            return []
        now = self._clock()
        with self._lock:
            entries = self._open()
            for e in entries.values():  # leases that ran out: a failed attempt each
                if e.state == _LEASED and e.until <= now:
                    e.attempts += 1
                    if e.attempts >= self.max_attempts:
                        e.state, e.until = _FAILED, now
                        self._counts["failed"] += 1
                    else:
                        e.state, e.ready = _WAITING, now
            ready = [e for e in entries.values() if e.state == _WAITING and e.ready <= now]
            ready.sort(key=self._rank)
            jobs = []
            for e in ready[:count]:
                e.state, e.until, e.lease = _LEASED, now + lease, e.lease + 1
                jobs.append(
                    Job(
                        url=e.url,
                        key=f"{e.gen}:{e.lease}",
                        first_seen=e.first,
                        requests=e.requests,
                        clients=len(e.clients),
                        attempts=e.attempts,
                    )
                )
            return jobs

    def _find(self, job: Job) -> tuple[_Entry | None, int, int]:
        raw = encode_url(job.url, self.max_url)
        gen, _, lease = str(job.key).partition(":")
        entry = None if raw is None else self._entries.get(raw)
        try:
            return entry, int(gen), int(lease)
        except ValueError:
            return None, 0, 0

    def done(self, jobs: Sequence[Job]) -> int:
        now = self._clock()
        completed = 0
        with self._lock:
            self._open()
            for job in jobs:
                entry, gen, _ = self._find(job)
                if entry is None or entry.gen != gen or entry.state not in (_WAITING, _LEASED):
                    self._counts["stale"] += 1
                    continue
                entry.state, entry.until = _DONE, now
                entry.clients = set()
                self._judged.add(entry.host)
                completed += 1
            self._counts["done"] += completed
            if completed:
                self._purge(now)
        return completed

    def _purge(self, now: float) -> None:
        old = [
            raw
            for raw, e in self._entries.items()
            if e.state >= _DONE and now - e.until >= self.recheck
        ]
        for raw in old:
            del self._entries[raw]

    def retry(self, jobs: Sequence[Job], *, delay: float = 30.0) -> int:
        now = self._clock()
        taken = 0
        with self._lock:
            self._open()
            for job in jobs:
                entry, gen, lease = self._find(job)
                if entry is None or entry.gen != gen or entry.state != _LEASED:
                    self._counts["stale"] += 1
                    continue
                if entry.lease != lease:
                    self._counts["stale"] += 1
                    continue
                entry.attempts += 1
                taken += 1
                if entry.attempts >= self.max_attempts:
                    entry.state, entry.until = _FAILED, now
                    self._counts["failed"] += 1
                else:
                    entry.state, entry.ready = _WAITING, now + max(0.0, delay)
        return taken

    def depth(self) -> int:
        with self._lock:
            return sum(1 for e in self._open().values() if e.state <= _LEASED)

    def stats(self) -> QueueStats:
        with self._lock:
            entries = self._open()
            waiting = sum(1 for e in entries.values() if e.state == _WAITING)
            leased = sum(1 for e in entries.values() if e.state == _LEASED)
            c = self._counts
            return QueueStats(
                backend="memory",
                waiting=waiting,
                leased=leased,
                done=c["done"],
                failed=c["failed"],
                stale=c["stale"],
                dropped=c["dropped"],
                sightings=c["sightings"],
                queued=c["queued"],
            )

    def close(self) -> None:
        self._closed = True
        self._entries = {}


# ---------------------------------------------------------------------- registry


_COMMON: dict[str, type] = {"recheck": float, "max_attempts": int, "max_url": int}
_SQLITE = {**_COMMON, "busy_timeout": float, "synchronous": str, "max_bytes": int}
_VALKEY = {**_COMMON, "prefix": str, "group": str, "timeout": float, "db": int}

#: A queue backend: ``module:function`` (imported when used) and its parameters; the
#: opener is called as ``opener(location, **typed_params, clock=...)``.
QueueBackend = Backend

#: Queue backends by spec prefix; add one with :func:`register_queue_backend`.
QUEUE_BACKENDS: Registry[UnknownQueue] = Registry(
    "queue spec",
    {
        "memory": Backend("urlsieve.learn.queue:MemoryQueue", _COMMON),
        "sqlite": Backend("urlsieve.learn.queue_sqlite:SqliteQueue", _SQLITE),
        **{
            scheme: Backend(f"urlsieve.learn.queue_valkey:open_{scheme}", _VALKEY, "valkey")
            for scheme in SERVER_SCHEMES
        },
    },
)


def register_queue_backend(name: str, backend: Backend) -> None:
    """Make ``name:`` specs open ``backend`` (third-party backends too)."""
    QUEUE_BACKENDS.register(name, backend)


def open_queue(spec: str, **overrides: Any) -> UnknownQueue:
    """Open the queue a spec describes: ``memory:``, ``sqlite:PATH?…``, ``valkey://…?…``.

    Keyword ``overrides`` win over spec parameters (``clock=`` too: a callable giving epoch
    seconds, for tests).
    """
    return QUEUE_BACKENDS.open(spec, **overrides)
