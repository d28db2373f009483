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

Lines are bytes: they are split on ASCII spaces only, a byte that is not UTF-8
reaches the canonicaliser and the block page as that byte, and every reply is
printable ASCII. Nothing a line holds can make :meth:`SquidHelper.handle` raise:
whatever fails, rendering the block page included, is answered by the failure
mode. The reader is linear in its input and bounded: a line longer than
:data:`~urlsieve.gateway.protocol.MAX_LINE` is answered ``BH`` and skipped
without being buffered.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from urlsieve._accel import speedups
from urlsieve._lines import TooLong, fill_holes, split_lines
from urlsieve.exceptions import InvalidURL
from urlsieve.gateway.config import FailureMode
from urlsieve.gateway.live import LiveRules, NoRules
from urlsieve.gateway.protocol import (
    MAX_LINE,
    HelperMode,
    HelperRequest,
    ProtocolError,
    _quote_all,
    acl_readings,
    format_reply,
    leading_channel,
    parse_request,
    render_template,
    template_is_plain,
    template_pieces,
    template_uses,
)
from urlsieve.gateway.unknown import (
    PENDING_CATEGORY,
    UNKNOWN_CATEGORY,
    BurstGate,
    UnknownFeed,
    site_of,
)
from urlsieve.match.snapshot import CompiledImage

__all__ = ["HelperSettings", "HelperStats", "SquidHelper", "serve"]

# The compiled line scan (reference: protocol.parse_request, held equal by the tests).
_scan = getattr(speedups, "squid_scan", None)
# A read answered in one compiled call (reference: SquidHelper.handle_batch).
_reply = getattr(speedups, "squid_reply", None)
# Reply pieces of a rule id: nothing to render (allowed), or the usual path renders it.
_ALLOWED: tuple[str, ...] = ("ERR",)
_SLOW: tuple[str, ...] = ("slow",)
_MAX_PIECES = 1 << 16

#: The category reported (``tag=``) when the failure mode blocks.
FAILURE_CATEGORY = "urlsieve-failure"
#: How often a failure repeated for every request (no rules loaded) is logged again.
FAILURE_LOG_SECONDS = 60.0
#: Where a request goes when even the configured block page cannot be rendered.
LAST_RESORT_PAGE = "http://blocked.invalid/urlsieve-failure"


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

    def decide_ids(self, urls: Sequence[str]) -> Sequence[int | Exception]: ...

    def rule(self, rule_id: int) -> _Rule: ...

    def provenance(self, rule_id: int) -> tuple[str, str, str | None, int | None]: ...

    # Optional: ``compiled`` (a CompiledImage or None), for the one-call path of a read.


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
    unknown: int = 0  # requests no rule decided (base or learned), with learning on
    # Each unknown request is exactly one of these (and also counted allowed or blocked):
    unknown_passed: int = 0  # allowed the first time (within the burst, or a clean site)
    unknown_pending: int = 0  # past its site's burst: the pending answer (learn.pending)
    unknown_blocked: int = 0  # learn.unknown = "block"


