"""Seed 004: resolvers, two IDs per URL, alias and mirror detection, near-duplicate content."""

from urlsieve.neardup.aliases import (
    AliasCheck,
    AliasDecision,
    AliasTracker,
    MirrorDetector,
    PagePair,
    Sighting,
    UrlIds,
    ip_url,
    url_ids,
)
from urlsieve.neardup.index import (
    FileIndex,
    MemoryIndex,
    NearDupIndex,
    ValkeyIndex,
    k_for_jaccard,
    open_index,
)
from urlsieve.neardup.resolver import (
    AsyncDNSResolver,
    DNSResolver,
    Resolver,
    StaticResolver,
    open_resolver,
)
from urlsieve.neardup.simhash import hamming, simhash

__all__ = [
    "AliasCheck",
    "AliasDecision",
    "AliasTracker",
    "AsyncDNSResolver",
    "DNSResolver",
    "FileIndex",
    "MemoryIndex",
    "MirrorDetector",
    "NearDupIndex",
    "PagePair",
    "Resolver",
    "Sighting",
    "StaticResolver",
    "UrlIds",
    "ValkeyIndex",
    "hamming",
    "ip_url",
    "k_for_jaccard",
    "open_index",
    "open_resolver",
    "simhash",
    "url_ids",
]
