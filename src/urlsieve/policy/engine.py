"""Deciding requests by a policy: who asks and when choose the pass list, the snapshot
answers which destinations the URL is in.

One snapshot serves every group: a pass list becomes a category mask, and the
compiled lookup (:meth:`~urlsieve.match.snapshot.SnapshotMatcher.match_ids`) finds
the most specific rule among its destinations in one call. squidGuard reads a pass
list left to right, so when the URL is also in a destination listed *before* the one
found, a second lookup restricted to those finds it (rare: most URLs are in one
destination or none). Expression lists, ``in-addr``, ``all`` and ``none`` are
checked only in front of the entry found.

Who asks and when is resolved once per (client, client name, user, minute) and
cached: a request costs a dictionary lookup for its pass list, then the URL lookup.
"""

from __future__ import annotations

import time as _time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, tzinfo
from zoneinfo import ZoneInfo

from urlsieve.exceptions import InvalidURL
from urlsieve.filter import Filter
from urlsieve.match.snapshot import SnapshotMatcher
from urlsieve.policy.clients import normalise_user
from urlsieve.policy.expressions import ExpressionSet
from urlsieve.policy.model import ALL, IN_ADDR, NONE, Acl, Branch, Policy, Source
from urlsieve.policy.rewrite import RewriteSet
from urlsieve.url import parse_url

__all__ = ["PASS", "BLOCK", "REWRITE", "Decision", "PolicyEngine", "Who"]

PASS, BLOCK, REWRITE = "pass", "block", "rewrite"
_MAX_CACHE = 1 << 16


@dataclass(frozen=True, slots=True)
class Who:
    """Who asks: the fields Squid sends (address, host name, user; None when absent)."""

    client: str | None = None
    client_name: str | None = None
    user: str | None = None


@dataclass(frozen=True, slots=True)
class Decision:
    """What the policy decided for one request, and why.

    ``action``: ``pass``, ``block`` or ``rewrite`` (a rewrite rule changed the URL:
    ``target`` is the new URL, ``status`` a redirect status when the rule asks for one).
    For ``block``, ``target`` is the block page *template* (rendered by the caller with
    the request's fields) and ``category`` the pass-list entry that decided.
    """

    action: str
    source: str
    acl: str
    category: str | None = None
    target: str | None = None
    status: int | None = None
    rule_id: int = -1
    within: bool | None = None  # the ACL's time rule held (None: the ACL has none)


@dataclass
class _Plan:
    """A pass list made ready for lookups."""

    source: str
    acl: str
    within: bool | None
    branch: Branch
    redirect: str | None  # the branch's block page, else the default ACL's
    mask: bytes | None  # every rule-backed destination of the pass list
    position: dict[str, int]  # category (aliases resolved) → first pass-list index
    masks_before: list[bytes | None]  # index → mask of the rule-backed entries before it
    checks: list[tuple[int, str]]  # (index, kind) of entries that need no lookup


