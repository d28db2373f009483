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
from urlsieve.policy.engine import BLOCK, REWRITE, Decision, PolicyEngine, Who
from urlsieve.policy.pages import render_page, split_status

__all__ = ["POLICY_FALLBACK_PAGE", "PolicyHelper"]

#: The block page of a policy whose ACLs name none (and no squid.redirect_url is set).
POLICY_FALLBACK_PAGE = "http://blocked.invalid/?target=%t&source=%s&url=%u"


class PolicyHelper(SquidHelper):
    """Answers request lines by the policy of the current :class:`PolicyEngine`."""

    def _engine(self) -> PolicyEngine:
        engine: PolicyEngine = self.rules.get()  # type: ignore[assignment]
        return engine

    def _handle_batch(self, lines: Sequence[bytes]) -> list[str]:
        if self._escaped:  # external ACL: each URL has several readings, line by line
            return [self.handle(line) for line in lines]
        engine = self._engine()  # no rules: the batch fails as a whole, handle() answers
        requests: list[HelperRequest | None] = []
        for line in lines:
            try:
                requests.append(parse_request(line, channels=self.settings.channels, escaped=False))
            except ProtocolError:
                requests.append(None)
        good = [r for r in requests if r is not None]
        decided = iter(
            engine.decide_many(
                [r.target for r in good], [Who(r.client, r.client_name, r.user) for r in good]
            )
        )
        replies = []
        for line, request in zip(lines, requests, strict=True):
            if request is None:
                replies.append(self.handle(line))
                continue
            decision = next(decided)
            if isinstance(decision, InvalidURL):
                replies.append(self.handle(line))
                continue
            self.stats.requests += 1
            replies.append(self._render(request, decision))
        return replies

    def _answer(self, request: HelperRequest) -> str:
        self.stats.requests += 1
        try:
            engine = self._engine()
            who = Who(request.client, request.client_name, request.user)
            readings = acl_readings(request.target) if self._escaped else [request.target]
            decision = engine.decide(readings[0], who)
            for reading in readings[1:]:
                if decision.action == BLOCK:
                    break
                decision = engine.decide(reading, who)
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

    def _render(self, request: HelperRequest, decision: Decision) -> str:
        settings = self.settings
        channel = request.channel
        if decision.action == BLOCK:
            self.stats.blocked += 1
            category = decision.category or "none"
            if settings.mode is HelperMode.ACL:
                why = f"blocked by {category} (source {decision.source}, acl {decision.acl})"
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
