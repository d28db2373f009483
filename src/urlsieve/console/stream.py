"""The decision stream: every helper process and the service append what they decided to
one JSON-lines file; the console tails it.

Why a file: the Squid helpers are separate processes started by Squid (as its user), one
per child, with no server of their own; a file opened with ``O_APPEND`` takes each
process's lines whole (one ``write`` per batch, and the kernel serialises appends to a
regular file), needs no daemon, and survives the console being down. Each process writes
from a thread fed by a bounded queue: the request path only appends to the queue (a full
queue drops and counts), so a slow disk never slows an answer. The writer flushes as soon
as it has lines, so a decision is on disk within milliseconds; the console polls the file
every :data:`POLL_SECONDS` (the lag, helper to console, is measured by
``benchmarks/console.py``). Rotate it with logrotate's ``copytruncate``: the reader notices
the file shrinking (or being replaced) and starts again from its beginning.

One line, one decision::

    {"t": 1767225600.123, "pid": 4242, "origin": "helper", "url": "http://x.test/",
     "client": "10.0.0.5", "user": null, "group": null, "action": "block",
     "category": "adult", "rule": "lists/adult/domains:12"}

``action`` is ``allow``, ``block``, ``warn``, ``unknown`` (no rule decided: learning) or
``error`` (the helper could not read the line). ``group`` is the policy's source (who
the client is) when a policy decides.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "ACTIONS",
    "DecisionWriter",
    "HelperTap",
    "LiveDecisions",
    "StreamReader",
    "event",
]

#: The actions a line may hold.
ACTIONS = ("allow", "block", "warn", "unknown", "error")
#: Lines waiting to be written, per process, at most (more are dropped and counted).
QUEUE_SIZE = 65536
#: How often a writer appends what was decided meanwhile.
FLUSH_SECONDS = 0.05
#: How often the console reads the file for new lines.
POLL_SECONDS = 0.1
#: The longest line the reader keeps (a longer one is skipped: not ours, or damaged).
MAX_LINE = 16 << 10
#: Characters of a URL kept in a line.
MAX_URL = 2048


def event(
    url: str,
    action: str,
    *,
    origin: str,
    client: str | None = None,
    user: str | None = None,
    group: str | None = None,
    category: str | None = None,
    rule: str | None = None,
    when: float | None = None,
) -> dict[str, Any]:
    """One decision, as a line holds it."""
    return {
        "t": time.time() if when is None else when,
        "pid": os.getpid(),
        "origin": origin,
        "url": url[:MAX_URL],
        "client": client,
        "user": user,
        "group": group,
        "action": action,
        "category": category,
        "rule": rule,
    }


@dataclass
class WriterStats:
    written: int = 0
    dropped: int = 0
    errors: int = 0
    last_error: str | None = None


class DecisionWriter:
    """Appends decisions to the stream file from a thread (see the module)."""

    def __init__(
        self,
        path: str,
        *,
        queue_size: int = QUEUE_SIZE,
        log: Callable[[str], None] = lambda _msg: None,
        expand: Callable[[Any], Iterable[dict[str, Any]]] | None = None,
    ) -> None:
        """``expand``: turns a queued item into its events in the writer thread (the
        helper queues raw lines and replies, read off the request path); None: items are
        events already."""
        self.path = path
        self.stats = WriterStats()
        self._log = log
        self._expand = expand
        # A deque, not a queue.Queue: an append takes no lock and wakes nobody; the writer
        # drains it every FLUSH_SECONDS (a wake-up per decision would cost the answering
        # thread more than the write itself).
        self._queue: deque[Any] = deque()
        self._size = queue_size
        self._closing = threading.Event()
        self._fd: int | None = None
        self._thread = threading.Thread(target=self._run, name="urlsieve-decisions", daemon=True)
        self._thread.start()

    def record(self, item: Any) -> None:
        """Queue one event (or one item for ``expand``); never blocks, never raises."""
        if len(self._queue) >= self._size:
            self.stats.dropped += 1
        else:
            self._queue.append(item)

    def close(self, timeout: float = 5.0) -> None:
        """Write what is queued, then stop the thread and close the file."""
        self._closing.set()
        self._thread.join(timeout)
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = None

    def _run(self) -> None:
        pending = self._queue
        while True:
            done = self._closing.wait(FLUSH_SECONDS)
            while pending:
                items: list[Any] = []
                with contextlib.suppress(IndexError):
                    while len(items) < 4096:
                        items.append(pending.popleft())
                try:
                    self._write(items)
                except Exception as exc:  # never let the thread die: count and go on
                    self._failed(f"{type(exc).__name__}: {exc}")
            if done:
                return

    def _write(self, items: list[Any]) -> None:
        events: list[dict[str, Any]] = []
        for item in items:
            events.extend(self._expand(item) if self._expand is not None else [item])
        if not events:
            return
        data = "".join(json.dumps(e, separators=(",", ":")) + "\n" for e in events).encode(
            "utf-8", "backslashreplace"
        )
        try:
            if self._fd is None:
                self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            # One write: O_APPEND keeps the lines of concurrent processes whole.
            os.write(self._fd, data)
        except OSError as exc:
            if self._fd is not None:
                with contextlib.suppress(OSError):
                    os.close(self._fd)
                self._fd = None
            self._failed(f"{self.path}: {exc.strerror or exc}", len(events))
            return
        self.stats.written += len(events)

    def _failed(self, why: str, lost: int = 1) -> None:
        self.stats.errors += lost
        if why != self.stats.last_error:
            self._log(f"decision stream: {why} (lines are dropped until it works again)")
        self.stats.last_error = why


# -- the helper's tap: raw lines and replies, read in the writer thread -------------------


def _reply_action(reply: bytes, channels: bool) -> tuple[str, bytes]:
    """The answer's word (``OK``, ``ERR``, ``BH``) and the rest of a reply line."""
    parts = reply.split(b" ", 2 if channels else 1)
    if channels and len(parts) > 1 and parts[0].isdigit():
        parts = parts[1:]
    word = parts[0] if parts else b""
    return word.decode("ascii", "replace"), (parts[1] if len(parts) > 1 else b"")


