"""URL de-duplication: seen stores behind one protocol, opened from a spec.

See docs/architecture.md, "Seen stores".
"""

from urlsieve.seen.base import (
    BACKENDS,
    Backend,
    SeenStore,
    StoreSpec,
    StoreStats,
    open_seen,
    parse_spec,
    register_backend,
)
from urlsieve.seen.memory import MemoryStore

__all__ = [
    "BACKENDS",
    "Backend",
    "MemoryStore",
    "SeenStore",
    "StoreSpec",
    "StoreStats",
    "open_seen",
    "parse_spec",
    "register_backend",
]