class SquidHelper:
    """Answers Squid helper request lines from the current rules of a :class:`LiveRules`."""

    def __init__(
        self,
        rules: LiveRules[_Checker],
        settings: HelperSettings,
        *,
        log: Callable[[str], None] = lambda _msg: None,
        unknown: UnknownFeed | None = None,
        block_unknown: bool = False,
        burst: BurstGate | None = None,
        pending: str = "check",
        pending_url: str | None = None,
    ) -> None:
        """``unknown``: where URLs no rule decides go for learning (the helper stays free of
        :mod:`urlsieve.learn`); ``block_unknown``: block them until they are classified
        (``learn.unknown = "block"``) instead of allowing them the first time.

        ``burst``: with the first-time allow, how many requests of one unknown site pass
        (shared by the helper's children); past it ``pending`` answers: ``check``
        redirects to ``pending_url`` (else the block page, category ``pending``), a
        "checking this site" page that reloads itself until the verdict lands; ``block``
        blocks as ``learn.unknown = "block"`` does. A site the overlay knows clean
        (``clean_domains``) is not capped."""
        self.rules = rules
        self.settings = settings
        self.unknown = unknown
        self.block_unknown = block_unknown
        self.burst = burst
        self.pending = pending
        self.pending_url = pending_url
        self.log = _never_raising(log)
        self.stats = HelperStats()
        self._failure_reason: str | None = None
        self._failure_logged = 0.0
        self._failure_repeats = 0
        self._escaped = (
            settings.mode is HelperMode.ACL if settings.escaped is None else settings.escaped
        )
        self._plain_template = template_is_plain(settings.redirect_url or "")
        self._replies_for: object = None
        self._pieces: dict[int, tuple[str, ...]] = {}
        # The compiled path's arguments for the current rules: (rules, image, pieces).
        self._compiled: tuple[object, CompiledImage | None, tuple[tuple[str, ...] | None, ...]] = (
            None,
            None,
            (),
        )
        # Whether a block reply needs the request's client or user fields (%a %n %i).
        self._fields = settings.mode is not HelperMode.ACL and any(
            template_uses(settings.redirect_url or "", code) for code in "ani"
        )

    def handle(self, line: bytes | str) -> str:
        """One request line (without newline) → one reply line (with newline), never raising."""
        try:
            return self._handle(line)
        except Exception as exc:  # the last line of defence: the failure mode answers
            raw = line if isinstance(line, bytes) else line.encode("utf-8", "surrogateescape")
            return self._last_resort(leading_channel(raw), f"{type(exc).__name__}: {exc}")

    def answer_batch(self, lines: Sequence[bytes]) -> bytes:
        """The replies to the lines of one read (as read: trailing CRs are dropped) as the
        bytes to write, never raising: with the extension and compiled rules, one call
        scans, checks and answers every plain line, and :meth:`handle_batch` (the
        reference) answers the lines it leaves."""
        lines = list(lines)
        try:
            answered = self._compiled_batch(lines)
        except Exception:  # the compiled path failed as a whole: the reference answers
            answered = None
        if answered is None:
            return "".join(self.handle_batch([line.rstrip(b"\r") for line in lines])).encode(
                "ascii"
            )
        out, holes, blocked, allowed = answered
        stats = self.stats
        stats.requests += blocked + allowed
        stats.blocked += blocked
        stats.allowed += allowed
        replies = self.handle_batch([lines[k].rstrip(b"\r") for k, _ in holes]) if holes else []
        return fill_holes(out, holes, (reply.encode("ascii") for reply in replies))

    def _compiled_batch(
        self, lines: list[bytes]
    ) -> tuple[bytes, list[tuple[int, int]], int, int] | None:
        """``squid_reply``'s answer for the lines (nothing counted), or None when the
        extension or compiled rules are missing."""
        if _reply is None:
            return None
        rules = self.rules.get()
        if rules is not self._compiled[0]:
            image: CompiledImage | None = getattr(rules, "compiled", None)
            pieces = () if image is None else tuple(map(self._category_pieces, image.categories))
            self._compiled = (rules, image, pieces)
        _rules, image, pieces = self._compiled
        if image is None:
            return None
        channels = self.settings.channels
        found: tuple[bytes, list[tuple[int, int]], int, int] = _reply(
            lines,
            0 if channels is False else 1 if channels else 2,
            self._escaped,
            image.view,
            image.layout,
            image.mask,
            pieces,
            self.unknown is not None or not image.complete,
        )
        return found

    def _category_pieces(self, category: str) -> tuple[str, ...] | None:
        """The block reply pieces of every rule of ``category``, when they do not depend on
        the rule (no ``%r``, not the external ACL's ``blocked by``); None: the rule's own
        (the reference path renders it)."""
        template = self.settings.redirect_url or ""
        if self.settings.mode is HelperMode.ACL or template_uses(template, "r"):
            return None
        pieces = self._pieces_of("block", category, None, None)
        return None if pieces is _SLOW else pieces

    def handle_batch(self, lines: Sequence[bytes]) -> list[str]:
        """Replies to the lines of one read, in order, never raising: each line is parsed,
        their URLs are checked in one batch call, and a line the batch cannot answer (a
        rule set without a batch path, an error) is answered by :meth:`handle`."""
        try:
            return self._handle_batch(lines)
        except Exception:  # the batch path failed as a whole: line by line, as before
            return [self.handle(line) for line in lines]

    def _handle_batch(self, lines: Sequence[bytes]) -> list[str]:
        rules = self.rules.get()  # no rules: the batch fails as a whole, handle() answers
        if rules is not self._replies_for:  # new rules: the cached reply pieces go
            self._replies_for, self._pieces = rules, {}
        channels = self.settings.channels
        lines = list(lines)
        urls, channel_ids = self._scan_lines(lines)
        plain = [u for u in urls if u is not None]
        # Nothing is counted or logged before this call: if it fails, handle() starts afresh.
        decided = iter(rules.decide_ids(plain) if plain else ())
        replies = []
        stats = self.stats
        pieces = self._pieces
        for line, url, channel in zip(lines, urls, channel_ids, strict=True):
            if url is None:  # not a plain request line: parsed and answered on its own
                replies.append(self.handle(line))
                continue
            rule_id = next(decided)
            if type(rule_id) is not int:  # not a URL: the failure mode, with why
                replies.append(self.handle(line))
                continue
            if rule_id == -1 and self.unknown is not None:
                replies.append(self._unknown_reply(line))
                continue
            known = pieces.get(rule_id) if rule_id >= 0 else _ALLOWED
            if known is None:
                if len(pieces) >= _MAX_PIECES:
                    pieces.clear()
                known = pieces[rule_id] = self._pieces_of(*rules.provenance(rule_id))
            if known is _ALLOWED:
                stats.requests += 1
                stats.allowed += 1
                replies.append("ERR\n" if channel < 0 else f"{channel} ERR\n")
            elif known is _SLOW:  # a block page naming the client: the request is read
                request = parse_request(line, channels=channels, escaped=self._escaped)
                replies.append(self._reply(request, rules.rule(rule_id)))
            else:
                stats.requests += 1
                stats.blocked += 1
                head = "" if channel < 0 else f"{channel} "
                quoted = _quote_all(url)
                replies.append(head + quoted.join(known))
        return replies

    def _pieces_of(
        self, action: str, category: str, source: str | None, line: int | None
    ) -> tuple[str, ...]:
        """What the block reply of a rule is made of around the quoted URL (joined by it),
        ``_ALLOWED`` for an allow rule, ``_SLOW`` when the reply needs the request's fields
        or escaping (the usual path renders it)."""
        if action != "block":
            return _ALLOWED
        settings = self.settings
        where = "-" if source is None else source if line is None else f"{source}:{line}"
        if settings.mode is HelperMode.ACL:
            why = f"blocked by {where}"
            return (format_reply(None, "OK", tag=category or "-", message=why, log=why),)
        if self._fields:
            return _SLOW
        if not self._plain_template:
            return _SLOW  # a template needing quote_value's escapes: the usual path renders it
        pieces = template_pieces(settings.redirect_url or "", category=category, rule=where)
        if settings.mode is HelperMode.REWRITE:
            head = 'OK rewrite-url="'
        else:
            head = f'OK status={settings.redirect_status} url="'
        return (
            (head + pieces[0], *pieces[1:-1], pieces[-1] + '"\n')
            if len(pieces) > 1
            else (head + pieces[0] + '"\n',)
        )

    def _unknown_reply(self, line: bytes) -> str:
        """The reply to a plain line whose URL no rule decides: queued, then allowed or
        blocked (the line is read again for its client, which ranks the URL's priority)."""
        try:
            request = parse_request(line, channels=self.settings.channels, escaped=self._escaped)
        except ProtocolError:
            return self.handle(line)
        self.stats.requests += 1
        return self._unknown(request)

    def _unknown(self, request: HelperRequest) -> str:
        feed = self.unknown
        assert feed is not None
        stats = self.stats
        stats.unknown += 1
        feed.add(request.target, request.client)
        if self.block_unknown:
            stats.blocked += 1
            stats.unknown_blocked += 1
            why = "not classified yet: queued for learning"
            return self._block(request, UNKNOWN_CATEGORY, "-", why)
        if self.burst is not None and not self._within_burst(request.target):
            reply = self._pending(request)  # counted once it is rendered
            stats.blocked += 1
            stats.unknown_pending += 1
            return reply
        stats.allowed += 1
        stats.unknown_passed += 1
        return format_reply(request.channel, "ERR")

    def _within_burst(self, url: str) -> bool:
        """Whether a request of an unknown URL passes: its site is known clean, or the
        site's burst is not spent yet. A URL without a site does not pass."""
        gate = self.burst
        assert gate is not None
        site = site_of(url)
        if site is None:
            return False
        clean: frozenset[str] = getattr(self.rules.get(), "clean_domains", frozenset())
        return site in clean or gate.allow(site)

    def _pending(self, request: HelperRequest) -> str:
        """The pending answer to a request of an unknown site past its burst."""
        why = "not classified yet: checking this site"
        if self.pending == "block" or self.settings.mode is HelperMode.ACL:
            category = UNKNOWN_CATEGORY if self.pending == "block" else PENDING_CATEGORY
            return self._block(request, category, "-", why)
        settings = self.settings
        target = render_template(
            self.pending_url or settings.redirect_url or "",
            url=request.url,
            category=PENDING_CATEGORY,
            client=request.client,
            client_name=request.client_name,
            user=request.user,
            rule="-",
        )
        if settings.mode is HelperMode.REWRITE:
            return format_reply(request.channel, "OK", rewrite_url=target)
        return format_reply(request.channel, "OK", status=302, url=target)

    def _scan_lines(self, lines: list[bytes]) -> tuple[list[str | None], list[int]]:
        """Per line its URL when the line has the plain form (None: parse it on its own),
        and its channel ID (-1: none): compiled when the extension is built."""
        ids = np.empty(len(lines), dtype=np.int64)
        if _scan is not None:
            channels = self.settings.channels
            mode = 0 if channels is False else 1 if channels else 2
            urls: list[str | None] = _scan(lines, mode, self._escaped, ids)
        else:
            urls = self._scan_py(lines, ids)
        channel_ids: list[int] = ids.tolist()
        return urls, channel_ids

    def _scan_py(self, lines: list[bytes], ids: np.ndarray) -> list[str | None]:
        """:func:`urlsieve._speedups.squid_scan` without the extension: every line parsed."""
        urls: list[str | None] = []
        for at, line in enumerate(lines):
            try:
                request = parse_request(
                    line, channels=self.settings.channels, escaped=self._escaped
                )
                target = request.target
            except Exception:
                request = None
            if (
                request is None
                or (request.channel is not None and not request.channel.isdigit())
                or (self._escaped and "%" in request.url)
            ):
                urls.append(None)
                ids[at] = -1
                continue
            urls.append(target)
            ids[at] = -1 if request.channel is None else int(request.channel)
        return urls

    def _reply(self, request: HelperRequest, rule: _Rule) -> str:
        """The reply to a request the batch found blocked by ``rule``."""
        self.stats.requests += 1
        try:
            where = rule.where
            reply = self._block(
                request, getattr(rule, "category", None), where, f"blocked by {where}"
            )
        except Exception as exc:  # rendering failed: the failure mode, from constants
            return self._last_resort(request.channel, f"{type(exc).__name__}: {exc}")
        self.stats.blocked += 1
        return reply

    def too_long(self, head: bytes) -> str:
        """The reply to a line longer than :data:`MAX_LINE` (``head``: its first bytes)."""
        self.stats.bad_lines += 1
        reason = f"request line longer than {MAX_LINE} bytes"
        self.log(f"bad request line {head[:80]!r}…: {reason}")
        return format_reply(leading_channel(head), "BH", message=reason)

    def _handle(self, line: bytes | str) -> str:
        try:
            request = parse_request(line, channels=self.settings.channels, escaped=self._escaped)
        except ProtocolError as exc:
            self.stats.bad_lines += 1
            self.log(f"bad request line {line[:200]!r}: {exc.reason}")
            return format_reply(exc.channel, "BH", message=exc.reason)
        return self._answer(request)

    def _answer(self, request: HelperRequest) -> str:
        """The reply to a parsed request, checked on its own."""
        self.stats.requests += 1
        try:
            verdict = self._check(request.target)
        except ProtocolError as exc:
            return self._failure(request, exc.reason)
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
        if verdict.rule is None and self.unknown is not None:
            return self._unknown(request)
        self.stats.allowed += 1
        return format_reply(request.channel, "ERR")

    def _check(self, target: str) -> _Verdict:
        """The verdict for a request's URL; in the external ACL, the most restrictive of its
        readings (:func:`~urlsieve.gateway.protocol.acl_readings`)."""
        rules = self.rules.get()
        verdict = rules.check(target)
        if not self._escaped or verdict.action == "block":
            return verdict
        for reading in acl_readings(target)[1:]:
            other = rules.check(reading)  # no URL in one reading: the failure mode, as raw
            if other.action == "block":
                return other
        return verdict

    def _last_resort(self, channel: str | None, reason: str) -> str:
        """The failure mode's reply built from constants only, when building any other failed."""
        self.stats.failures += 1
        reason = f"internal error: {reason}"[:300]
        self.log(f"fail-{self.settings.failure_mode.value}: {reason!r}")
        if self.settings.failure_mode is FailureMode.OPEN:
            return format_reply(channel, "ERR", log=f"urlsieve fail-open: {reason}")
        request = HelperRequest(channel, "-")
        try:
            return self._block(request, FAILURE_CATEGORY, "-", f"urlsieve fail-closed: {reason}")
        except Exception:  # even the block page failed: a block from constants alone
            if self.settings.mode is HelperMode.ACL:
                return format_reply(channel, "OK", tag=FAILURE_CATEGORY)
            return format_reply(channel, "OK", status=302, url=LAST_RESORT_PAGE)

    def _failure(self, request: HelperRequest, reason: str) -> str:
        self.stats.failures += 1
        open_ = self.settings.failure_mode is FailureMode.OPEN
        self._log_failure(
            f"fail-open: allowing {request.url[:300]!r}"
            if open_
            else f"fail-closed: blocking {request.url[:300]!r}",
            reason,
        )
        if open_:
            return format_reply(request.channel, "ERR", log=f"urlsieve fail-open: {reason}")
        return self._block(request, FAILURE_CATEGORY, "-", f"urlsieve fail-closed: {reason}")

    def _log_failure(self, what: str, reason: str) -> None:
        """One line per reason, not per request: a reason repeated (no rules loaded, for
        every request) is said again at most once a minute, with how many it answered."""
        now = time.monotonic()
        if reason == self._failure_reason and now - self._failure_logged < FAILURE_LOG_SECONDS:
            self._failure_repeats += 1
            return
        repeats = (
            f" ({self._failure_repeats} more requests answered so since the last line)"
            if reason == self._failure_reason and self._failure_repeats
            else ""
        )
        self.log(f"{what}: {reason}{repeats}")
        self._failure_reason, self._failure_logged, self._failure_repeats = reason, now, 0

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


