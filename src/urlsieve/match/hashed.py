"""The reference matcher: hash tables keyed by lookup expressions, most specific first.

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

from urlsieve.match.base import ReferenceMatcher, better
from urlsieve.rules.model import ALLOW, Rule, RuleKey
from urlsieve.url import URL

__all__ = ["HashMatcher"]

#: Hosts longer than a DNS name are answered but not cached (the cache's memory stays
#: bounded by its entry count times this).
_CACHED_HOST_LENGTH = 253


class _Table:
    """The rules of one host (exact-host, subdomain-covering, or both merged)."""

    __slots__ = ("exact", "prefix", "prefix_max", "query", "root")

    def __init__(self) -> None:
        self.root: Rule | None = None
        # None until a rule needs one: most hosts have a host-wide rule only.
        self.exact: dict[str, Rule] | None = None
        self.prefix: dict[str, Rule] | None = None
        self.query: dict[str, Rule] | None = None
        self.prefix_max = 0

    @staticmethod
    def _put(table: dict[str, Rule] | None, key: str, rule: Rule) -> dict[str, Rule]:
        if table is None:
            return {key: rule}
        table[key] = better(table.get(key), rule)
        return table

    def add(self, rule: Rule) -> None:
        path = rule.path
        if rule.query is not None:
            self.query = self._put(self.query, f"{path}?{rule.query}", rule)
        elif rule.anchored:
            self.exact = self._put(self.exact, path, rule)
        elif path == "/":
            self.root = better(self.root, rule)
        elif path.endswith("/"):
            self.prefix = self._put(self.prefix, path, rule)
            self.prefix_max = max(self.prefix_max, len(path))
        else:
            self.exact = self._put(self.exact, path, rule)
            self.prefix = self._put(self.prefix, path + "/", rule)
            self.prefix_max = max(self.prefix_max, len(path) + 1)

    def merged(self, other: _Table) -> _Table:
        """A table holding both tables' rules, conflicts settled by rank."""
        out = _Table()
        out.root = self.root if other.root is None else better(self.root, other.root)
        for name in ("exact", "prefix", "query"):
            mine: dict[str, Rule] | None = getattr(self, name)
            mine = None if mine is None else dict(mine)
            for key, rule in (getattr(other, name) or {}).items():
                mine = self._put(mine, key, rule)
            setattr(out, name, mine)
        out.prefix_max = max(self.prefix_max, other.prefix_max)
        return out

    def match(
        self, path: str, query: str | None, trace: list[str] | None, host: str
    ) -> Rule | None:
        if self.query is not None and query is not None:
            key = f"{path}?{query}"
            if trace is not None:
                trace.append(host + key)
            rule = self.query.get(key)
            if rule is not None:
                return rule
        if self.exact is not None:
            if trace is not None:
                trace.append(host + path)
            rule = self.exact.get(path)
            if rule is not None:
                return rule
        prefix = self.prefix
        if prefix is not None:
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
    """A host with rules other than one host-wide rule."""

    __slots__ = ("exact", "itself", "rules", "sub")

    def __init__(self) -> None:
        self.sub: _Table | None = None  # rules covering the host and its subdomains
        self.exact: _Table | None = None  # rules for this exact host only (=host, IPs)
        self.itself: _Table | None = None  # what a request for this host consults (lazy)
        self.rules: dict[RuleKey, Rule] = {}

    def add(self, rule: Rule) -> bool:
        previous = self.rules.get(rule.key)
        if previous is not None and (previous.action in (rule.action, ALLOW)):
            return previous.action != rule.action
        self.rules[rule.key] = rule
        if rule.exact_host or rule.is_ip:
            if self.exact is None:
                self.exact = _Table()
            self.exact.add(rule)
        else:
            if self.sub is None:
                self.sub = _Table()
            self.sub.add(rule)
        self.itself = None
        return True

    def table_for_itself(self) -> _Table | None:
        if self.itself is None:
            if self.exact is None:
                self.itself = self.sub
            elif self.sub is None:
                self.itself = self.exact
            else:
                self.itself = self.exact.merged(self.sub)
        return self.itself


# A chain entry is a table, or a compact host-wide rule (see HashMatcher).
_Chain = tuple[tuple[str, "_Table | int"], ...]

_LINE_BITS = 32


def _covers_whole_host(rule: Rule) -> bool:
    """A rule for every path of a host (and its subdomains, unless it is an address).

    Kept compactly, without a table. An address has no subdomains, and no
    host name has an address as a parent, so addresses fit here too.
    """
    return rule.path == "/" and rule.query is None and not (rule.anchored or rule.exact_host)


