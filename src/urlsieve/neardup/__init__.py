"""Seed 004: resolvers, two IDs per URL, alias and mirror detection, near-duplicate content."""

from urlsieve.neardup.aliases import (
    AliasDecision,
    AliasTracker,
    MirrorDetector,
    PagePair,
    Sighting,
    UrlIds,
    ip_url,
    url_ids,
)
from urlsieve.neardup.resolver import (
    AsyncDNSResolver,
    DNSResolver,
    Resolver,
    StaticResolver,
    open_resolver,
)

__all__ = [
    "AliasDecision",
    "AliasTracker",
    "AsyncDNSResolver",
    "DNSResolver",
    "MirrorDetector",
    "PagePair",
    "Resolver",
    "Sighting",
    "StaticResolver",
    "UrlIds",
    "ip_url",
    "open_resolver",
    "url_ids",
]
