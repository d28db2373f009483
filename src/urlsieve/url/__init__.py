"""Canonical URLs and lookup expressions (docs/architecture.md, "Canonical URLs")."""

from urlsieve.url.expressions import (
    host_suffixes,
    is_public_suffix,
    lookup_expressions,
    path_prefixes,
)
from urlsieve.url.model import URL
from urlsieve.url.parse import MAX_URL_LENGTH, SCHEMES, canonicalize, parse_url
from urlsieve.url.profile import CRAWLER, FILTER, Profile, crawler_profile

__all__ = [
    "CRAWLER",
    "FILTER",
    "MAX_URL_LENGTH",
    "Profile",
    "SCHEMES",
    "URL",
    "canonicalize",
    "crawler_profile",
    "host_suffixes",
    "is_public_suffix",
    "lookup_expressions",
    "parse_url",
    "path_prefixes",
]