class HashMatcher(ReferenceMatcher):
    """Dicts keyed by host, then by path expression; see the module docstring.

    Memory: a host whose only rule covers it whole (most lines of a domains
    list) is stored as one dict entry, host → an int packing the rule's
    provenance (action, category and source as an index into a small table,
    and the line); its :class:`Rule` is rebuilt when it decides a request.
    Other hosts get tables of :class:`Rule` objects. :meth:`add` takes rules
    one by one, so loading never needs a list of every rule.

    Speed: the tables a host consults (its own and its parents') are
    remembered per host, up to ``cache_size`` hosts (then forgotten all at
    once), so a repeated host costs one dict lookup before the path probes.
    """

    name = "hash"

    def __init__(self, rules: Iterable[Rule] = (), *, cache_size: int = 1 << 16) -> None:
        self.cache_size = cache_size
        self._cache: dict[str, _Chain] = {}
        self._hosts: dict[str, int | _Host] = {}
        # (action, category, source, is_ip) of compact rules, and its index
        self._provenance: list[tuple[str, str, str | None, bool]] = []
        self._provenance_ids: dict[tuple[str, str, str | None, bool], int] = {}
        self._patterns: dict[str, str] = {}  # host → pattern, where they differ
        self._built: dict[str, Rule] = {}  # compact rules rebuilt lately
        self._depths: set[int] = set()
        self._count = 0
        for rule in rules:
            self.add(rule)

    def _pack(self, rule: Rule) -> int:
        key = (rule.action, rule.category, rule.source, rule.is_ip)
        at = self._provenance_ids.get(key)
        if at is None:
            at = self._provenance_ids[key] = len(self._provenance)
            self._provenance.append(key)
        line = rule.line or 0
        if not 0 <= line < 1 << _LINE_BITS:
            line = 0
        if rule.pattern != rule.host:
            self._patterns[rule.host] = rule.pattern
        else:  # a rule replacing another must not keep the other's spelling
            self._patterns.pop(rule.host, None)
        return at << _LINE_BITS | line

    def _unpack(self, host: str, code: int) -> Rule:
        rule = self._built.get(host)
        if rule is None:
            action, category, source, is_ip = self._provenance[code >> _LINE_BITS]
            line = code & ((1 << _LINE_BITS) - 1)
            rule = Rule(
                self._patterns.get(host, host),
                action,
                category,
                host,
                is_ip=is_ip,
                source=source,
                line=line or None,
            )
            if len(self._built) >= 16384:
                self._built.clear()
            self._built[host] = rule
        return rule

    def add(self, rule: Rule) -> bool:
        """Add a rule; False when a rule with its key and action (or an allow) was there.

        On a conflict between rules of one key, ``allow`` wins; otherwise the first stays.
        """
        if self._cache:
            self._cache.clear()
        host = rule.host
        node = self._hosts.get(host)
        if _covers_whole_host(rule) and (node is None or isinstance(node, int)):
            if node is not None:
                action = self._provenance[node >> _LINE_BITS][0]
                if action in (rule.action, ALLOW):
                    return action != rule.action
                self._count -= 1  # an allow replaces the block of the same key
                self._built.pop(host, None)
            self._hosts[host] = self._pack(rule)
            if not rule.is_ip:
                self._depths.add(host.count(".") + 1)
            self._count += 1
            return True
        if node is None or isinstance(node, int):
            code = node
            node = self._hosts[host] = _Host()
            if code is not None:  # promoted: its host-wide rule moves into a table
                node.add(self._unpack(host, code))
                self._built.pop(host, None)
                self._patterns.pop(host, None)
        before = len(node.rules)
        added = node.add(rule)
        self._count += len(node.rules) - before
        if added and not (rule.exact_host or rule.is_ip):
            self._depths.add(host.count(".") + 1)
        return added

    def __len__(self) -> int:
        return self._count

    @property
    def rules(self) -> list[Rule]:
        """Every rule held (compact ones rebuilt), in insertion order of their hosts."""
        out: list[Rule] = []
        for host, node in self._hosts.items():
            if isinstance(node, int):
                out.append(self._unpack(host, node))
            else:
                out.extend(node.rules.values())
        return out

    def _chain(self, host: str, is_ip: bool, trace: list[str] | None = None) -> _Chain:
        """The rule tables a request for ``host`` consults, most specific host first."""
        hosts = self._hosts
        chain: list[tuple[str, _Table | int]] = []
        node = hosts.get(host)
        if isinstance(node, int):
            chain.append((host, node))
        elif node is not None and (table := node.table_for_itself()) is not None:
            chain.append((host, table))
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
            if isinstance(node, int):
                chain.append((parent, node))
            elif node is not None and node.sub is not None:
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
                if len(host) <= _CACHED_HOST_LENGTH:  # a flood of huge hosts is not kept
                    if len(self._cache) >= self.cache_size:
                        self._cache.clear()
                    self._cache[host] = chain
        else:
            chain = self._chain(host, url.is_ip, trace)
        path = url.path.lower()  # rule paths are lower-case: matching ignores case
        query = None if url.query is None else url.query.lower()
        for name, table in chain:
            if isinstance(table, int):  # a host-wide rule: nothing more specific here
                if trace is not None:
                    trace.append(name + "/")
                return self._unpack(name, table)
            rule = table.match(path, query, trace, name)
            if rule is not None:
                return rule
        return None
