"""Rules: a pattern, an action, a category and where it came from (docs/architecture.md, "Rules").

Pattern semantics (rules are canonicalised with the same code as requests):

=========================  ==========================================  ====================
written                    matches                                     does not match
=========================  ==========================================  ====================
``example.com``            the host, every subdomain, any path         ``badexample.com``
``=example.com``           exactly that host                           ``www.example.com``
``example.com/ads``        ``/ads``, ``/ads/``, ``/ads/x``             ``/adsense``, ``/x/ads``
``example.com/ads/``       ``/ads/``, ``/ads/x``                       ``/ads``
``example.com/ads|``       exactly the path ``/ads`` (any query)       ``/ads/x``
``example.com/p?id=1``     the path ``/p`` with exactly that query     other queries
``10.0.0.1``               that address in any spelling                ``10.0.0.10``
=========================  ==========================================  ====================

Precedence (:attr:`Rule.rank`): the longer host wins, then the longer path
(query included), then an anchored rule over an open one, then an exact-host
rule over a subdomain-covering one; on a tie ``allow`` wins.
"""

from __future__ import annotations

import re
from typing import NamedTuple

from urlsieve.exceptions import InvalidURL, RuleSyntaxError
from urlsieve.url import is_public_suffix, parse_url

__all__ = ["ALLOW", "BLOCK", "NONE", "Rule", "RuleKey", "parse_rule", "rank_of", "storage_keys"]

BLOCK = "block"
ALLOW = "allow"
NONE = "none"

#: ``(host, exact_host, path, anchored, query)``: two rules with one key match the same URLs.
RuleKey = tuple[str, bool, str, bool, str | None]

_WHITESPACE = re.compile(r"\s")
# The canonicaliser's own fast-path host (lower-case labels, last one not numeric).
_CANONICAL_HOST = re.compile(r"(?:[a-z0-9_-]++\.)*+[a-z][a-z0-9_-]*+")


def rank_of(host_len: int, path_len: int, anchored: bool, exact_host: bool, allow: bool) -> int:
    """The precedence of a rule, every engine's (``_speedups.c`` computes the same).

    ``(host length, path length with "?query", anchored, exact host, allow)`` packed
    into one int, compared as that tuple would be: the longer host wins, then the
    longer path, then an anchored rule, then an exact-host rule; on a tie ``allow``.
    Canonical hosts and paths are ASCII, so characters and bytes count the same.
    """
    return host_len << 20 | min(path_len, 0x1FFFF) << 3 | anchored << 2 | exact_host << 1 | allow


def storage_keys(rule: Rule) -> tuple[str, ...]:
    """The lookup expressions (``host + path[?query]``) a rule is stored under.

    A request probes, per host level, the path with its query, the path, and each
    prefix ending at a ``/`` (:func:`urlsieve.url.lookup_expressions`); a rule is
    stored under each expression that can name a URL it matches:
    ``example.com/ads`` under ``/ads`` (the path itself) and ``/ads/`` (every
    path below it); ``/ads/``, ``/ads|`` and a rule with a query under one.
    """
    base = rule.host + rule.path
    if rule.query is not None:
        return (f"{base}?{rule.query}",)
    if rule.anchored or rule.path.endswith("/"):
        return (base,)
    return (base, base + "/")


class _RuleFields(NamedTuple):
    pattern: str
    action: str
    category: str
    host: str
    path: str
    query: str | None
    exact_host: bool
    anchored: bool
    is_ip: bool
    source: str | None
    line: int | None
    rank: int


