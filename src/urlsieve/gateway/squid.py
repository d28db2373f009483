"""The Squid helper: decisions for request lines, and the stdin/stdout loop.

:class:`SquidHelper` turns one request line into one reply line (see
:mod:`urlsieve.gateway.protocol`); :func:`serve` runs it over file
descriptors, reading whatever Squid has sent, answering every complete line,
and writing the replies in one go (with ``concurrency`` > 0 Squid sends many
lines before it reads a reply). Between two reads the rules are reloaded when
SIGHUP arrived or the snapshot file changed.

When the helper cannot decide (no rules could be loaded, an unexpected error,
a URL the canonicaliser rejects) the *failure mode* answers: ``closed`` (the
default) blocks, ``open`` allows; both log the reason on stderr, which Squid
copies to cache.log. A line that is not a request gets ``BH message=…``.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from urlsieve.exceptions import InvalidURL
from urlsieve.gateway.config import FailureMode
from urlsieve.gateway.live import LiveRules, NoRules
from urlsieve.gateway.protocol import (
    HelperMode,
    HelperRequest,
    ProtocolError,
    format_reply,
    parse_request,
    render_template,
)

__all__ = ["HelperSettings", "HelperStats", "SquidHelper", "serve"]

#: The category reported (``tag=``) when the failure mode blocks.
FAILURE_CATEGORY = "urlsieve-failure"


class _Rule(Protocol):
    @property
    def where(self) -> str: ...


class _Verdict(Protocol):
    @property
    def action(self) -> str: ...

    @property
    def category(self) -> str | None: ...

    @property
    def rule(self) -> _Rule | None: ...


class _Checker(Protocol):
    def check(self, url: str) -> _Verdict: ...


@dataclass(frozen=True)
class HelperSettings:
    """How the helper answers (built from :class:`urlsieve.gateway.config.GatewayConfig`)."""

    mode: HelperMode = HelperMode.REDIRECT
    redirect_url: str | None = None
    redirect_status: int = 302
    failure_mode: FailureMode = FailureMode.CLOSED
    #: True/False: Squid sends channel IDs or not; None: recognise them per line.
    channels: bool | None = None
    #: Fields are URL-escaped (external ACL); None: escaped in ``acl`` mode only.
    escaped: bool | None = None

    def __post_init__(self) -> None:
        if self.mode is not HelperMode.ACL and not self.redirect_url:
            raise ValueError(f"mode {self.mode.value!r} needs a redirect_url")


@dataclass
class HelperStats:
    requests: int = 0
    blocked: int = 0
    allowed: int = 0
    failures: int = 0
    bad_lines: int = 0


class SquidHelper:
    """Answers Squid helper request lines from the current rules of a :class:`LiveRules`."""

    def __init__(
        self,
        rules: LiveRules[_Checker],
        settings: HelperSettings,
        *,
        log: Callable[[str], None] = lambda _msg: None,
    ) -> None:
        self.rules = rules
        self.settings = settings
        self.log = log
        self.stats = HelperStats()
        self._escaped = (
            settings.mode is HelperMode.ACL if settings.escaped is None else settings.escaped
        )

    def handle(self, line: str) -> str:
        """One request line (without newline) → one reply line (with newline)."""
        try:
            request = parse_request(line, channels=self.settings.channels, escaped=self._escaped)
        except ProtocolError as exc:
            self.stats.bad_lines += 1
            self.log(f"bad request line {line[:200]!r}: {exc.reason}")
            return format_reply(exc.channel, "BH", message=exc.reason)
        self.stats.requests += 1
        try:
            verdict = self.rules.get().check(request.target)
        except NoRules as exc:
            return self._failure(request, f"no rules loaded: {exc}")
        except InvalidURL as exc:
            return self._failure(request, f"URL cannot be canonicalised ({exc.reason})")
        except Exception as exc:  # a bug must not take the gateway down: failure mode decides
            return self._failure(request, f"internal error: {type(exc).__name__}: {exc}")
        if verdict.action == "block":
            self.stats.blocked += 1
            where = verdict.rule.where if verdict.rule is not None else "-"
            return self._block(request, verdict.category, where, f"blocked by {where}")
        self.stats.allowed += 1
        return format_reply(request.channel, "ERR")

    def _failure(self, request: HelperRequest, reason: str) -> str:
        self.stats.failures += 1
        if self.settings.failure_mode is FailureMode.OPEN:
            self.log(f"fail-open: allowing {request.url[:300]!r}: {reason}")
            return format_reply(request.channel, "ERR", log=f"urlsieve fail-open: {reason}")
        self.log(f"fail-closed: blocking {request.url[:300]!r}: {reason}")
        return self._block(request, FAILURE_CATEGORY, "-", f"urlsieve fail-closed: {reason}")

    def _block(self, request: HelperRequest, category: str | None, where: str, why: str) -> str:
        settings = self.settings
        channel = request.channel
        if settings.mode is HelperMode.ACL:
            return format_reply(channel, "OK", tag=category or "-", message=why, log=why)
        target = render_template(
            settings.redirect_url or "",
            url=request.url,
            category=category,
            client=request.client,
            client_name=request.client_name,
            user=request.user,
            rule=where,
        )
        if settings.mode is HelperMode.REWRITE:
            return format_reply(channel, "OK", rewrite_url=target)
        return format_reply(channel, "OK", status=settings.redirect_status, url=target)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def serve(helper: SquidHelper, infd: int = 0, outfd: int = 1, chunk: int = 1 << 16) -> int:
    """Answer request lines from ``infd`` on ``outfd`` until end of input; returns 0.

    Replies to all complete lines of one read are written together, so a batch
    from a concurrent Squid costs one write; a lone request is answered at once.
    """
    pending = b""
    while True:
        data = os.read(infd, chunk)
        if not data:
            break
        # After the read: a SIGHUP that arrived while waiting applies to these lines.
        helper.rules.poll()
        pending += data
        if b"\n" not in data:
            continue
        *lines, pending = pending.split(b"\n")
        handle = helper.handle
        replies = [handle(raw.rstrip(b"\r").decode("utf-8", "surrogateescape")) for raw in lines]
        _write_all(outfd, "".join(replies).encode("utf-8", "surrogateescape"))
    if pending.strip():
        reply = helper.handle(pending.rstrip(b"\r").decode("utf-8", "surrogateescape"))
        _write_all(outfd, reply.encode("utf-8", "surrogateescape"))
    return 0


def stderr_logger(prefix: str) -> Callable[[str], None]:
    """A logger writing ``prefix[pid]: message`` lines to stderr (Squid's cache.log)."""
    pid = os.getpid()

    def log(message: str) -> None:
        print(f"{prefix}[{pid}]: {message}", file=sys.stderr, flush=True)

    return log