class PolicyEngine:
    """Decides requests by ``policy`` over the rules of ``rules`` (a :class:`Filter` whose
    categories are the destinations)."""

    def __init__(
        self,
        policy: Policy,
        rules: Filter,
        *,
        expressions: ExpressionSet | None = None,
        clock: Callable[[], float] = _time.time,
    ) -> None:
        matcher = rules.matcher
        if not isinstance(matcher, SnapshotMatcher):
            raise TypeError("a policy needs compiled rules (a snapshot-backed Filter)")
        self.policy = policy.validate(frozenset(rules.categories) | frozenset(matcher.categories))
        self.rules = rules
        self._matcher = matcher
        self._aliases = rules.aliases
        self.expressions = expressions or ExpressionSet({})
        self.rewrites = RewriteSet(policy.rewrites)
        self.clock = clock
        self._zone: tzinfo | None = ZoneInfo(policy.timezone) if policy.timezone else None
        self._plans: dict[tuple[int, str], _Plan] = {}
        self._who: dict[tuple[str | None, str | None, str | None], _Plan] = {}
        self._minute = -1
        self._now = datetime.fromtimestamp(0)
        for name, acl in policy.acls.items():
            for key, branch in (("within", acl.branch), ("else", acl.otherwise)):
                if branch is not None:
                    self._plan_for(name, acl, branch, key)

    # -- who and when ------------------------------------------------------------------

    def _local(self, timestamp: float) -> datetime:
        return (
            datetime.fromtimestamp(timestamp, self._zone)
            if self._zone
            else datetime.fromtimestamp(timestamp)
        )

    def _tick(self, timestamp: float | None) -> None:
        """Set the clock for the next requests (time rules are read to the minute)."""
        stamp = self.clock() if timestamp is None else timestamp
        minute = int(stamp // 60)
        if minute != self._minute:
            self._minute = minute
            self._now = self._local(stamp)
            self._who.clear()

    def source_of(self, who: Who, now: datetime) -> Source | None:
        """The first source matching ``who`` at ``now`` (None: none, the default ACL)."""
        user = normalise_user(who.user)
        name = (who.client_name or "").lower().rstrip(".")
        for source in self.policy.sources:
            if source.addresses is not None and who.client not in source.addresses:
                continue
            if source.users is not None and (user is None or user not in source.users):
                continue
            if source.domains is not None and not (
                name and any(name == d or name.endswith("." + d) for d in source.domains)
            ):
                continue
            if source.time is not None:
                holds = self.policy.times[source.time].holds(now)
                if holds != source.within:
                    continue
            return source
        return None

    def _plan_of(self, who: Who) -> _Plan:
        key = (who.client, who.client_name, who.user)
        plan = self._who.get(key)
        if plan is None:
            if len(self._who) >= _MAX_CACHE:
                self._who.clear()
            plan = self._who[key] = self._resolve(who, self._now)
        return plan

    def _resolve(self, who: Who, now: datetime) -> _Plan:
        source = self.source_of(who, now)
        name = source.name if source is not None else "default"
        acl = self.policy.acls.get(name) or self.policy.default
        branch, key = acl.branch, "within"
        if acl.time is not None and self.policy.times[acl.time].holds(now) != acl.within:
            if acl.otherwise is None:  # out of its time without an else: the default ACL
                acl = self.policy.default
                branch = acl.branch
                if acl.time is not None and self.policy.times[acl.time].holds(now) != acl.within:
                    branch, key = acl.otherwise or acl.branch, "else"
            else:
                branch, key = acl.otherwise, "else"
        plan = self._plan_for(acl.source, acl, branch, key)
        if plan.source != name:
            plan = _Plan(**{**plan.__dict__, "source": name})
        return plan

    def _plan_for(self, acl_name: str, acl: Acl, branch: Branch, key: str) -> _Plan:
        cache_key = (id(branch), acl_name)
        plan = self._plans.get(cache_key)
        if plan is not None:
            return plan
        matcher = self._matcher
        position: dict[str, int] = {}
        rule_backed: list[tuple[int, str]] = []
        checks: list[tuple[int, str]] = []
        for at, entry in enumerate(branch.passes):
            if entry.name in (ALL, NONE, IN_ADDR):
                checks.append((at, entry.name))
                continue
            if entry.name in self.expressions:
                checks.append((at, "expr"))
            category = self._aliases.get(entry.name, entry.name)
            if category not in position:
                position[category] = at
                rule_backed.append((at, entry.name))
        masks_before: list[bytes | None] = []
        for at in range(len(branch.passes) + 1):
            names = [name for i, name in rule_backed if i < at]
            masks_before.append(matcher.category_mask(names) if names else None)
        default = self.policy.acls.get("default")
        redirect = branch.redirect
        if redirect is None and default is not None:
            redirect = default.branch.redirect
        within = None if acl.time is None else key == "within"
        plan = _Plan(
            acl_name,
            acl_name,
            within,
            branch,
            redirect,
            masks_before[-1],
            position,
            masks_before,
            checks,
        )
        self._plans[cache_key] = plan
        return plan

    # -- deciding ------------------------------------------------------------------------

    def decide(self, url: str, who: Who = Who(), at: float | None = None) -> Decision:
        """The decision for one request (``at``: a Unix time, default the clock).

        :class:`~urlsieve.InvalidURL` when the URL cannot be canonicalised.
        """
        result = self.decide_many([url], [who], at)[0]
        if isinstance(result, InvalidURL):
            raise result
        return result

    def decide_many(
        self, urls: Sequence[str], whos: Sequence[Who], at: float | None = None
    ) -> list[Decision | InvalidURL]:
        """Decisions for a batch (one compiled lookup per pass list in the batch); a URL
        that cannot be canonicalised gives its :class:`InvalidURL`, the rest go on."""
        self._tick(at)
        plans = [self._plan_of(who) for who in whos]
        groups: dict[int, list[int]] = {}
        for at_, plan in enumerate(plans):
            groups.setdefault(id(plan), []).append(at_)
        out: list[Decision | InvalidURL | None] = [None] * len(urls)
        for indices in groups.values():
            plan = plans[indices[0]]
            batch = [urls[i] for i in indices]
            if plan.mask is None:  # no rule-backed destination: nothing to look up
                ids: list[int | InvalidURL] = [-1] * len(batch)
                if plan.checks:  # the URL must still be a URL
                    ids = [self._valid(u) for u in batch]
            else:
                ids = self._matcher._ids(batch, plan.mask, None)
            for i, url, rule_id in zip(indices, batch, ids, strict=True):
                out[i] = (
                    rule_id if isinstance(rule_id, InvalidURL) else self._finish(plan, url, rule_id)
                )
        return out  # type: ignore[return-value]

    @staticmethod
    def _valid(url: str) -> int | InvalidURL:
        try:
            parse_url(url)
        except InvalidURL as exc:
            return exc
        return -1

    def _finish(self, plan: _Plan, url: str, rule_id: int) -> Decision:
        """The pass-list entry that decides, from the best rule found among all its
        destinations (``rule_id``, -1: none)."""
        matcher = self._matcher
        found = len(plan.branch.passes)
        best = -1
        while rule_id >= 0:
            category = matcher.provenance(rule_id)[1]
            at = plan.position.get(category, found)
            found, best = at, rule_id
            mask = plan.masks_before[at]
            if mask is None:
                break
            rule_id = matcher._ids([url], mask, None)[0]  # type: ignore[assignment]
        for at, kind in plan.checks:
            if at >= found:
                break
            if (
                kind in (ALL, NONE)
                or (kind == IN_ADDR and _host_is_ip(url))
                or (kind == "expr" and self.expressions.matches(plan.branch.passes[at].name, url))
            ):
                found, best = at, -1
                break
        passes = plan.branch.passes
        if found >= len(passes):  # nothing in the pass list matched: blocked
            return self._block(plan, None, -1)
        entry = passes[found]
        allow = entry.allow if entry.name != NONE else not entry.allow  # none: !all
        if not allow:
            return self._block(plan, entry.name, best)
        return self._pass(plan, url, entry.name, best)

    def _block(self, plan: _Plan, category: str | None, rule_id: int) -> Decision:
        dest = self.policy.dests.get(category) if category else None
        target = dest.redirect if dest is not None and dest.redirect else plan.redirect
        return Decision(BLOCK, plan.source, plan.acl, category, target, None, rule_id, plan.within)

    def _pass(self, plan: _Plan, url: str, category: str, rule_id: int) -> Decision:
        rewrite = plan.branch.rewrite
        if rewrite is not None:
            changed = self.rewrites.apply(rewrite, url)
            if changed is not None:
                new_url, status = changed
                return Decision(
                    REWRITE, plan.source, plan.acl, category, new_url, status, rule_id, plan.within
                )
        return Decision(PASS, plan.source, plan.acl, category, None, None, rule_id, plan.within)


def _host_is_ip(url: str) -> bool:
    try:
        return parse_url(url).is_ip
    except InvalidURL:
        return False


def parse_when(text: str | None, zone: str | None = None) -> float | None:
    """``2026-05-01T10:00`` (ISO 8601, in ``zone`` or local time unless it has an offset)
    → a Unix time; None → None (now)."""
    if text is None:
        return None
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(f"{text!r}: write a date and time as 2026-05-01T10:00") from None
    if when.tzinfo is None and zone:
        when = when.replace(tzinfo=ZoneInfo(zone))
    return when.timestamp()


def describe_request(engine: PolicyEngine, who: Who, at: float | None = None) -> list[str]:
    """Lines saying which source, ACL, time rule and pass list apply to ``who`` at ``at``."""
    engine._tick(at)
    now = engine._now
    policy = engine.policy
    source = engine.source_of(who, now)
    plan = engine._resolve(who, now)
    lines = [
        f"when: {now:%Y-%m-%d %H:%M %A} ({policy.timezone or 'local time'})",
        f"client: {who.client or '-'}  name: {who.client_name or '-'}  user: {who.user or '-'}",
        f"source: {source.name if source else 'none matches: the default ACL'}"
        + (f"  ({source.where})" if source is not None and source.where else ""),
    ]
    acl = policy.acls.get(plan.acl)
    if acl is not None and acl.time is not None:
        holds = policy.times[acl.time].holds(now)
        side = "within" if acl.within else "outside"
        now_text = "holds" if holds else "does not hold"
        chosen = "its pass list" if plan.within else "the else pass list"
        lines.append(
            f"acl: {plan.acl}, {side} time rule {acl.time!r} (it {now_text} now): {chosen}"
        )
    else:
        lines.append(f"acl: {plan.acl}")
    lines.append("pass list: " + " ".join(str(e) for e in plan.branch.passes))
    blocked = [e.name for e in plan.branch.passes if not e.allow]
    lines.append(f"categories blocked: {', '.join(blocked) or '(none)'}")
    if plan.redirect:
        lines.append(f"block page: {plan.redirect}")
    if plan.branch.rewrite:
        lines.append(f"rewrite: {plan.branch.rewrite}")
    return lines


def explain_decision(
    engine: PolicyEngine, url: str, who: Who, at: float | None = None
) -> list[str]:
    """:func:`describe_request`, then the decision for ``url`` and the rule that made it."""
    lines = describe_request(engine, who, at)
    decision = engine.decide(url, who, at)
    lines.append(f"url: {url}")
    if decision.rule_id >= 0:
        rule = engine.rules.rule(decision.rule_id)
        lines.append(f"matched: {rule.pattern!r} in {decision.category} ({rule.where})")
    elif decision.category:
        lines.append(f"matched: {decision.category}")
    else:
        lines.append("matched: nothing in the pass list (blocked)")
    verdict = {"pass": "PASS", "block": "BLOCK", "rewrite": "REWRITE"}[decision.action]
    target = decision.target
    if decision.action == BLOCK and target:
        from urlsieve.policy.pages import render_page, split_status

        status, template = split_status(target)
        target = render_page(
            template,
            url=url,
            client=who.client,
            client_name=who.client_name,
            user=who.user,
            source=decision.source,
            target=decision.category,
        ) + (f" (status {status})" if status else "")
    detail = f" → {target}" if target else ""
    lines.append(f"decision: {verdict}{detail}")
    return lines
