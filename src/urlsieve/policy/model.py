"""The policy model: destinations, sources, time rules, ACLs and rewrites.

A :class:`Policy` says which categories judge a request, from who asks (client
address, client host name, user) and when. It is squidGuard's model:

- a *source* is a group of clients; its criteria are combined with AND (an
  address in its addresses *and* a user in its users, when it has both), and the
  first source in order that matches the request is the request's source; a
  source limited to a time rule (``within``/``outside``) does not match outside it;
- a *time rule* is a set of weekly ranges and dates (:mod:`.timerules`);
- an *ACL* per source says what passes: ``within``/``outside`` a time rule it
  uses its pass list, else its ``else`` pass list. A pass list is read left to
  right and the first entry that matches the URL decides: ``dest`` passes,
  ``!dest`` blocks, ``all`` passes anything, ``none`` blocks anything,
  ``in-addr`` matches URLs whose host is an IP address; a URL no entry matches
  passes, and an ACL without a pass list uses the default ACL's (both as squidGuard
  does). A request whose source has no ACL, or that matches no source, is judged by
  the ``default`` ACL;
- a *destination* is a category: the rules of the compiled lists with that
  category, and the regular expressions of its expression list;
- a *rewrite* is a list of substitutions applied to the URLs an ACL passes.

Everything is checked when the policy is built (:meth:`Policy.validate`): an ACL
naming an unknown destination, source, rewrite or time rule is an error then,
never at request time.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from urlsieve.exceptions import ConfigError
from urlsieve.policy.clients import AddressSet
from urlsieve.policy.timerules import TimeRule

__all__ = [
    "ALL",
    "IN_ADDR",
    "LOG_OWNERS",
    "NONE",
    "Acl",
    "Branch",
    "Dest",
    "LogSpec",
    "PassEntry",
    "Policy",
    "PolicyError",
    "Rewrite",
    "Source",
    "Substitution",
]

ALL, NONE, IN_ADDR = "all", "none", "in-addr"
_SPECIAL = frozenset({ALL, NONE, IN_ADDR})


class PolicyError(ConfigError):
    """A policy that cannot be built; the message starts with ``file:line:`` where known."""

    def __init__(self, reason: str, where: str | None = None) -> None:
        self.reason = reason
        self.where = where
        super().__init__(f"{where}: {reason}" if where else reason)


@dataclass(frozen=True)
class Dest:
    """A destination: a category of the compiled lists (rules with ``category == name``)."""

    name: str
    domainlist: str | None = None
    urllist: str | None = None
    expressionlist: str | None = None
    #: The block page for requests this destination blocks (wins over the ACL's).
    redirect: str | None = None
    where: str | None = None


@dataclass(frozen=True)
class Source:
    """A group of clients; every criterion it has must hold (AND)."""

    name: str
    addresses: AddressSet | None = None
    users: frozenset[str] | None = None
    #: Client host names: a name matches itself and every name under it.
    domains: tuple[str, ...] | None = None
    time: str | None = None
    within: bool = True
    where: str | None = None


@dataclass(frozen=True)
class PassEntry:
    """One pass-list entry: ``name`` (a destination, ``all``, ``none`` or ``in-addr``)
    passes (``allow``) or, written ``!name``, blocks; written ``?name`` it warns (the
    warning page, then the site passes for a while once the client chose to continue)."""

    name: str
    allow: bool
    warn: bool = False

    @classmethod
    def parse(cls, token: str) -> PassEntry:
        name = token[1:] if token[:1] in ("!", "?") else token
        if not name or name[:1] in ("!", "?"):
            raise ValueError(f"{token!r}: write name, !name or ?name in a pass list")
        return cls(name, token[:1] not in ("!", "?"), token.startswith("?"))

    def __str__(self) -> str:
        return self.name if self.allow else f"{'?' if self.warn else '!'}{self.name}"


@dataclass(frozen=True)
class Branch:
    """What an ACL does in one case (within its time, or else)."""

    passes: tuple[PassEntry, ...]
    redirect: str | None = None
    rewrite: str | None = None


@dataclass(frozen=True)
class Acl:
    """The ACL of one source (``source == "default"``: the default ACL)."""

    source: str
    branch: Branch
    time: str | None = None
    within: bool = True
    otherwise: Branch | None = None
    where: str | None = None


@dataclass(frozen=True)
class Substitution:
    """``s@pattern@replacement@flags``: ``i`` ignores case, ``r``/``R`` answer with a 302/301
    redirect instead of rewriting in place, ``g`` replaces every match; the first
    substitution that matches applies."""

    pattern: str
    replacement: str
    ignore_case: bool = False
    redirect: int | None = None  # 301 or 302
    every: bool = False  # the g flag


@dataclass(frozen=True)
class Rewrite:
    name: str
    substitutions: tuple[Substitution, ...] = ()
    where: str | None = None


@dataclass(frozen=True)
class LogSpec:
    """A squidGuard ``log`` statement: the file requests are logged to (``anonymous``: no
    user names; ``verbose``: passed requests too, not only blocks and rewrites)."""

    path: str
    anonymous: bool = False
    verbose: bool = False


#: Where a ``log`` statement may be: a destination, a source, an ACL, a rewrite.
LOG_OWNERS = ("dest", "src", "acl", "rew")


@dataclass
class Policy:
    """A whole policy; :meth:`validate` checks every name it uses."""

    dests: dict[str, Dest] = field(default_factory=dict)
    sources: list[Source] = field(default_factory=list)
    times: dict[str, TimeRule] = field(default_factory=dict)
    acls: dict[str, Acl] = field(default_factory=dict)
    rewrites: dict[str, Rewrite] = field(default_factory=dict)
    #: IANA name of the time zone time rules are read in (None: the local one).
    timezone: str | None = None
    #: Where ``warn`` grants are kept (``sqlite:PATH``, ``valkey://…``, ``memory:``).
    warn_store: str | None = None
    #: How long a "continue" lets a client through to a site.
    warn_seconds: int = 3600
    #: The warning page (squidGuard's substitutions; it links to the service's /v1/continue).
    warn_page: str | None = None
    origin: str = "<policy>"
    #: squidGuard's ``log`` statements by ``(owner kind, name)`` (:data:`LOG_OWNERS`).
    logs: dict[tuple[str, str], LogSpec] = field(default_factory=dict)
    #: ``file:line: reason`` for each list line or entry not loaded (the rest loaded).
    skipped: list[str] = field(default_factory=list)
    #: ``file:line: text`` for each list entry read in a way worth knowing (as squidGuard
    #: reads it, or where urlsieve differs on purpose).
    notes: list[str] = field(default_factory=list)

    def report(self) -> list[str]:
        """What reading the policy's files skipped and noted, a line each (``skipped: …``,
        ``note: …``): logged once when a policy loads, printed by ``config check`` and
        ``import squidguard``."""
        return [f"skipped: {line}" for line in self.skipped] + [
            f"note: {line}" for line in self.notes
        ]

    @property
    def default(self) -> Acl:
        return self.acls["default"]

    def validate(self, categories: frozenset[str] | None = None) -> Policy:
        """Raise :class:`PolicyError` for any name an ACL, source or destination uses and
        the policy does not define (``categories``: the compiled lists' categories, which
        are destinations too)."""
        if "default" not in self.acls:
            raise PolicyError("no default ACL: add one (e.g. 'default { pass all }')", self.origin)
        names = set(self.dests) | set(categories or ())
        seen: set[str] = set()
        for source in self.sources:
            if source.name in seen:
                raise PolicyError(f"source {source.name!r} is defined twice", source.where)
            seen.add(source.name)
            if source.time is not None and source.time not in self.times:
                raise PolicyError(
                    f"source {source.name!r} uses the undefined time rule {source.time!r}",
                    source.where,
                )
        for acl in self.acls.values():
            if acl.source != "default" and acl.source not in seen:
                raise PolicyError(f"ACL for the undefined source {acl.source!r}", acl.where)
            if acl.time is not None and acl.time not in self.times:
                raise PolicyError(
                    f"ACL {acl.source!r} uses the undefined time rule {acl.time!r}", acl.where
                )
            for branch in (acl.branch, acl.otherwise):
                if branch is None:
                    continue
                for entry in branch.passes:
                    if entry.warn and (self.warn_store is None or self.warn_page is None):
                        raise PolicyError(
                            f"ACL {acl.source!r} warns on {entry.name!r}: set warn_store "
                            "(e.g. 'sqlite:/var/lib/urlsieve/grants.db', shared by the helper "
                            "children) and warn_page in [policy]",
                            acl.where,
                        )
                    if entry.warn and entry.name in _SPECIAL:
                        raise PolicyError(f"?{entry.name}: warn takes a destination", acl.where)
                    if entry.name not in _SPECIAL and entry.name not in names:
                        raise PolicyError(
                            f"ACL {acl.source!r} passes the undefined destination "
                            f"{entry.name!r} (defined: {', '.join(sorted(names)) or 'none'})",
                            acl.where,
                        )
                if branch.rewrite is not None and branch.rewrite not in self.rewrites:
                    raise PolicyError(
                        f"ACL {acl.source!r} uses the undefined rewrite {branch.rewrite!r}",
                        acl.where,
                    )
        return self