class HelperTap:
    """What a Squid helper answered, for the stream: the helper hands each batch of
    request lines and its reply bytes to :meth:`observe` (one queue append); the writer
    thread parses them and asks the rules for the category and rule of each block (the
    reply itself carries only the block page)."""

    def __init__(
        self,
        path: str,
        check: Callable[[str], tuple[str | None, str | None]],
        *,
        parse: Callable[[bytes], tuple[str, str | None, str | None]],
        log: Callable[[str], None] = lambda _msg: None,
    ) -> None:
        """``check(url)`` → (category, ``file:line``); ``parse(line)`` → (URL, client,
        user), raising ValueError for a line that is no request."""
        self._check = check
        self._parse = parse
        self.writer = DecisionWriter(path, log=log, expand=self._events)

    def observe(self, lines: Sequence[bytes], replies: bytes) -> None:
        self.writer.record((time.time(), list(lines), replies))

    def close(self) -> None:
        self.writer.close()

    def _events(self, item: tuple[float, list[bytes], bytes]) -> list[dict[str, Any]]:
        when, lines, replies = item
        out = []
        answers = replies.split(b"\n")
        for line, reply in zip(lines, answers, strict=False):
            if not isinstance(line, bytes):
                continue  # a line cut at the size cap: not a request
            channels = line[:1].isdigit() and b" " in line
            word, _rest = _reply_action(reply, channels)
            try:
                url, client, user = self._parse(line.rstrip(b"\r"))
            except Exception:  # not a request line: what the helper answered is all we know
                out.append(event("-", "error", origin="helper", when=when))
                continue
            if word == "BH":
                out.append(event(url, "error", origin="helper", client=client, when=when))
                continue
            category = rule = None
            action = "block" if word == "OK" else "allow"
            try:
                category, rule = self._check(url)
            except Exception:  # not a URL, or no rules: the failure mode answered
                out.append(event(url, "error", origin="helper", client=client, when=when))
                continue
            if category is None and rule is None:
                action = "unknown"  # no rule decided: learning (or blocked until it has)
            elif action == "allow":
                category = None
            out.append(
                event(
                    url,
                    action,
                    origin="helper",
                    client=client,
                    user=user,
                    category=category,
                    rule=rule,
                    when=when,
                )
            )
        return out


# -- the console's side: tail the file, keep the recent past ----------------------------


