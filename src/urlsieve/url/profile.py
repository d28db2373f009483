"""Canonicalisation profiles: named, versioned tuples of steps.

A profile changes behaviour by adding or removing a step, never by a flag
threaded through the parser. :data:`FILTER` is Safe Browsing
canonicalisation (the query kept as it is, unescaped and re-escaped);
:func:`crawler_profile` adds query sorting and tracking-parameter removal
for de-duplication. The profile's ``ident`` (``name/version``) is written
into every persistent store so that a store is never read under other rules.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from urlsieve.url import host as _host
from urlsieve.url import path as _path

__all__ = [
    "CRAWLER",
    "DropParameters",
    "FILTER",
    "PROFILES",
    "Profile",
    "QueryPlan",
    "TRACKING_PARAMETERS",
    "alias_host",
    "crawler_profile",
    "drop_parameters",
    "sort_query",
]

HostStep = Callable[[str], str]
BytesStep = Callable[[bytes], bytes]

DEFAULT_HOST_STEPS: tuple[HostStep, ...] = (
    _host.unescape_host,
    _host.map_idn,
    _host.strip_dots,
    _host.check_host_chars,
    _host.normalise_ipv4,
    _host.punycode,
)
DEFAULT_PATH_STEPS: tuple[BytesStep, ...] = (_path.unescape, _path.collapse_path, _path.escape)
DEFAULT_QUERY_STEPS: tuple[BytesStep, ...] = (_path.unescape, _path.escape)

#: Query parameters that identify a campaign or a click, not a resource.
TRACKING_PARAMETERS: tuple[str, ...] = (
    "utm_*",
    "gclid",
    "dclid",
    "fbclid",
    "msclkid",
    "mc_cid",
    "mc_eid",
    "_ga",
    "yclid",
    "igshid",
)


@dataclass(frozen=True)
class Profile:
    """A named, versioned canonicalisation pipeline.

    ``host_steps`` run on the host text, ``path_steps`` and ``query_steps``
    on bytes and must end with :func:`urlsieve.url.path.escape`. With
    ``keep_query`` false the query is dropped; with ``drop_empty_query``
    a query that the steps empty (``?utm_source=x``) disappears with its ``?``.
    With ``keep_port`` a port other than the scheme's default stays in the
    canonical URL (the filter drops every port: a blocked host is blocked on
    every port; to a crawler ``:8080`` is another server).
    """

    name: str
    version: int
    host_steps: tuple[HostStep, ...] = DEFAULT_HOST_STEPS
    path_steps: tuple[BytesStep, ...] = DEFAULT_PATH_STEPS
    query_steps: tuple[BytesStep, ...] = DEFAULT_QUERY_STEPS
    keep_query: bool = True
    drop_empty_query: bool = False
    keep_port: bool = False
    # Whether an already-canonical URL may skip the steps (derived, not passed).
    fast_path: bool = field(init=False, repr=False, compare=False)
    fast_query: bool = field(init=False, repr=False, compare=False)
    # The query steps as the compiled single-URL path takes them (derived; see query_plan).
    query_plan: QueryPlan | None = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        default = self.host_steps == DEFAULT_HOST_STEPS and self.path_steps == DEFAULT_PATH_STEPS
        object.__setattr__(self, "fast_path", default)
        object.__setattr__(
            self,
            "fast_query",
            # An empty query that the profile drops is a change the fast path never makes.
            self.keep_query
            and self.query_steps == DEFAULT_QUERY_STEPS
            and not self.drop_empty_query,
        )
        object.__setattr__(self, "query_plan", _query_plan(self))

    @property
    def ident(self) -> str:
        """``name/version``, as stored in persistent store headers."""
        return f"{self.name}/{self.version}"


#: ``(drop, names, prefixes, sort, drop_empty)``: the query steps unescape, [drop], [sort],
#: escape, for ``urlsieve._speedups.url_key`` (which does them on the canonical query).
QueryPlan = tuple[bool, tuple[bytes, ...], tuple[bytes, ...], bool, bool]


def _query_plan(profile: Profile) -> QueryPlan | None:
    """The plan of a profile whose query steps are unescape, an optional
    :func:`drop_parameters`, an optional :func:`sort_query`, escape (the crawler's),
    on the default host and path steps; None for any other (and for the filter's, which
    the compiled path does without a plan)."""
    steps = profile.query_steps
    if (
        not profile.fast_path
        or profile.fast_query
        or not profile.keep_query
        or len(steps) < 3
        or steps[0] is not _path.unescape
        or steps[-1] is not _path.escape
    ):
        return None
    middle = list(steps[1:-1])
    drop: DropParameters | None = None
    if middle and isinstance(middle[0], DropParameters):
        drop = middle[0]
        middle.pop(0)
    sort = bool(middle) and middle[0] is sort_query
    if sort:
        middle.pop(0)
    if middle:
        return None
    names = tuple(sorted(drop.names)) if drop is not None else ()
    prefixes = drop.prefixes if drop is not None else ()
    return (drop is not None, names, prefixes, sort, profile.drop_empty_query)


def sort_query(query: bytes) -> bytes:
    """Sort ``&``-separated parameters (stable, by the whole ``name=value`` bytes)."""
    if b"&" not in query:
        return query
    return b"&".join(sorted(p for p in query.split(b"&") if p))


@dataclass(frozen=True)
class DropParameters:
    """A query step that removes parameters by name; ``prefix*`` removes every name with it
    (a class, so that the compiled single-URL path can read the names: see
    :attr:`Profile.query_plan`)."""

    names: frozenset[bytes]
    prefixes: tuple[bytes, ...]

    def __call__(self, query: bytes) -> bytes:
        kept = []
        exact, prefixes = self.names, self.prefixes
        for param in query.split(b"&"):
            key = param.split(b"=", 1)[0]
            if not param or key in exact or (prefixes and key.startswith(prefixes)):
                continue
            kept.append(param)
        return b"&".join(kept)


def drop_parameters(names: Iterable[str]) -> BytesStep:
    """A query step that removes parameters by name; ``prefix*`` removes every name with it."""
    names = tuple(names)
    return DropParameters(
        frozenset(n.encode() for n in names if not n.endswith("*")),
        tuple(n[:-1].encode() for n in names if n.endswith("*")),
    )


def alias_host(resolve: Mapping[str, str] | Callable[[str], str | None]) -> HostStep:
    """Seed 004's alias step: map a canonical host to the ID of the site it is an alias of.

    ``resolve`` is a mapping (a static table, as in tests) or a callable
    (e.g. a DNS lookup returning the address); hosts it does not know stay as they are.
    """
    lookup = resolve.get if isinstance(resolve, Mapping) else resolve

    def alias(host: str) -> str:
        target = lookup(host)
        return host if target is None else target

    return alias


def crawler_profile(
    *,
    sort: bool = True,
    drop: Iterable[str] = TRACKING_PARAMETERS,
    aliases: Mapping[str, str] | Callable[[str], str | None] | None = None,
    name: str = "crawler",
    version: int = 2,
) -> Profile:
    """The de-duplication profile: the filter steps plus query sorting and tracking removal.

    Give it a new ``name`` (or bump ``version``) whenever you change the
    options of a profile that has persistent stores written under it.
    Version 2 keeps a non-default port (version 1 dropped every port).
    """
    query_steps: list[BytesStep] = [_path.unescape]
    drop = tuple(drop)
    if drop:
        query_steps.append(drop_parameters(drop))
    if sort:
        query_steps.append(sort_query)
    query_steps.append(_path.escape)
    host_steps = DEFAULT_HOST_STEPS
    if aliases is not None:
        host_steps = (*DEFAULT_HOST_STEPS, alias_host(aliases))
    return Profile(
        name=name,
        version=version,
        host_steps=host_steps,
        query_steps=tuple(query_steps),
        drop_empty_query=True,
        keep_port=True,
    )


FILTER = Profile(name="filter", version=1)
CRAWLER = crawler_profile()

#: The profiles by name, for command lines and store specs (``?profile=crawler``).
PROFILES: dict[str, Profile] = {"filter": FILTER, "crawler": CRAWLER}
