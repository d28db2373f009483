"""Lookup expressions: the strings a rule for a URL can be stored under."""

from __future__ import annotations

import functools
from collections.abc import Iterator

from publicsuffixlist import PublicSuffixList

from urlsieve.url.model import URL
from urlsieve.url.parse import parse_url
from urlsieve.url.profile import FILTER, Profile

__all__ = [
    "MAX_EXPRESSIONS",
    "host_suffixes",
    "is_public_suffix",
    "learning_domain",
    "lookup_expressions",
    "path_prefixes",
    "suffix_list",
]


@functools.cache
def suffix_list() -> PublicSuffixList:
    """The Public Suffix List's ICANN section, loaded once (on first use, not at import)."""
    # ICANN section only: a private suffix such as github.io stays blockable as a whole.
    return PublicSuffixList(only_icann=True)


def is_public_suffix(host: str) -> bool:
    """True for a bare public suffix (``com``, ``co.uk``) of the ICANN section of the PSL."""
    return bool(suffix_list().is_public(host))


@functools.cache
def _fullsuffix_list() -> PublicSuffixList:
    # Both sections: a private suffix (github.io) is a shared platform, each of its
    # users (user.github.io) a site of its own.
    return PublicSuffixList()


@functools.lru_cache(maxsize=1 << 16)
def learning_domain(host: str) -> str:
    """The site ``host`` belongs to, for learning: its registrable domain by the whole
    Public Suffix List, the ICANN and the private section (``a.b.example.co.uk`` →
    ``example.co.uk``, ``x.user.github.io`` → ``user.github.io``; a name under a suffix
    the list does not know, ``a1.evil.test``, → ``evil.test``). An IP address, a bare
    public suffix or a single label is its own site.

    >>> learning_domain("a1.evil.test"), learning_domain("10.0.0.1")
    ('evil.test', '10.0.0.1')
    """
    host = host.lower().rstrip(".")
    if not host or host.startswith("[") or _looks_numeric(host):
        return host
    found = _fullsuffix_list().privatesuffix(host)
    return found if found else host


def _looks_numeric(host: str) -> bool:
    """An IPv4 address in any spelling the URL parser accepts (last label numeric)."""
    last = host.rsplit(".", 1)[-1]
    return last.isdigit() or last.startswith("0x") or ":" in host


@functools.lru_cache(maxsize=1 << 16)
def _domain_suffixes(host: str) -> tuple[str, ...]:
    labels = host.split(".")
    public = suffix_list().publicsuffix(host)
    public_labels = public.count(".") + 1 if public else 1
    return (host, *(".".join(labels[i:]) for i in range(1, len(labels) - public_labels)))


def host_suffixes(host: str, *, is_ip: bool = False) -> tuple[str, ...]:
    """The host, then each parent at a label boundary, stopping above the public suffix.

    ``a.b.example.co.uk`` → ``a.b.example.co.uk``, ``b.example.co.uk``,
    ``example.co.uk``. An IP address has only itself.
    """
    if is_ip or host.startswith("["):
        return (host,)
    return _domain_suffixes(host)


def path_prefixes(path: str, query: str | None = None) -> list[str]:
    """The path with its query, the path, then each prefix ending at a ``/`` (longest first)."""
    return list(_iter_path_prefixes(path, query))


#: How many expressions :func:`lookup_expressions` returns at most by default: their number
#: is host labels × path prefixes, which a hostile URL makes quadratic in its length.
MAX_EXPRESSIONS = 1_000


def lookup_expressions(
    url: str | URL, profile: Profile = FILTER, *, limit: int | None = MAX_EXPRESSIONS
) -> list[str]:
    """Every ``host/path[?query]`` a rule covering ``url`` can be written as, most specific first.

    >>> lookup_expressions("http://a.b.example.com/1/2.html?x=y")[:3]
    ['a.b.example.com/1/2.html?x=y', 'a.b.example.com/1/2.html', 'a.b.example.com/1/']

    At most ``limit`` expressions (the most specific ones; ``None``: all of them).
    The matchers never build this list: they probe only the depths their rules have.
    """
    parts = url if isinstance(url, URL) else parse_url(url, profile)
    out: list[str] = []
    for host in _iter_host_suffixes(parts.host, parts.is_ip):
        for path in _iter_path_prefixes(parts.path, parts.query):
            if limit is not None and len(out) >= limit:
                return out
            out.append(host + path)
    return out


def _iter_host_suffixes(host: str, is_ip: bool) -> Iterator[str]:
    """:func:`host_suffixes`, one at a time (a caller that stops early builds no more)."""
    if is_ip or host.startswith("["):
        yield host
        return
    public = suffix_list().publicsuffix(host)
    count = host.count(".") + 1 - (public.count(".") + 1 if public else 1)
    yield host
    at = host.find(".")
    for _ in range(count - 1):
        yield host[at + 1 :]
        at = host.find(".", at + 1)


def _iter_path_prefixes(path: str, query: str | None) -> Iterator[str]:
    """:func:`path_prefixes`, one at a time."""
    if query is not None:
        yield f"{path}?{query}"
    yield path
    cut = path.rfind("/", 0, len(path) - 1)
    while cut >= 0:
        yield path[: cut + 1]
        cut = path.rfind("/", 0, cut)