def _never_raising(log: Callable[[str], None]) -> Callable[[str], None]:
    """``log``, made unable to stop a reply: a logger that fails is skipped."""

    def safe(message: str) -> None:
        with contextlib.suppress(Exception):
            log(message)

    return safe


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def serve(
    helper: SquidHelper,
    infd: int = 0,
    outfd: int = 1,
    chunk: int = 1 << 16,
    max_line: int = MAX_LINE,
    *,
    tap: Callable[[list[Any], bytes], None] | None = None,
) -> int:
    """Answer request lines from ``infd`` on ``outfd`` until end of input; returns 0.

    Replies to all complete lines of one read are written together, so a batch
    from a concurrent Squid costs one write; a lone request is answered at once.
    Each read is scanned once for newlines (only the unfinished line is carried
    over), and a line longer than ``max_line`` bytes is answered as soon as it
    passes the cap, then skipped up to its newline without being kept.

    ``tap(lines, replies)``: called after each write with the batch's lines and reply
    bytes (the decision stream, :class:`urlsieve.console.stream.HelperTap`).
    """
    for batch in split_lines(lambda size: os.read(infd, size), max_line, chunk, blank_tail=False):
        # After the read: a SIGHUP that arrived while waiting applies to these lines.
        helper.rules.poll()
        if TooLong in map(type, batch):
            data = "".join(
                helper.too_long(line.head)
                if isinstance(line, TooLong)
                else helper.handle(line.rstrip(b"\r"))
                for line in batch
            ).encode("ascii")
        else:
            data = helper.answer_batch(batch)  # type: ignore[arg-type]
        if data:
            _write_all(outfd, data)
            if tap is not None:
                tap(batch, data)
    return 0


def stderr_logger(prefix: str) -> Callable[[str], None]:
    """A logger writing ``prefix[pid]: message`` lines to stderr (Squid's cache.log)."""
    pid = os.getpid()

    def log(message: str) -> None:
        line = f"{prefix}[{pid}]: {message}\n".encode("utf-8", "backslashreplace")
        with contextlib.suppress(OSError, ValueError, AttributeError):  # stderr closed or odd
            sys.stderr.buffer.write(line)
            sys.stderr.buffer.flush()

    return log
