"""Request logs as squidGuard writes them, and a JSON-lines log, off the request path.

squidGuard 1.6 (``sgLogRequest`` and ``sgLog`` in its ``sgLog.c``, the choice of file at
the end of ``sgAclAccess`` in ``sg.y``) writes one line a request::

    2026-05-04 10:00:00 [1234] Request(kids/porn/-) http://x.test/ 10.0.0.5/pc1 alice GET REDIRECT

``Request(source/entry/rewrite)``: the source (``default`` for none), the pass-list entry
that decided (a destination, ``all``, ``none``, ``in-addr``; ``unknown`` when none did)
and the rewrite (``-`` unless it rewrote); then the URL, ``client/host name``, the user
(``-`` when none, always with ``anonymous``), the method and ``REDIRECT`` (blocked),
``REWRITE`` or ``PASS`` (written only to ``verbose`` logs). The file is the source's
log, replaced by the default ACL's when the deciding entry is no destination and by the
destination's when it has one; a rewrite with a log writes its ``REWRITE`` lines there.

:class:`RequestLog` takes each decision with :meth:`~RequestLog.record` (a bounded queue
append, never blocking: a full queue drops and counts) and a thread formats and writes
(``O_APPEND``); a write that fails (a full disk) is counted and the line dropped, never
raised. :meth:`~RequestLog.reopen` (SIGHUP, after logrotate) reopens every file before
the next line. The JSON-lines log has the same fields and the rule that decided
(``file:line``).
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from urlsieve.policy.engine import BLOCK, PASS, REWRITE, WARN, Decision, PolicyEngine, Who
from urlsieve.policy.model import ALL, IN_ADDR, NONE, LogSpec, Policy

__all__ = ["LogStats", "RequestLog", "squidguard_line"]

#: Decisions waiting to be written, at most (more are dropped and counted).
QUEUE_SIZE = 65536


@dataclass(frozen=True, slots=True)
class _Item:
    when: float
    engine: PolicyEngine
    decision: Decision
    url: str
    who: Who
    method: str


@dataclass
class LogStats:
    written: int = 0
    dropped: int = 0  # the queue was full
    errors: int = 0  # a write failed (full disk, file gone): the line is lost
    last_error: str | None = None


def _log_of(policy: Policy, decision: Decision, rewrite: str | None) -> tuple[LogSpec | None, str]:
    """The log squidGuard writes ``decision`` to, and the action word."""
    logs = policy.logs
    if decision.action == REWRITE and rewrite is not None:
        spec = logs.get(("rew", rewrite))
        if spec is not None:
            return spec, "REWRITE"
    spec = logs.get(("src", decision.source)) if decision.source != "default" else None
    entry = decision.category
    if entry is None or entry in (ALL, NONE, IN_ADDR) or entry not in policy.dests:
        spec = logs.get(("acl", "default")) or spec
    else:
        spec = logs.get(("dest", entry)) or spec
    action = "REDIRECT" if decision.action in (BLOCK, WARN) else "PASS"
    if decision.action == REWRITE:
        action = "REDIRECT"  # squidGuard: a rewrite without its own log is a redirect here
    return spec, action


def _rewrite_name(policy: Policy, decision: Decision) -> str | None:
    acl = policy.acls.get(decision.acl)
    if acl is None:
        return None
    branch = acl.otherwise if decision.within is False and acl.otherwise else acl.branch
    if branch.rewrite is None and decision.acl != "default":
        return policy.default.branch.rewrite
    return branch.rewrite


def squidguard_line(
    decision: Decision,
    url: str,
    who: Who,
    *,
    when: float,
    pid: int,
    method: str,
    action: str,
    rewrite: str | None = None,
    anonymous: bool = False,
) -> str:
    """One line in squidGuard's request-log format (local time, as squidGuard writes it)."""
    entry = decision.category or "unknown"
    user = "-" if anonymous or not who.user or who.user == "-" else who.user
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(when))
    return (
        f"{stamp} [{pid}] Request({decision.source}/{entry}/"
        f"{rewrite if action == 'REWRITE' and rewrite else '-'}) {url} "
        f"{who.client or '-'}/{who.client_name or '-'} {user} {method} {action}\n"
    )


