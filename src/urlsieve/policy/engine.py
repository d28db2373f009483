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

Compiled (``policy_decide`` in ``urlsieve._speedups``), a batch is one call: per request
the pass list's row of the cache, the lookup, the walk down the pass list (a second
lookup restricted to the entries before the one found, the ``all``, ``none`` and
``in-addr`` entries in front of it) and, for the usual outcomes, the decision itself,
shared by every request with that outcome (:meth:`PolicyEngine._tables` lays the pass
lists out for it). What it leaves (a rule-backed block, a rewrite, a warning, an
expression list in front of the entry found, a URL off the canonical fast path) is
finished here. :meth:`PolicyEngine.decide_many_py` is its reference, request by request.
"""

from __future__ import annotations

import contextlib
import ipaddress
import re
import time as _time
from array import array
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, tzinfo
from typing import NamedTuple, cast
from zoneinfo import ZoneInfo

from urlsieve._accel import speedups
from urlsieve.exceptions import ConfigError, InvalidURL, StoreUnavailable
from urlsieve.filter import Filter
from urlsieve.match.snapshot import CompiledImage, SnapshotMatcher
from urlsieve.policy.clients import normalise_user
from urlsieve.policy.expressions import ExpressionSet
from urlsieve.policy.model import ALL, IN_ADDR, NONE, Acl, Branch, Policy, Source
from urlsieve.policy.rewrite import RewriteSet
from urlsieve.policy.warn import MAX_GRANT_SECONDS, GrantStore, grant_key, open_grants, site_of
from urlsieve.url import parse_url

__all__ = ["BLOCK", "PASS", "REWRITE", "WARN", "Decision", "PolicyEngine", "Who"]

PASS, BLOCK, REWRITE, WARN = "pass", "block", "rewrite", "warn"
_MAX_CACHE = 1 << 16
#: The compiled batch (absent without the extension, or in an older build of it).
_policy_decide = getattr(speedups, "policy_decide", None)
# The checks of a pass list as the compiled walk reads them.
_CHECK_KINDS = {ALL: 0, NONE: 1, IN_ADDR: 2}
_CHECK_EXPR = 3
# What the compiled walk leaves for Python (its "found": the entry that decides, or these).
_OFF_FAST_PATH = -2  # the URL is parsed and decided by the reference
_EXPRESSIONS = -3  # an expression list is in front of the entry found (best: the lookup's id)


class Who(NamedTuple):
    """Who asks: the fields Squid sends (address, host name, user; None when absent).
    A tuple: it is the key of the per-client cache, hashed on every request."""

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


#: A request without client fields.
NOBODY = Who()

#: What the compiled batch reads (PolicyEngine._tables): table, plan_at, shared, needles.
_Tables = tuple[
    "array[int]", "array[int]", list[list["Decision | None"]], list[tuple[bytes, ...] | None]
]


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
    size: int = 0  # entries in the pass list
    row: int = 0  # its mask's row in PolicyEngine._masks
    passes: list[Decision] = field(default_factory=list)  # index → its plain pass decision
    #: The pass list checks in-addr or warns: its URLs' canonical forms are needed.
    needs_form: bool = False
    index: int = -1  # in PolicyEngine._plan_list: what the compiled batch knows it by
    #: found → the decision every request with no rule and that outcome shares (found =
    #: size: nothing in the pass list matched); None where it depends on the request
    shared: list[Decision | None] = field(default_factory=list)


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
        grants: GrantStore | None = None,
    ) -> None:
        matcher = rules.matcher
        if not isinstance(matcher, SnapshotMatcher):
            raise TypeError("a policy needs compiled rules (a snapshot-backed Filter)")
        self.policy = policy.validate(frozenset(rules.categories) | frozenset(matcher.categories))
        self.rules = rules
        self._matcher = matcher
        # The snapshot's own aliases: the ones its category masks and provenance use.
        self._aliases: dict[str, str] = {**rules.aliases, **matcher.aliases}
        self.expressions = expressions or ExpressionSet({})
        self.rewrites = RewriteSet(policy.rewrites)
        self.clock = clock
        if grants is None and policy.warn_store is not None:
            grants = open_grants(policy.warn_store)
        self.grants = grants
        #: Grant lookups that failed (the store unreachable): the warning was shown again.
        self.grant_errors = 0
        self._zone: tzinfo | None = ZoneInfo(policy.timezone) if policy.timezone else None
        self._plans: dict[tuple[int, str, str], _Plan] = {}
        self._plan_list: list[_Plan] = []
        self._who: dict[Who, int] = {}  # → the index of its plan
        self._renamed: dict[tuple[int, str], _Plan] = {}
        self._no_category = bytes(len(matcher.categories))
        self._rows: dict[bytes, int] = {}
        self._masks = b""
        self._categories: dict[int, str] = {}
        self._compiled: _Tables | None = None
        self._image: CompiledImage = matcher.compiled(None)  # what the compiled batch reads
        #: (plan index, entry, rule) → the block decision, as the compiled batch leaves them
        self._blocks: dict[tuple[int, int, int], Decision] = {}
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
            # The time first, then the cache, then the minute: a thread deciding meanwhile
            # sees either the old minute with its plans or the new time.
            self._now = self._local(stamp)
            self._who.clear()
            self._minute = minute

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
        return self._plan_list[self._index_of(who)]

    def _index_of(self, who: Who) -> int:
        """The index of ``who``'s plan at the current minute (the compiled batch calls this
        for a client it does not find in ``_who``)."""
        index = self._who.get(who)
        if index is None:
            if len(self._who) >= _MAX_CACHE:
                self._who.clear()
            index = self._who[who] = self._resolve(who, self._now).index
        return index

    def _register(self, plan: _Plan) -> _Plan:
        """Give a new plan its index and shared decisions (the compiled tables are laid out
        again at the next batch)."""
        plan.passes = _pass_decisions(plan)
        plan.shared = self._shared_decisions(plan)
        plan.index = len(self._plan_list)
        self._plan_list.append(plan)
        self._compiled = None
        return plan

    def _shared_decisions(self, plan: _Plan) -> list[Decision | None]:
        """found → the decision of a request with no rule (best -1) and that outcome, when
        it depends on nothing else (no warning to grant; under a rewrite, a URL the rewrite
        cannot change: see ``needles`` in :meth:`_tables`)."""
        out: list[Decision | None] = [
            None if e.warn else plan.passes[at] for at, e in enumerate(plan.branch.passes)
        ]
        out.append(plan.passes[plan.size])
        for at, entry in enumerate(plan.branch.passes):
            allow = entry.allow if entry.name != NONE else not entry.allow  # none: !all
            if not allow and not entry.warn:
                out[at] = self._block(plan, entry.name, -1)
        return out

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
        if plan.source != name:  # the default ACL of a source without its own: named so
            plan = self._renamed.get((id(plan), name))  # type: ignore[assignment]
            if plan is None:
                base = self._plan_for(acl.source, acl, branch, key)
                plan = self._register(_Plan(**{**base.__dict__, "source": name}))
                self._renamed[(id(base), name)] = plan
        return plan

    def _plan_for(self, acl_name: str, acl: Acl, branch: Branch, key: str) -> _Plan:
        cache_key = (id(branch), acl_name, key)
        plan = self._plans.get(cache_key)
        if plan is not None:
            return plan
        default = self.policy.acls.get("default")
        if not branch.passes and default is not None and default.branch.passes:
            # An ACL without a pass list takes the default ACL's, with its own page.
            branch = Branch(default.branch.passes, branch.redirect, branch.rewrite)
        matcher = self._matcher
        position: dict[str, int] = {}
        rule_backed: list[tuple[int, str]] = []
        checks: list[tuple[int, str]] = []
        for at, entry in enumerate(branch.passes):
            if entry.name in (ALL, NONE, IN_ADDR):
                checks.append((at, entry.name))
                continue
            category = self._aliases.get(entry.name, entry.name)
            for named in dict.fromkeys((entry.name, category)):  # its own, or its alias's
                if named in self.expressions:
                    checks.append((at, "expr:" + named))
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
            len(branch.passes),
        )
        plan.row = self._add_row(plan.mask)
        plan.needs_form = any(kind == IN_ADDR for _at, kind in checks) or any(
            entry.warn for entry in branch.passes
        )
        self._plans[cache_key] = self._register(plan)
        return plan

    def _add_row(self, mask: bytes | None) -> int:
        """The row of ``mask`` in the masks of every pass list (None: no category)."""
        row = mask if mask is not None else self._no_category
        at = self._rows.get(row)
        if at is None:
            at = self._rows[row] = len(self._rows)
            self._masks = b"".join(self._rows)
        return at

    # -- deciding ------------------------------------------------------------------------

    def decide(self, url: str, who: Who = NOBODY, at: float | None = None) -> Decision:
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
        """Decisions for a batch, in one compiled lookup whatever the pass lists (each URL
        with its client's categories); a URL that cannot be canonicalised gives its
        :class:`InvalidURL`, the rest go on."""
        if _policy_decide is None:
            return self.decide_many_py(urls, whos, at)
        self._tick(at)
        batch = urls if type(urls) is list else list(urls)
        people = whos if type(whos) is list else list(whos)
        if len(batch) != len(people):
            raise ValueError(f"{len(batch)} URLs but {len(people)} clients")
        table, plan_at, shared, needles = self._tables()
        image = self._image
        try:
            found: tuple[list[Decision | InvalidURL | None], list[tuple[int, int, int, int]]] = (
                _policy_decide(
                    image.view,
                    image.layout,
                    batch,
                    people,
                    self._who,
                    self._index_of,
                    table,
                    plan_at,
                    self._masks,
                    len(self._no_category),
                    shared,
                    needles,
                )
            )
        except TypeError:  # a URL that is not a str: the reference parses each
            return self.decide_many_py(batch, people, at)
        decisions, rest = found
        plans = self._plan_list
        blocks = self._blocks
        for k, index, outcome, best in rest:  # what the compiled walk leaves
            key = (index, outcome, best)
            decision: Decision | InvalidURL | None = blocks.get(key)
            if decision is None:
                decision = self._leftover(plans[index], batch[k], people[k], outcome, best)
                # a block depends on nothing but its plan, entry and rule: kept
                if outcome >= 0 and isinstance(decision, Decision) and decision.action == BLOCK:
                    if len(blocks) >= _MAX_CACHE:
                        blocks.clear()
                    blocks[key] = decision
            decisions[k] = decision
        return cast("list[Decision | InvalidURL]", decisions)  # (every None filled above)

    def decide_many_py(
        self, urls: Sequence[str], whos: Sequence[Who], at: float | None = None
    ) -> list[Decision | InvalidURL]:
        """:meth:`decide_many` request by request in Python: the reference of the compiled
        batch (the lookups are the matcher's batch path, with a mask per request)."""
        self._tick(at)
        plan_of = self._plan_of
        plans = [plan_of(who) for who in whos]
        rows = [plan.row for plan in plans]
        # The canonical forms tell an IP host (in-addr) and a warned site without parsing
        # again; the compiled call builds them only when a pass list of the batch needs them.
        forms: list[str | None] = [None] * len(urls)
        needed = any(plan.needs_form for plan in plans)
        ids = self._matcher.ids_by_rows(urls, self._masks, rows, forms if needed else None)
        finish = self._finish
        return [
            rule_id if isinstance(rule_id, InvalidURL) else finish(plan, url, rule_id, form, who)
            for plan, url, rule_id, form, who in zip(plans, urls, ids, forms, whos, strict=True)
        ]

    def _leftover(
        self, plan: _Plan, url: str, who: Who, outcome: int, best: int
    ) -> Decision | InvalidURL:
        """A request the compiled batch left: decided from its walk (``outcome`` the entry
        found, ``best`` its rule), or by the reference from the start."""
        if outcome >= 0:
            return self._decision(plan, url, outcome, best, who, form=None)
        if outcome == _EXPRESSIONS:  # best: the lookup's rule; the walk is the reference's
            return self._finish(plan, url, best, self._form(url) if plan.needs_form else None, who)
        forms: list[str | None] = [None]
        rule_id = self._matcher.ids_by_rows([url], self._masks, [plan.row], forms)[0]
        if isinstance(rule_id, InvalidURL):
            return rule_id
        return self._finish(plan, url, rule_id, forms[0], who)

    @staticmethod
    def _form(url: str) -> str | None:
        try:
            return parse_url(url).canonical
        except InvalidURL:
            return None

    def _tables(self) -> _Tables:
        """The pass lists as the compiled batch reads them: per plan (``plan_at[index]``
        where its block starts in ``table``, int64s) its size, its mask row's offset, the
        category count, the count of checks; per category id its first pass-list index
        (size: none); per pass-list index the offset of the mask of the rule-backed entries
        before it (-1: none); per check its index and kind (all, none, in-addr, an
        expression list). ``shared``: each plan's shared decisions; ``needles``: per plan,
        None without a rewrite, else the strings one of which a URL its rewrite changes holds
        (:meth:`RewriteSet.needles`; empty: any URL may be changed), so that a URL holding
        none takes the shared decision."""
        compiled = self._compiled
        if compiled is not None:
            return compiled
        stride = len(self._no_category)
        ids = {name: at for at, name in enumerate(self._matcher.categories)}
        table: array[int] = array("q")
        plan_at: array[int] = array("q")
        shared: list[list[Decision | None]] = []
        needles: list[tuple[bytes, ...] | None] = []
        for plan in list(self._plan_list):
            positions = [plan.size] * stride
            for name, at in plan.position.items():
                if name in ids:
                    positions[ids[name]] = at
            before = [-1 if m is None else self._add_row(m) * stride for m in plan.masks_before]
            checks: list[int] = []
            for at, kind in plan.checks:
                checks += (at, _CHECK_KINDS.get(kind, _CHECK_EXPR))
            plan_at.append(len(table))
            table.extend([plan.size, plan.row * stride, stride, len(plan.checks)])
            table.extend(positions + before + checks)
            shared.append(plan.shared)
            rewrite = plan.branch.rewrite
            needles.append(None if rewrite is None else self.rewrites.needles(rewrite))
        compiled = self._compiled = (table, plan_at, shared, needles)
        return compiled

    def _granted(self, who: Who, form: str | None) -> bool:
        """Whether ``who`` continued past the warning for the site: a grant to its user or
        to its address (a browser calling /v1/continue is known by its address only)."""
        if self.grants is None or form is None:
            return False
        host = form.partition("://")[2].partition("/")[0]
        try:
            return any(self.grants.granted(grant_key(i, host)) for i in identities(who))
        except StoreUnavailable:
            self.grant_errors += 1
            return False

    def grant(self, url: str, who: Who, seconds: int | None = None) -> tuple[str, str]:
        """Let ``who`` through the warning for ``url``'s site (the client chose to
        continue); returns the site and the URL's canonical form. :class:`InvalidURL`
        for a URL that is none, :class:`ConfigError` when the policy has no warn store,
        :class:`~urlsieve.exceptions.StoreUnavailable` when it cannot be reached."""
        if self.grants is None:
            raise ConfigError("this policy has no warn_store: nothing to continue")
        parts = parse_url(url)
        span = seconds if seconds is not None else self.policy.warn_seconds
        keys = identities(who)
        if not keys:
            raise ConfigError("nobody to grant: the request names no user and no address")
        self.grants.grant(grant_key(keys[0], parts.host), min(span, MAX_GRANT_SECONDS))
        return site_of(parts.host), parts.canonical

    def _category(self, rule_id: int) -> str:
        category = self._categories.get(rule_id)
        if category is None:
            if len(self._categories) >= _MAX_CACHE:
                self._categories.clear()
            category = self._categories[rule_id] = self._matcher.provenance(rule_id)[1]
        return category

    def _finish(
        self, plan: _Plan, url: str, rule_id: int, form: str | None, who: Who = NOBODY
    ) -> Decision:
        """The pass-list entry that decides, from the best rule found among all its
        destinations (``rule_id``, -1: none); ``form`` is the URL's canonical form. The
        reference of the compiled walk (``policy_decide``)."""
        found = plan.size
        best = -1
        while rule_id >= 0:
            at = plan.position.get(self._category(rule_id), found)
            if at >= found:  # never again the same entry: a rule outside the mask ends it
                break
            found, best = at, rule_id
            mask = plan.masks_before[at]
            if mask is None:
                break
            again = self._matcher.ids_by_rows([url], mask, [0])[0]
            rule_id = again if isinstance(again, int) else -1
        for at, kind in plan.checks:
            if at >= found:
                break
            if (
                kind in (ALL, NONE)
                or (kind == IN_ADDR and _host_is_ip(form))
                or (kind[:5] == "expr:" and self.expressions.matches(kind[5:], url))
            ):
                found, best = at, -1
                break
        return self._decision(plan, url, found, best, who, form=form)

    def _decision(
        self, plan: _Plan, url: str, found: int, best: int, who: Who, *, form: str | None
    ) -> Decision:
        """The decision of the pass-list entry ``found`` (``plan.size``: none) with rule
        ``best`` (-1: none) for a request."""
        if found >= plan.size:  # nothing in the pass list matched: it passes (squidGuard)
            return self._pass(plan, url, None, best, plan.size)
        entry = plan.branch.passes[found]
        if entry.warn:
            if self._granted(who, form if form is not None else self._form(url)):
                return self._pass(plan, url, entry.name, best, found)
            page = self.policy.warn_page
            return Decision(WARN, plan.source, plan.acl, entry.name, page, None, best, plan.within)
        allow = entry.allow if entry.name != NONE else not entry.allow  # none: !all
        if not allow:
            return self._block(plan, entry.name, best)
        if best < 0 and plan.branch.rewrite is None:  # the usual pass: one shared decision
            return plan.passes[found]
        return self._pass(plan, url, entry.name, best, found)

    def _block(self, plan: _Plan, category: str | None, rule_id: int) -> Decision:
        dest = self.policy.dests.get(category) if category else None
        target = dest.redirect if dest is not None and dest.redirect else plan.redirect
        return Decision(BLOCK, plan.source, plan.acl, category, target, None, rule_id, plan.within)

    def _pass(
        self, plan: _Plan, url: str, category: str | None, rule_id: int, found: int
    ) -> Decision:
        rewrite = plan.branch.rewrite
        if rewrite is not None:
            changed = self.rewrites.apply(rewrite, url)
            if changed is not None:
                new_url, status = changed
                return Decision(
                    REWRITE, plan.source, plan.acl, category, new_url, status, rule_id, plan.within
                )
        if rule_id < 0:  # the pass decision of that entry (found = size: of none), shared
            return plan.passes[found]
        return Decision(PASS, plan.source, plan.acl, category, None, None, rule_id, plan.within)


_IPV4 = re.compile(r"[0-9]{1,3}(?:\.[0-9]{1,3}){3}")


def _host_is_ip(canonical: str | None) -> bool:
    """Whether a canonical URL's host is an IP address (canonical hosts are dotted quads or
    bracketed IPv6 when they are addresses, whatever the spelling asked)."""
    if canonical is None:
        return False
    host = canonical.partition("://")[2].partition("/")[0]
    if host[-1:].isdigit():  # a name's last label is never all digits in canonical form
        return _IPV4.fullmatch(host) is not None
    return host.startswith("[")


def identities(who: Who) -> list[str]:
    """Who a grant is for, most specific first: ``user:NAME`` (normalised as user lists
    are), then ``addr:ADDRESS`` (an IPv4-mapped IPv6 address as IPv4)."""
    out = []
    user = normalise_user(who.user)
    if user:
        out.append(f"user:{user}")
    if who.client:
        address = who.client.strip("[]")
        with contextlib.suppress(ValueError):
            ip = ipaddress.ip_address(address)
            mapped = ip.ipv4_mapped if ip.version == 6 else None
            address = str(mapped or ip)
        out.append(f"addr:{address}")
    return out


def _pass_decisions(plan: _Plan) -> list[Decision]:
    """Per pass-list entry its plain pass decision, then (at ``plan.size``) the pass of a
    request that no entry matched."""
    return [
        *(
            Decision(PASS, plan.source, plan.acl, entry.name, None, None, -1, plan.within)
            for entry in plan.branch.passes
        ),
        Decision(PASS, plan.source, plan.acl, None, None, None, -1, plan.within),
    ]


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
    matching = engine.rules.matching_categories(url, None)
    matching += [
        name
        for name in engine.policy.dests
        if name in engine.expressions
        and engine.expressions.matches(name, url)
        and name not in matching
    ]
    lines.append(f"categories matching: {', '.join(matching) or 'none'}")
    if decision.rule_id >= 0:
        rule = engine.rules.rule(decision.rule_id)
        lines.append(f"matched: {rule.pattern!r} in {decision.category} ({rule.where})")
    elif decision.category:
        lines.append(f"matched: {decision.category}")
    else:
        lines.append("matched: nothing in the pass list (blocked)")
    verdict = decision.action.upper()
    target = decision.target
    if decision.action in (BLOCK, WARN) and target:
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
