"""urlsieve: fast, bypass-proof URL filtering and URL de-duplication.

The public API is re-exported here; everything else is an implementation detail.
"""

from urlsieve.exceptions import (
    ConfigError,
    InvalidURL,
    ProfileMismatch,
    ResolveError,
    RuleSyntaxError,
    SnapshotError,
    StoreClosed,
    StoreCorrupt,
    StoreError,
    StoreFull,
    StoreReadOnly,
    StoreUnavailable,
    UrlsieveError,
)
from urlsieve.filter import Filter
from urlsieve.match import Explanation, Verdict
from urlsieve.rules import Rule, parse_rule
from urlsieve.seen import SeenStore, StoreStats, open_seen
from urlsieve.url import (
    CRAWLER,
    FILTER,
    URL,
    Profile,
    canonicalize,
    crawler_profile,
    lookup_expressions,
    parse_url,
)

__version__ = "0.1.0"

__all__ = [
    "CRAWLER",
    "ConfigError",
    "Explanation",
    "FILTER",
    "Filter",
    "InvalidURL",
    "Profile",
    "ProfileMismatch",
    "ResolveError",
    "Rule",
    "RuleSyntaxError",
    "SeenStore",
    "SnapshotError",
    "StoreClosed",
    "StoreCorrupt",
    "StoreError",
    "StoreFull",
    "StoreReadOnly",
    "StoreStats",
    "StoreUnavailable",
    "URL",
    "UrlsieveError",
    "Verdict",
    "__version__",
    "canonicalize",
    "crawler_profile",
    "lookup_expressions",
    "open_seen",
    "parse_rule",
    "parse_url",
]
