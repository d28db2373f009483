"""The production matcher: hash tables keyed by lookup expressions, most specific first.

Rules are grouped by host. For a request it walks the host's label suffixes
from the host itself up (skipping depths no rule has), and in the first
host with a matching rule it probes, most specific first:

1. ``path?query`` (rules with an exact query),
2. ``path`` (anchored rules, and open rules written without a trailing ``/``),
3. every prefix of the path ending at a ``/``, longest first (open rules;
   ``/ads`` is stored under ``/ads`` and ``/ads/``, so it covers ``/ads/x``
   and not ``/adsense``), skipping prefixes longer than the host's longest,
4. the host-wide rule.

The first hit is the most specific rule (:attr:`Rule.rank`): a longer host
is probed first, and conflicts on one key were settled when the table was
built. No Public Suffix List work happens per request: a rule for a bare
top-level domain cannot exist, so probing every label suffix is exact.
"""

from __future__ import annotations

from collections.abc import Iterable

from urlsieve.match.base import Explanation, Verdict, better, resolve_rules
from urlsieve.rules.model import Rule
from urlsieve.url import URL, parse_url

__all__ = ["HashMatcher"]


class _Table:
    """The rules of one host (exact-host, subdomain-covering, or both merged)."""

    __slots__ = ("exact", "prefix", "prefix_max", "query", "root")

    def __init__(self) -> None:
        self.root: Rule | None = None
        self.exact: dict[str, Rule] = {}
        self.prefix: dict[str, Rule] = {}
        self.query: dict[str, Rule] = {}
        self.prefix_max = 0

    def _put(self, table: dict[str, Rule], key: str, rule: Rule) -> None:
        table[key] = better(table.get(key), rule)

    def add(self, rule: Rule) -> None:
        path = rule.path
        if rule.query is not None:
            self._put(self.query, f"{path}?{rule.query}", rule)
        elif rule.anchored:
            self._put(self.exact, path, rule)
        elif path == "/":
            self.root = better(self.root, rule)
        elif path.endswith("/"):
            self._put(self.prefix, path, rule)
        else:
            self._put(self.exact, path, rule)
            self._put(self.prefix, path + "/", rule)

    def merged(self, other: _Table) -> _Table:
        """A table holding both tables' rules, conflicts settled by rank."""
        out = _Table()
        out.root = self.root if other.root is None else better(self.root, other.root)
        for name in ("exact", "prefix", "query"):
            mine: dict[str, Rule] = dict(getattr(self, name))
            for key, rule in getattr(other, name).items():
                mine[key] = better(mine.get(key), rule)
            setattr(out, name, mine)
        out.seal()
        return out

    def seal(self) -> None:
        self.prefix_max = max(map(len, self.prefix), default=0)

    def match(
        self, path: str, query: str | None, trace: list[str] | None, host: str
    ) -> Rule | None:
        if self.query and query is not None:
            key = f"{path}?{query}"
            if trace is not None:
                trace.append(host + key)
            rule = self.query.get(key)
            if rule is not None:
                return rule
        if self.exact:
            if trace is not None:
                trace.append(host + path)
            rule = self.exact.get(path)
            if rule is not None:
                return rule
        if self.prefix:
            prefix = self.prefix
            cut = path.rfind("/", 0, min(len(path), self.prefix_max))
            while cut > 0:
                key = path[: cut + 1]
                if trace is not None:
                    trace.append(host + key)
                rule = prefix.get(key)
                if rule is not None:
                    return rule
                cut = path.rfind("/", 0, cut)
        if trace is not None and self.root is not None:
            trace.append(host + "/")
        return self.root


class _Host:
    __slots__ = ("exact", "itself", "sub")

    def __init__(self) -> None:
        self.sub: _Table | None = None  # rules covering the host and its subdomains
        self.exact: _Table | None = None  # rules for this exact host only (=host, IPs)
        self.itself: _Table | None = None  # what a request for this very host consults


_Chain = tuple[tuple[str, _Table], ...]