class StreamReader:
    """Reads the lines appended to the stream file since the last call."""

    def __init__(self, path: str, *, skip_pid: int | None = None) -> None:
        """``skip_pid``: lines this process wrote are skipped (the service hands its own
        decisions to the console directly, without the JSON round trip)."""
        self.path = path
        self._skip = b'"pid":%d,' % skip_pid if skip_pid is not None else None
        self._offset = 0
        self._inode: tuple[int, int] | None = None
        self._partial = b""
        self.bad_lines = 0

    def start_at_end(self) -> None:
        """Skip what the file holds now (the console starts with what comes next)."""
        with contextlib.suppress(OSError):
            st = os.stat(self.path)
            self._offset, self._inode = st.st_size, (st.st_dev, st.st_ino)

    def poll(self, limit: int = 8 << 20) -> list[dict[str, Any]]:
        try:
            st = os.stat(self.path)
        except OSError:
            return []
        inode = (st.st_dev, st.st_ino)
        if inode != self._inode or st.st_size < self._offset:  # replaced or truncated
            self._inode, self._offset, self._partial = inode, 0, b""
        if st.st_size == self._offset:
            return []
        try:
            with open(self.path, "rb") as fh:
                fh.seek(self._offset)
                data = fh.read(limit)
        except OSError:
            return []
        self._offset += len(data)
        data = self._partial + data
        cut = data.rfind(b"\n") + 1
        self._partial = data[cut:]
        if len(self._partial) > MAX_LINE:
            self._partial, self.bad_lines = b"", self.bad_lines + 1
        out = []
        skip = self._skip
        for raw in data[:cut].split(b"\n"):
            if not raw or (skip is not None and skip in raw):
                continue
            parsed = _event_of(raw)
            if parsed is None:
                self.bad_lines += 1
            else:
                out.append(parsed)
        return out


def _event_of(raw: bytes) -> dict[str, Any] | None:
    """A line's event with every field of the right type, or None."""
    if len(raw) > MAX_LINE:
        return None
    try:
        data = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(data, dict):
        return None
    when = data.get("t")
    if not isinstance(when, int | float) or isinstance(when, bool) or math.isnan(when):
        return None
    if data.get("action") not in ACTIONS or not isinstance(data.get("url"), str):
        return None
    out: dict[str, Any] = {"t": float(when), "action": data["action"]}
    out["url"] = _text(data["url"][:MAX_URL])
    for name in ("origin", "client", "user", "group", "category", "rule"):
        value = data.get(name)
        out[name] = _text(value[:256]) if isinstance(value, str) else None
    pid = data.get("pid")
    out["pid"] = pid if isinstance(pid, int) and not isinstance(pid, bool) else None
    return out


def _text(value: str) -> str:
    """``value`` as text a page can hold: a lone surrogate (from a ``\\udcXX`` escape)
    becomes U+FFFD."""
    return value.encode("utf-8", "surrogatepass").decode("utf-8", "replace")


@dataclass
class Bucket:
    """One minute of decisions."""

    requests: int = 0
    blocked: int = 0
    unknown: int = 0
    categories: Counter[str] = field(default_factory=Counter)


