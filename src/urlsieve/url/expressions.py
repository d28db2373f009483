"""Lookup expressions: the strings a rule for a URL can be stored under."""

from __future__ import annotations

import functools

from publicsuffixlist import PublicSuffixList

from urlsieve.url.model import URL
from urlsieve.url.parse import parse_url
from urlsieve.url.profile import FILTER, Profile

__all__ = ["host_suffixes", "is_public_suffix", "lookup_expressions", "path_prefixes"]


@functools.cache
def _suffix_list() -> PublicSuffixList:
    # ICANN section only: a private suffix such as github.io stays blockable as a whole.
    return PublicSuffixList(only_icann=True)


def is_public_suffix(host: str) -> bool:
    """True for a bare public suffix (``com``, ``co.uk``) of the ICANN section of the PSL."""
    return bool(_suffix_list().is_public(host))


@functools.lru_cache(maxsize=1 << 16)
def _domain_suffixes(host: str) -> tuple[str, ...]:
    labels = host.split(".")
    public = _suffix_list().publicsuffix(host)
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
    out = [f"{path}?{query}", path] if query is not None else [path]
    cut = path.rfind("/", 0, len(path) - 1)
    while cut >= 0:
        out.append(path[: cut + 1])
        cut = path.rfind("/", 0, cut)
    return out


def lookup_expressions(url: str | URL, profile: Profile = FILTER) -> list[str]:
    """Every ``host/path[?query]`` a rule covering ``url`` can be written as, most specific first.

    >>> lookup_expressions("http://a.b.example.com/1/2.html?x=y")[:3]
    ['a.b.example.com/1/2.html?x=y', 'a.b.example.com/1/2.html', 'a.b.example.com/1/']
    """
    parts = url if isinstance(url, URL) else parse_url(url, profile)
    paths = path_prefixes(parts.path, parts.query)
    return [h + p for h in host_suffixes(parts.host, is_ip=parts.is_ip) for p in paths]