class RequestLog:
    """squidGuard's request logs of a policy and a JSON-lines log, written by a thread."""

    def __init__(
        self,
        json_path: str | None = None,
        *,
        queue_size: int = QUEUE_SIZE,
        clock: Callable[[], float] = time.time,
        log: Callable[[str], None] = lambda _msg: None,
    ) -> None:
        self.json_path = json_path
        self.stats = LogStats()
        self._clock = clock
        self._log = log
        self._queue: queue.Queue[tuple[Any, ...] | None] = queue.Queue(queue_size)
        self._files: dict[str, int] = {}
        self._reopen = False
        self._pid = os.getpid()
        self._thread = threading.Thread(target=self._run, name="urlsieve-request-log", daemon=True)
        self._thread.start()

    # -- the request path: one queue append ------------------------------------------------

    def wanted(self, engine: PolicyEngine) -> bool:
        """Whether this policy logs anything (else :meth:`record` need not be called)."""
        return bool(self.json_path or engine.policy.logs)

    def record(
        self, engine: PolicyEngine, decision: Decision, url: str, who: Who, method: str = "GET"
    ) -> None:
        try:
            self._queue.put_nowait((self._clock(), engine, decision, url, who, method))
        except queue.Full:
            self.stats.dropped += 1

    def reopen(self) -> None:
        """Reopen every file before the next line (after logrotate moved them: SIGHUP)."""
        self._reopen = True

    def close(self, timeout: float = 5.0) -> None:
        """Write what is queued, then stop the thread and close the files."""
        with contextlib.suppress(queue.Full):
            self._queue.put(None, timeout=timeout)
        self._thread.join(timeout)
        self._close_files()

    # -- the writer thread -----------------------------------------------------------------

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            try:
                self._write_item(_Item(*item))
            except Exception as exc:  # never let the thread die: count and go on
                self._failed(f"{type(exc).__name__}: {exc}")

    def _write_item(self, item: _Item) -> None:
        when, engine, decision, url, who = item.when, item.engine, item.decision, item.url, item.who
        if self._reopen:
            self._reopen = False
            self._close_files()
        policy = engine.policy
        rewrite = _rewrite_name(policy, decision) if decision.action == REWRITE else None
        spec, action = _log_of(policy, decision, rewrite)
        if spec is not None and (action != "PASS" or spec.verbose):
            self._append(
                spec.path,
                squidguard_line(
                    decision,
                    url,
                    who,
                    when=when,
                    pid=self._pid,
                    method=item.method,
                    action=action,
                    rewrite=rewrite,
                    anonymous=spec.anonymous,
                ),
            )
        if self.json_path:
            where = None
            if decision.rule_id >= 0:
                where = engine.rules.rule(decision.rule_id).where
            record = {
                "time": when,
                "pid": self._pid,
                "source": decision.source,
                "acl": decision.acl,
                "target": decision.category or "unknown",
                "rewrite": rewrite,
                "url": url,
                "client": who.client,
                "client_name": who.client_name,
                "user": who.user,
                "method": item.method,
                "action": "PASS" if decision.action == PASS else action,
                "decision": decision.action,
                "rule": where,
                "page": decision.target if decision.action in (BLOCK, WARN) else None,
            }
            self._append(self.json_path, json.dumps(record, ensure_ascii=False) + "\n")

    def _append(self, path: str, line: str) -> None:
        try:
            fd = self._files.get(path)
            if fd is None:
                fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o640)
                self._files[path] = fd
            data = line.encode("utf-8", "surrogateescape")
            if os.write(fd, data) != len(data):
                raise OSError("short write (disk full?)")
            self.stats.written += 1
        except OSError as exc:
            self._failed(f"{path}: {exc.strerror or exc}")

    def _failed(self, why: str) -> None:
        self.stats.errors += 1
        first = self.stats.last_error is None
        self.stats.last_error = why
        if first:  # said once; the count says the rest
            self._log(f"request log: a line could not be written ({why}); counting the rest")

    def _close_files(self) -> None:
        files, self._files = self._files, {}
        for fd in files.values():
            with contextlib.suppress(OSError):
                os.close(fd)