class LiveDecisions:
    """The recent decisions (a ring) and a per-minute tally of the last day."""

    def __init__(self, keep: int = 20_000, minutes: int = 24 * 60) -> None:
        self.recent: deque[dict[str, Any]] = deque(maxlen=keep)
        self.minutes: dict[int, Bucket] = {}
        self._span = minutes
        self.seq = 0
        self.lag: deque[float] = deque(maxlen=10_000)  # seconds, decision to console
        self._purged = 0
        self._lock = threading.Lock()

    def add(self, events: Iterable[dict[str, Any]], now: float | None = None) -> int:
        now = time.time() if now is None else now
        added = 0
        with self._lock:
            for e in events:
                self.seq += 1
                e["seq"] = self.seq
                self.recent.append(e)
                self.lag.append(max(0.0, now - e["t"]))
                minute = int(e["t"] // 60)
                bucket = self.minutes.get(minute)
                if bucket is None:
                    bucket = self.minutes[minute] = Bucket()
                bucket.requests += 1
                if e["action"] in ("block", "warn"):
                    bucket.blocked += 1
                    bucket.categories[e.get("category") or "-"] += 1
                elif e["action"] == "unknown":
                    bucket.unknown += 1
                added += 1
            oldest = int(now // 60) - self._span
            if oldest != self._purged:  # once a minute, not once a call
                self._purged = oldest
                for minute in [m for m in self.minutes if m < oldest]:
                    del self.minutes[minute]
        return added

    def after(self, seq: int, filters: dict[str, str], limit: int = 200) -> list[dict[str, Any]]:
        """The newest ``limit`` decisions after ``seq`` that pass ``filters`` (field →
        exact value; ``client`` and ``url`` match a part), newest first."""
        out = []
        with self._lock:
            items = list(self.recent)
        for e in reversed(items):
            if e["seq"] <= seq:
                break
            if _passes(e, filters):
                out.append(e)
                if len(out) >= limit:
                    break
        return out

    def series(self, minutes: int, step: int, now: float | None = None) -> list[Bucket]:
        """``minutes`` back from now in buckets of ``step`` minutes, oldest first."""
        now = time.time() if now is None else now
        last = int(now // 60)
        out = []
        with self._lock:
            for start in range(last - minutes + 1, last + 1, step):
                merged = Bucket()
                for minute in range(start, start + step):
                    b = self.minutes.get(minute)
                    if b is not None:
                        merged.requests += b.requests
                        merged.blocked += b.blocked
                        merged.unknown += b.unknown
                        merged.categories.update(b.categories)
                out.append(merged)
        return out


def _passes(e: dict[str, Any], filters: dict[str, str]) -> bool:
    for name, wanted in filters.items():
        if not wanted:
            continue
        value = e.get(name) or ""
        if name in ("client", "url"):
            if wanted not in value:
                return False
        elif value != wanted:
            return False
    return True


# -- the policy helper's and the service's decisions -------------------------------------


def policy_event(
    engine: Any, decision: Any, url: str, who: Any, *, origin: str, when: float | None = None
) -> dict[str, Any]:
    """The event of a policy's :class:`~urlsieve.policy.engine.Decision`."""
    action = {"block": "block", "warn": "warn"}.get(decision.action, "allow")
    rule = None
    if decision.rule_id >= 0:
        with contextlib.suppress(Exception):
            rule = engine.rules.rule(decision.rule_id).where
    return event(
        url,
        action,
        origin=origin,
        client=who.client,
        user=who.user,
        group=decision.source,
        category=decision.category if action != "allow" else None,
        rule=rule,
        when=when,
    )


class PolicyStream:
    """A :class:`~urlsieve.policy.blocklog.RequestLog`-shaped sink (``wanted``,
    ``record``) writing a policy helper's decisions to the stream."""

    def __init__(self, path: str, *, log: Callable[[str], None] = lambda _msg: None) -> None:
        self.writer = DecisionWriter(path, log=log, expand=self._events)

    def wanted(self, engine: Any) -> bool:
        return True

    def record(self, engine: Any, decision: Any, url: str, who: Any, method: str = "GET") -> None:
        self.writer.record((time.time(), engine, decision, url, who))

    def reopen(self) -> None:
        """Nothing to do: the file is opened again after a failed write."""

    def close(self) -> None:
        self.writer.close()

    @staticmethod
    def _events(item: tuple[float, Any, Any, str, Any]) -> list[dict[str, Any]]:
        when, engine, decision, url, who = item
        return [policy_event(engine, decision, url, who, origin="helper", when=when)]


class TeeLog:
    """Several request-log sinks as one (the policy helper takes one)."""

    def __init__(self, *logs: Any) -> None:
        self.logs = logs

    def wanted(self, engine: Any) -> bool:
        return any(log.wanted(engine) for log in self.logs)

    def record(self, engine: Any, decision: Any, url: str, who: Any, method: str = "GET") -> None:
        for log in self.logs:
            if log.wanted(engine):
                log.record(engine, decision, url, who, method)

    def reopen(self) -> None:
        for log in self.logs:
            log.reopen()


def service_events(
    results: Iterable[dict[str, Any]], client: str | None, user: str | None, when: float
) -> list[dict[str, Any]]:
    """The events of the service's check results (``/v1/check``'s JSON)."""
    out = []
    for r in results:
        action = r.get("action")
        if action is None:  # an invalid URL in a batch
            continue
        rule = r.get("rule")
        policy = r.get("policy")
        if r.get("unknown"):
            shown = "unknown"
        elif action in ("block", "warn"):
            shown = action
        else:
            shown = "allow" if rule is not None or policy is not None else "unknown"
        where = None
        if isinstance(rule, dict) and rule.get("source"):
            where = f"{rule['source']}:{rule['line']}" if rule.get("line") else rule["source"]
        out.append(
            event(
                r["url"],
                shown,
                origin="service",
                client=client,
                user=user,
                group=policy.get("source") if isinstance(policy, dict) else None,
                category=r.get("category") if shown in ("block", "warn", "unknown") else None,
                rule=where,
                when=when,
            )
        )
    return out
