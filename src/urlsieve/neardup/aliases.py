"""Seed 004's two IDs per URL, alias candidates, and mirror confirmation by content.

Every URL gets two 128-bit IDs (:func:`url_ids`): the *name ID* of its
canonical URL (``http://name/path``) and one *IP ID* per address of its host
(``http://IP/path``, the same URL with the host replaced by the address).
:class:`AliasTracker` applies the seed's rules to each URL a crawler meets:

* a known name ID → ``duplicate`` (drop it);
* a new name ID whose IP ID is known → ``candidate``: recorded as a possible
  alias of the host that produced that IP ID, **not dropped** — on shared
  hosting thousands of unrelated sites share one address, so an address
  alone never merges two sites;
* otherwise → ``new``.

:class:`MirrorDetector` confirms candidates by content. Each fetched page
is given to :meth:`MirrorDetector.observe` with its SimHash; page pairs at
the *same location* (path and query: the seed's URL similarity) on two hosts
are compared, and a pair of hosts is declared aliases when at least
``min_pairs`` pairs were compared and at least ``min_ratio`` of them are
within ``distance`` bits. Hosts on different addresses (the seed's mirror
sites) are paired through the near-duplicate index: a page whose near
duplicate lives at the same location on another host makes that pair a
candidate too. A confirmed alias maps the newer host onto the host seen
first, and the tracker's profile canonicalises through that map, so the
mirror's URLs become the original's and are not fetched again.

DNS changes: the tracker remembers each host's addresses; when they change,
every alias involving the host is suspended and its evidence discarded, so a
domain that moved to another server is judged again on its new content.

Memory: the tracker keeps, per URL, the IP IDs' owner hosts (8 bytes and a
reference per address) and the detector one SimHash per observed page; both
are meant for one crawl process (the seen stores behind the IDs may be any
spec, shared or persistent).
"""

from __future__ import annotations

import dataclasses
import ipaddress
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol

from urlsieve.exceptions import ResolveError
from urlsieve.fingerprint import SignatureKind, signature
from urlsieve.neardup.resolver import Resolver
from urlsieve.seen.base import SeenStore
from urlsieve.seen.memory import MemoryStore
from urlsieve.url import CRAWLER, URL, Profile, parse_url
from urlsieve.url.profile import alias_host

__all__ = [
    "AliasDecision",
    "AliasTracker",
    "MirrorDetector",
    "PagePair",
    "AliasCheck",
    "Sighting",
    "UrlIds",
    "ip_url",
    "url_ids",
]

AliasOutcome = Literal["new", "duplicate", "candidate"]

#: MirrorDetector's default page distance (bits); see its docstring
DISTANCE = 10


class PageIndex(Protocol):
    """What the detector needs of a near-duplicate index (every index backend has it)."""

    k: int

    def add(self, key: str, fp: int) -> None: ...

    def query(self, fp: int, k: int | None = None) -> list[tuple[str, int]]: ...


@dataclass(frozen=True)
class UrlIds:
    """A URL's two kinds of ID: one for its name, one for each address of its host."""

    url: str  # the canonical name URL
    host: str
    name_id: bytes
    addresses: tuple[str, ...]
    ip_urls: tuple[str, ...]
    ip_ids: tuple[bytes, ...]


def ip_url(url: URL, address: str) -> str:
    """``url`` with its host replaced by ``address`` (IPv6 in brackets): the seed's ``http://IP/path``."""
    host = f"[{address}]" if ipaddress.ip_address(address).version == 6 else address
    return url._replace(host=host, is_ip=True).canonical


def url_ids(
    url: str | URL,
    resolver: Resolver,
    *,
    profile: Profile = CRAWLER,
    kind: SignatureKind = "xxh128",
) -> UrlIds:
    """The name ID and the IP IDs of ``url`` (``kind="md5"`` gives the seed's own IDs).

    Raises :class:`~urlsieve.exceptions.InvalidURL` for a URL that cannot be
    canonicalised and :class:`~urlsieve.exceptions.ResolveError` when DNS fails.
    """
    parsed = url if isinstance(url, URL) else parse_url(url, profile)
    addresses = resolver.resolve(parsed.host)
    ip_urls = tuple(ip_url(parsed, a) for a in addresses)
    return UrlIds(
        url=parsed.canonical,
        host=parsed.host,
        name_id=signature(parsed, kind),
        addresses=addresses,
        ip_urls=ip_urls,
        ip_ids=tuple(signature(u, kind, profile) for u in ip_urls),
    )