class HashMatcher:
    """Dicts keyed by host, then by path expression; see the module docstring.

    The tables a host consults (its own and its parents') are remembered per
    host, up to ``cache_size`` hosts (then forgotten all at once), so a
    repeated host costs one dict lookup before the path probes.
    """

    name = "urlsieve"

    def __init__(self, rules: Iterable[Rule], *, cache_size: int = 1 << 16) -> None:
        self.cache_size = cache_size
        self._cache: dict[str, _Chain] = {}
        self._rules = resolve_rules(rules)
        hosts: dict[str, _Host] = {}
        for rule in self._rules:
            node = hosts.get(rule.host)
            if node is None:
                node = hosts[rule.host] = _Host()
            if rule.exact_host or rule.is_ip:
                if node.exact is None:
                    node.exact = _Table()
                node.exact.add(rule)
            else:
                if node.sub is None:
                    node.sub = _Table()
                node.sub.add(rule)
        depths = set()
        for host, node in hosts.items():
            for table in (node.sub, node.exact):
                if table is not None:
                    table.seal()
            if node.exact is None:
                node.itself = node.sub
            elif node.sub is None:
                node.itself = node.exact
            else:
                node.itself = node.exact.merged(node.sub)
            if node.sub is not None:
                depths.add(host.count(".") + 1)
        self._hosts = hosts
        # Label depths at which a subdomain-covering rule exists: parents at other depths
        # cannot match, so they are never sliced out or probed.
        self._depths = frozenset(depths)

    def __len__(self) -> int:
        return len(self._rules)

    @property
    def rules(self) -> list[Rule]:
        return list(self._rules)

    def _chain(self, host: str, is_ip: bool, trace: list[str] | None = None) -> _Chain:
        """The rule tables a request for ``host`` consults, most specific host first."""
        hosts = self._hosts
        chain: list[tuple[str, _Table]] = []
        node = hosts.get(host)
        if node is not None and node.itself is not None:
            chain.append((host, node.itself))
        elif trace is not None:
            trace.append(f"{host} (no rules for this host)")
        if is_ip or host[0] == "[":
            return tuple(chain)
        depths = self._depths
        at = -1
        # Parents from the longest; ``labels`` counts the parent's labels.
        for labels in range(host.count("."), 0, -1):
            at = host.find(".", at + 1)
            if labels not in depths:
                continue
            parent = host[at + 1 :]
            node = hosts.get(parent)
            if node is not None and node.sub is not None:
                chain.append((parent, node.sub))
            elif trace is not None:
                trace.append(f"{parent} (no rules for this host)")
        return tuple(chain)

    def _decide(self, url: URL, trace: list[str] | None = None) -> Rule | None:
        host = url.host
        if trace is None:
            chain = self._cache.get(host)
            if chain is None:
                chain = self._chain(host, url.is_ip)
                if len(self._cache) >= self.cache_size:
                    self._cache.clear()
                self._cache[host] = chain
        else:
            chain = self._chain(host, url.is_ip, trace)
        path = url.path
        query = url.query
        for name, table in chain:
            rule = table.match(path, query, trace, name)
            if rule is not None:
                return rule
        return None

    def decide(self, url: URL) -> Rule | None:
        """The deciding rule for a parsed URL, ``None`` when no rule matches."""
        return self._decide(url)

    def check(self, url: str | URL) -> Verdict:
        parts = url if isinstance(url, URL) else parse_url(url)
        rule = self._decide(parts)
        return Verdict.of(rule, parts.canonical)

    def check_many(self, urls: Iterable[str | URL]) -> list[Verdict]:
        decide = self._decide
        out = []
        for url in urls:
            parts = url if isinstance(url, URL) else parse_url(url)
            out.append(Verdict.of(decide(parts), parts.canonical))
        return out

    def explain(self, url: str | URL) -> Explanation:
        parts = url if isinstance(url, URL) else parse_url(url)
        trace: list[str] = []
        rule = self._decide(parts, trace)
        return Explanation(
            str(url), parts.canonical, Verdict.of(rule, parts.canonical), probes=trace
        )