class Rule(_RuleFields):
    """One rule, parsed and canonicalised, with its provenance.

    ``pattern`` is the text as written in the list; ``host``, ``path``,
    ``query``, ``exact_host``, ``anchored`` and ``is_ip`` are its canonical
    meaning. ``source`` and ``line`` say where it was read (``None`` for
    rules made in code). ``rank`` orders rules by precedence (derived).

    An immutable named tuple: rules are made per list line and, for compact
    host rules, per match, so construction has to be cheap.
    """

    __slots__ = ()

    def __new__(  # noqa: PLR0917 (positional, like the tuple it makes)
        cls,
        pattern: str,
        action: str,
        category: str,
        host: str,
        path: str = "/",
        query: str | None = None,
        exact_host: bool = False,
        anchored: bool = False,
        is_ip: bool = False,
        source: str | None = None,
        line: int | None = None,
    ) -> Rule:
        if action != BLOCK and action != ALLOW:  # noqa: PLR1714 (faster than a tuple test)
            raise ValueError(f"rule action must be 'block' or 'allow', not {action!r}")
        path_len = len(path) if query is None else len(path) + len(query) + 1
        rank = rank_of(len(host), path_len, anchored, exact_host, action == ALLOW)
        return tuple.__new__(
            cls,
            (
                pattern,
                action,
                category,
                host,
                path,
                query,
                exact_host,
                anchored,
                is_ip,
                source,
                line,
                rank,
            ),
        )

    def __repr__(self) -> str:
        return (
            f"Rule(pattern={self.pattern!r}, action={self.action!r}, category={self.category!r}, "
            f"location={self.location!r}, where={self.where!r})"
        )

    @property
    def key(self) -> RuleKey:
        """What the rule matches, without action or provenance."""
        return (self.host, self.exact_host, self.path, self.anchored, self.query)

    @property
    def where(self) -> str:
        """``source:line`` (or what is known of it)."""
        if self.source is None:
            return "-"
        return self.source if self.line is None else f"{self.source}:{self.line}"

    @property
    def location(self) -> str:
        """The canonical pattern: ``[=]host/path[?query][|]``."""
        text = f"{'=' if self.exact_host else ''}{self.host}{self.path}"
        if self.query is not None:
            text += f"?{self.query}"
        return text + ("|" if self.anchored else "")

    def covers_host(self, host: str) -> bool:
        """Whether the rule's host part covers ``host`` (a canonical host)."""
        if host == self.host:
            return True
        return not (self.exact_host or self.is_ip) and host.endswith("." + self.host)


def parse_rule(
    pattern: str,
    action: str = BLOCK,
    category: str = "-",
    source: str | None = None,
    line: int | None = None,
) -> Rule:
    """Parse one pattern (see the module docstring) into a :class:`Rule`.

    Raises :class:`RuleSyntaxError` (``source:line: reason``) when the
    pattern is not a rule: empty, whitespace inside, no usable host, or a
    top-level domain such as ``com``. A multi-label public suffix such as
    ``gouv.fr`` or ``bet.br`` is accepted: curated lists use them on purpose
    (UT1 allows ``gouv.fr`` and blocks ``bet.br``).
    """

    def bad(reason: str) -> RuleSyntaxError:
        return RuleSyntaxError(f"{reason}: {pattern!r}", source, line)

    text = pattern.strip()
    if not text:
        raise bad("empty pattern")
    if _WHITESPACE.search(text) is not None:
        raise bad("whitespace inside a pattern")
    exact_host = text.startswith("=")
    if exact_host:
        text = text[1:]
    anchored = text.endswith("|")
    if anchored:
        text = text[:-1]
    if text.startswith("*.") and not exact_host:
        text = text[2:]  # "*.example.com": a domain rule already covers every subdomain
    if not text:
        raise bad("empty host")
    if "*" in text.split("/", 1)[0]:
        raise bad(
            "a '*' wildcard in a host is not supported (write the domain: it covers subdomains)"
        )
    if _CANONICAL_HOST.fullmatch(text) is not None:
        # A bare canonical host name (most lines of a domains list): nothing to canonicalise.
        if "." not in text and is_public_suffix(text):
            raise bad(f"{text!r} is a top-level domain: the rule would cover every site under it")
        return Rule(
            pattern, action, category, text, "/", None, exact_host, anchored, False, source, line
        )
    if ":" not in text:
        # "http://host/" is the canonicaliser's fast path; "http://host" is not.
        text = "http://" + text if "/" in text or "?" in text else f"http://{text}/"
    try:
        url = parse_url(text)
    except InvalidURL as exc:
        raise bad(exc.reason) from None
    if "." not in url.host and not url.host.startswith("[") and is_public_suffix(url.host):
        raise bad(f"{url.host!r} is a top-level domain: the rule would cover every site under it")
    return Rule(
        pattern=pattern,
        action=action,
        category=category,
        host=url.host,
        # Paths and queries match without regard to case, as in Adblock filters and
        # squidGuard: /Ads/ and /ads/ are one rule (the pattern keeps its spelling).
        path=url.path.lower(),
        query=None if url.query is None else url.query.lower(),
        exact_host=exact_host,
        anchored=anchored,
        is_ip=url.is_ip or url.host.startswith("["),
        source=source,
        line=line,
    )