@dataclass(frozen=True)
class PagePair:
    """Two pages at the same location on two hosts, and the Hamming distance of their SimHashes."""

    url: str
    other: str
    distance: int


@dataclass
class AliasDecision:
    """What is known about two hosts: the compared pages, and whether they are aliases."""

    host: str
    other: str
    agree: list[PagePair] = field(default_factory=list)
    disagree: list[PagePair] = field(default_factory=list)
    confirmed: bool = False
    reason: str = "not enough compared pages"
    locations: set[str] = field(default_factory=set, repr=False)

    def as_dict(self) -> dict[str, object]:
        return {
            "host": self.host,
            "other": self.other,
            "confirmed": self.confirmed,
            "reason": self.reason,
            "agree": [dataclasses.asdict(p) for p in self.agree],
            "disagree": [dataclasses.asdict(p) for p in self.disagree],
        }


def _split(url: URL) -> tuple[str, str]:
    """(host, path and query): what two mirrors' pages share is the second."""
    return url.host, url.path if url.query is None else f"{url.path}?{url.query}"


class MirrorDetector:
    """Declares two hosts aliases when enough of their same-location pages are near duplicates.

    ``distance``: the largest Hamming distance between the 64-bit SimHashes
    of two pages at the same location counted as the same content (default
    10: a mirror that adds a banner, header or footer to every page moves each
    page's SimHash by a few bits; ``benchmarks/neardup.py`` measures how big a
    banner each distance tolerates, and how close unrelated pages come);
    ``min_pairs``: how many compared page pairs a decision needs;
    ``min_ratio``: the share of them that must agree. ``index``: a
    near-duplicate index (any :func:`~urlsieve.neardup.open_index` spec's
    index) through which hosts on different addresses are paired: a page
    whose near duplicate (within :attr:`search`, at most the index's ``k``)
    is at the same location on another host pairs the two hosts, and every
    location they share is then compared at ``distance``. Without an index
    only IP candidates are compared.
    """

    def __init__(
        self,
        *,
        distance: int = DISTANCE,
        min_pairs: int = 3,
        min_ratio: float = 0.9,
        index: PageIndex | None = None,
        profile: Profile = CRAWLER,
    ) -> None:
        if not 0 <= distance <= 64:
            raise ValueError(f"distance must be 0..64 bits, got {distance}")
        if min_pairs < 1 or not 0 < min_ratio <= 1:
            raise ValueError("min_pairs must be >= 1 and 0 < min_ratio <= 1")
        self.distance = distance
        self.min_pairs = min_pairs
        self.min_ratio = min_ratio
        self.index = index
        self.profile = profile
        self._pages: dict[str, dict[str, int]] = {}  # host -> location -> SimHash
        self._hosts_at: dict[str, set[str]] = {}  # location -> hosts with a page there
        self._pairs: dict[tuple[str, str], AliasDecision] = {}
        self._partners: dict[str, set[str]] = {}
        self._scanned: set[tuple[str, str]] = set()  # candidate pairs compared in full once
        self._order: dict[str, int] = {}  # host -> first time seen, to choose alias targets
        self.aliases: dict[str, str] = {}  # confirmed: host -> the host it is an alias of

    @property
    def search(self) -> int:
        """The distance the index is asked for: ``distance``, at most the index's ``k``."""
        return self.distance if self.index is None else min(self.distance, self.index.k)

    # ------------------------------------------------------------- bookkeeping
    def _seen_host(self, host: str) -> None:
        self._order.setdefault(host, len(self._order))

    def _pair(self, a: str, b: str) -> AliasDecision:
        key = (a, b) if a < b else (b, a)
        decision = self._pairs.get(key)
        if decision is None:
            decision = self._pairs[key] = AliasDecision(*key)
            self._partners.setdefault(a, set()).add(b)
            self._partners.setdefault(b, set()).add(a)
        return decision

    def add_candidate(self, host: str, other: str) -> None:
        """Pair two hosts for comparison (e.g. they share an address); no decision yet."""
        if host != other:
            self._seen_host(other)
            self._seen_host(host)
            decision = self._pair(host, other)
            key = (decision.host, decision.other)
            if key in self._scanned:  # later pages are compared as they are observed
                return
            self._scanned.add(key)
            for location in self._common_locations(host, other):
                self._compare(decision, host, other, location)

    def _common_locations(self, a: str, b: str) -> list[str]:
        mine, theirs = self._pages.get(a, {}), self._pages.get(b, {})
        return [location for location in mine if location in theirs]

    def alias_of(self, host: str) -> str | None:
        """The host ``host`` is a confirmed alias of (following chains), or None."""
        target = self.aliases.get(host)
        seen = {host}
        while target is not None and target in self.aliases and target not in seen:
            seen.add(target)
            target = self.aliases[target]
        return target

    def decision(self, host: str, other: str) -> AliasDecision | None:
        """The evidence about two hosts (which pages, which distances), if they were ever paired."""
        return self._pairs.get((host, other) if host < other else (other, host))

    def decisions(self) -> list[AliasDecision]:
        return list(self._pairs.values())

    # ------------------------------------------------------------ observation
    def observe(
        self, url: str | URL, simhash: int, *, hits: Sequence[tuple[str, int]] | None = None
    ) -> list[PagePair]:
        """A fetched page and its SimHash; returns its near duplicates at the same location.

        ``hits``: what the index answered for ``simhash`` before this page was added,
        when the caller already asked it (it is not asked again).
        """
        parsed = url if isinstance(url, URL) else parse_url(url, self.profile)
        host, location = _split(parsed)
        self._seen_host(host)
        simhash &= (1 << 64) - 1
        self._pages.setdefault(host, {})[location] = simhash
        self._hosts_at.setdefault(location, set()).add(host)
        others = set(self._partners.get(host, ()))
        if self.index is not None:
            if hits is None:
                hits = self.index.query(simhash, self.search)
            for key, _ in hits:
                try:
                    other_host, other_location = _split(parse_url(key, self.profile))
                except ValueError:
                    continue
                if other_location == location and other_host != host and other_host not in others:
                    # a new pair: the pages both hosts have so far are compared now, at
                    # `distance` (the index only finds pages within `search` bits)
                    self.add_candidate(host, other_host)
                    others.add(other_host)
            self.index.add(parsed.canonical, simhash)
        near: list[PagePair] = []
        for other in sorted(others & self._hosts_at[location]):
            pair = self._compare(self._pair(host, other), host, other, location)
            if pair is not None and pair.distance <= self.distance:
                near.append(pair)
        return near

    def _compare(
        self, decision: AliasDecision, host: str, other: str, location: str
    ) -> PagePair | None:
        mine = self._pages.get(host, {}).get(location)
        theirs = self._pages.get(other, {}).get(location)
        if mine is None or theirs is None:
            return None
        pair = PagePair(f"{host}{location}", f"{other}{location}", (mine ^ theirs).bit_count())
        if location in decision.locations:
            return pair  # this location was compared already for this pair
        decision.locations.add(location)
        (decision.agree if pair.distance <= self.distance else decision.disagree).append(pair)
        self._decide(decision)
        return pair

    def _decide(self, decision: AliasDecision) -> None:
        compared = len(decision.agree) + len(decision.disagree)
        ratio = len(decision.agree) / compared if compared else 0.0
        if compared < self.min_pairs:
            decision.reason = f"{compared} of {self.min_pairs} page pairs compared"
            return
        ok = ratio >= self.min_ratio
        decision.reason = (
            f"{len(decision.agree)} of {compared} same-location pages within "
            f"{self.distance} bits ({ratio:.0%}; needs {self.min_ratio:.0%})"
        )
        if ok and not decision.confirmed:
            decision.confirmed = True
            first, second = sorted((decision.host, decision.other), key=self._order.__getitem__)
            root = self.alias_of(first) or first
            if root != second:
                self.aliases[second] = root
        elif not ok and decision.confirmed:
            self._unconfirm(decision)

    def _unconfirm(self, decision: AliasDecision) -> None:
        decision.confirmed = False
        for a, b in ((decision.host, decision.other), (decision.other, decision.host)):
            if self.aliases.get(a) == b:
                del self.aliases[a]

    def forget_host(self, host: str) -> None:
        """Suspend every alias involving ``host`` and drop its evidence (its DNS changed)."""
        for other in self._partners.get(host, set()):
            decision = self._pair(host, other)
            if decision.confirmed:
                self._unconfirm(decision)
            decision.agree.clear()
            decision.disagree.clear()
            decision.locations.clear()
            decision.reason = f"{host}'s addresses changed: evidence discarded"
        for target in [h for h, t in self.aliases.items() if t == host]:
            del self.aliases[target]
        self.aliases.pop(host, None)
        for location in self._pages.pop(host, {}):
            self._hosts_at.get(location, set()).discard(host)


