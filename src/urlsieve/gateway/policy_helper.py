"""The Squid helper deciding by a policy: who asks and when choose the categories.

:class:`PolicyHelper` is a :class:`~urlsieve.gateway.squid.SquidHelper` whose rules
are a :class:`~urlsieve.policy.engine.PolicyEngine`. Each request line gives the
client address, host name and user Squid sends (``%>a/%>A %un``, Squid's default
``url_rewrite_extras``); the lines of one read are decided in one batch. Replies
are squidGuard's: a blocked request is sent to its block page (``OK
rewrite-url="…"`` in ``rewrite`` mode, ``OK status=30N url="…"`` in ``redirect``
mode, ``OK tag=… message=…`` as an external ACL), a passed request that a rewrite
changes gets the new URL, the rest ``ERR``. Nothing a line holds makes it raise:
whatever fails is answered by the failure mode, as in the plain helper.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from urlsieve.exceptions import InvalidURL
from urlsieve.gateway.protocol import (
    HelperMode,
    HelperRequest,
    ProtocolError,
    acl_readings,
    format_reply,
    parse_request,
)
from urlsieve.gateway.squid import SquidHelper
from urlsieve.policy.blocklog import RequestLog
from urlsieve.policy.engine import BLOCK, PASS, REWRITE, WARN, Decision, PolicyEngine, Who
from urlsieve.policy.pages import render_page, split_status

__all__ = ["POLICY_FALLBACK_PAGE", "PolicyHelper"]


def who_fields(who: Who) -> tuple[str | None, str | None, str | None]:
    return who.client, who.client_name, who.user


#: The block page of a policy whose ACLs name none (and no squid.redirect_url is set).
POLICY_FALLBACK_PAGE = "http://blocked.invalid/?target=%t&source=%s&url=%u"


class PolicyHelper(SquidHelper):
    """Answers request lines by the policy of the current :class:`PolicyEngine`."""

    def __init__(self, *args: Any, request_log: RequestLog | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._whos: dict[bytes, tuple[Who, str]] = {}
        #: squidGuard's request logs and the JSON-lines log (written off the request path).
        self.request_log = request_log

    def _engine(self) -> PolicyEngine:
        engine: PolicyEngine = self.rules.get()  # type: ignore[assignment]
        return engine

    def _handle_batch(self, lines: Sequence[bytes]) -> list[str]:
        if self._escaped:  # external ACL: each URL has several readings, line by line
            return [self.handle(line) for line in lines]
        engine = self._engine()  # no rules: the batch fails as a whole, handle() answers
        lines = list(lines)
        urls, chan = self._scan_lines(lines)
        picked: list[int] = []
        targets: list[str] = []
        whos: list[Who] = []
        methods: list[str] = []
        who_of = self._who_of
        for k, (line, url) in enumerate(zip(lines, urls, strict=True)):
            if url is None:
                continue
            # Squid's own lines: "[channel ]URL fields…", single spaces; others are parsed.
            parts = line.split(b" ", 1 if chan[k] < 0 else 2)
            head = parts[0] if chan[k] < 0 else (parts[1] if len(parts) > 1 else b"")
            if len(head) != len(url):
                urls[k] = None
                continue
            rest = parts[-1] if len(parts) > (1 if chan[k] < 0 else 2) else b""
            known = who_of(rest)
            if known is None:
                urls[k] = None
                continue
            picked.append(k)
            targets.append(url)
            whos.append(known[0])
            methods.append(known[1])
        decided = engine.decide_many(targets, whos) if targets else []
        log = self.request_log
        if log is not None and decided and log.wanted(engine):
            for url, who, method, decision in zip(targets, whos, methods, decided, strict=True):
                if not isinstance(decision, InvalidURL):
                    log.record(engine, decision, url, who, method)
        replies: list[str | None] = [None] * len(lines)
        for k, url, who, decision in zip(picked, targets, whos, decided, strict=True):
            if isinstance(decision, InvalidURL):
                continue  # answered below by handle(): the failure mode, with why
            channel = chan[k]
            self.stats.requests += 1
            if decision.action == PASS:
                self.stats.allowed += 1
                replies[k] = "ERR\n" if channel < 0 else f"{channel} ERR\n"
            else:
                request = HelperRequest(
                    None if channel < 0 else str(channel), url, *who_fields(who)
                )
                replies[k] = self._render(request, decision)
        return [
            reply if reply is not None else self.handle(line)
            for line, reply in zip(lines, replies, strict=True)
        ]

    def _who_of(self, rest: bytes) -> tuple[Who, str] | None:
        """Who asks and the method, from the fields after the URL (cached: a client sends
        many requests); None for fields the usual path must read (a CONNECT method)."""
        known = self._whos.get(rest)
        if known is None:
            if len(self._whos) >= 1 << 16:
                self._whos.clear()
            request = parse_request(b"http://fields.invalid/ " + rest, channels=False)
            if request.method == "CONNECT":
                return None
            who = Who(request.client, request.client_name, request.user)
            known = self._whos[rest] = (who, request.method or "-")
        return known

    def _answer(self, request: HelperRequest) -> str:
        self.stats.requests += 1
        try:
            engine = self._engine()
            who = Who(request.client, request.client_name, request.user)
            readings = acl_readings(request.target) if self._escaped else [request.target]
            decision = engine.decide(readings[0], who)
            for reading in readings[1:]:  # the strictest reading: any block or warning
                if decision.action in (BLOCK, WARN):
                    break
                decision = engine.decide(reading, who)
            log = self.request_log
            if log is not None and log.wanted(engine):
                log.record(engine, decision, request.url, who, request.method or "-")
        except ProtocolError as exc:
            return self._failure(request, exc.reason)
        except InvalidURL as exc:
            return self._failure(request, f"URL cannot be canonicalised ({exc.reason})")
        except Exception as exc:  # no rules, or a bug: the failure mode decides
            return self._failure(request, f"{type(exc).__name__}: {exc}")
        try:
            return self._render(request, decision)
        except Exception as exc:
            return self._last_resort(request.channel, f"{type(exc).__name__}: {exc}")

    def _block(self, request: HelperRequest, category: str | None, where: str, why: str) -> str:
        """The failure mode's block reply, with the block page filled as a policy fills it
        (squidGuard's codes: ``%s`` and ``%t`` too)."""
        decision = Decision(BLOCK, "-", "-", category, None)
        return self._render(request, decision)

    def _render(self, request: HelperRequest, decision: Decision) -> str:
        settings = self.settings
        channel = request.channel
        if decision.action in (BLOCK, WARN):  # a warning is a block page with "continue"
            self.stats.blocked += 1
            category = decision.category or "none"
            if settings.mode is HelperMode.ACL:
                verb = "warned about" if decision.action == WARN else "blocked by"
                why = f"{verb} {category} (source {decision.source}, acl {decision.acl})"
                return format_reply(channel, "OK", tag=category, message=why, log=why)
            template = decision.target or settings.redirect_url or ""
            status, template = split_status(template)
            page = render_page(
                template,
                url=request.url,
                client=request.client,
                client_name=request.client_name,
                user=request.user,
                source=decision.source,
                target=decision.category,
            )
            if status is not None:
                return format_reply(channel, "OK", status=status, url=page)
            if settings.mode is HelperMode.REWRITE:
                return format_reply(channel, "OK", rewrite_url=page)
            return format_reply(channel, "OK", status=settings.redirect_status, url=page)
        self.stats.allowed += 1
        if decision.action == REWRITE and settings.mode is not HelperMode.ACL:
            target = decision.target or request.url
            if decision.status is not None:
                return format_reply(channel, "OK", status=decision.status, url=target)
            return format_reply(channel, "OK", rewrite_url=target)
        return format_reply(channel, "ERR")