@dataclass(frozen=True)
class AliasCheck:
    """What :meth:`AliasTracker.see` decided about a URL, and why."""

    verdict: AliasOutcome
    url: str  # the canonical URL after the alias step (what the crawl should fetch as)
    host: str
    addresses: tuple[str, ...] = ()
    alias_of: str | None = None  # candidate: the host whose URL had the same IP ID
    aliased: bool = False  # the URL's host was mapped onto a confirmed alias target
    resolve_error: str | None = None


#: The former name of :class:`AliasCheck` (``urlsieve.learn.queue.Sighting`` is another
#: type); kept for one release.
Sighting = AliasCheck


class AliasTracker:
    """Seed 004 for a crawl: two IDs per URL in two seen stores, candidates, confirmed aliases.

    ``names`` and ``addresses`` are seen stores (any spec; memory by default)
    holding the name IDs and the IP IDs. ``profile`` is the canonical profile;
    the tracker's own :attr:`profile` adds the alias step fed by ``detector``,
    and the name IDs are canonicalised through it: pass ``names`` as a function
    of that profile (``lambda p: open_seen(spec, profile=p)``) for a persistent
    store, which records the profile it was written under.
    """

    def __init__(
        self,
        resolver: Resolver,
        *,
        names: SeenStore | Callable[[Profile], SeenStore] | None = None,
        addresses: SeenStore | None = None,
        detector: MirrorDetector | None = None,
        profile: Profile = CRAWLER,
    ) -> None:
        self.resolver = resolver
        self.detector = detector or MirrorDetector()
        self.profile = dataclasses.replace(
            profile,
            name=f"{profile.name}+aliases",
            host_steps=(*profile.host_steps, alias_host(self._alias_target)),
        )
        self.detector.profile = self.profile
        self.base_profile = profile
        if names is None:
            self.names: SeenStore = MemoryStore(profile=self.profile)
        elif callable(names):
            self.names = names(self.profile)
        else:
            self.names = names
        self.addresses = addresses if addresses is not None else MemoryStore(profile=profile)
        self._owner: dict[str, str] = {}  # IP URL -> host that produced it first
        self._host_addresses: dict[str, tuple[str, ...]] = {}
        self.counts = {"new": 0, "duplicate": 0, "candidate": 0, "resolve_errors": 0, "moved": 0}

    def _alias_target(self, host: str) -> str | None:
        return self.detector.alias_of(host)

    def canonical(self, url: str) -> URL:
        """``url`` canonicalised through the confirmed aliases."""
        return parse_url(url, self.profile)

    def see(self, url: str) -> AliasCheck:
        """Record ``url``; ``duplicate`` means drop it, ``new`` and ``candidate`` mean fetch it.

        The URL's own host is resolved first (a cached answer costs a dict
        lookup), so a host whose addresses changed loses its aliases before
        its URL is mapped through them.
        """
        base = parse_url(url, self.base_profile)
        error: str | None = None
        addresses: tuple[str, ...] = ()
        try:
            addresses = self.resolver.resolve(base.host)
        except ResolveError as exc:
            self.counts["resolve_errors"] += 1
            error = str(exc)
        else:
            self._note_addresses(base.host, addresses)
        parsed = parse_url(url, self.profile)
        host, aliased = parsed.host, parsed.host != base.host
        if not self.names.add(parsed.canonical):
            self.counts["duplicate"] += 1
            return AliasCheck("duplicate", parsed.canonical, host, addresses, aliased=aliased)
        owner: str | None = None
        for address in addresses:
            address_url = ip_url(base, address)
            if self.addresses.add(address_url):
                self._owner[address_url] = base.host
            elif owner is None:
                owner = self._owner.get(address_url)
                if owner in (base.host, host):
                    owner = None
        if owner is not None:
            self.detector.add_candidate(base.host, owner)
            self.counts["candidate"] += 1
            return AliasCheck("candidate", parsed.canonical, host, addresses, owner, aliased)
        self.counts["new"] += 1
        return AliasCheck(
            "new", parsed.canonical, host, addresses, aliased=aliased, resolve_error=error
        )

    def _note_addresses(self, host: str, addresses: tuple[str, ...]) -> None:
        before = self._host_addresses.get(host)
        self._host_addresses[host] = addresses
        if before is not None and before != addresses:
            self.counts["moved"] += 1
            self.detector.forget_host(host)

    def observe(self, url: str, simhash: int) -> list[PagePair]:
        """A fetched page's SimHash, for mirror confirmation (:meth:`MirrorDetector.observe`)."""
        return self.detector.observe(parse_url(url, self.base_profile), simhash)

    def close(self) -> None:
        self.names.close()
        self.addresses.close()
