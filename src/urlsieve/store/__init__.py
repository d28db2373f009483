"""The storage floor: what every store of urlsieve is built on.

- :mod:`urlsieve.store.spec`: the spec grammar (``backend:location?param=value``), typed
  parameter casting and the :class:`~urlsieve.store.spec.Registry` each family of stores
  keeps its backends in (seen stores, the learner's queue and verdicts, warn grants);
- :mod:`urlsieve.store.base`: the base class every store shares;
- :mod:`urlsieve.store.files`: file plumbing (OS errors as store errors, directory fsync,
  one atomic write, locks);
- :mod:`urlsieve.store.sqlite`: one SQLite connector and its error translation;
- :mod:`urlsieve.store.valkey`: one Valkey/Redis connector and its error translation, and
  the pipelined, cluster-aware router of the seen stores.

Every store raises the ``Store*`` errors of :mod:`urlsieve.exceptions`.
"""

from urlsieve.store.base import ClosingStore
from urlsieve.store.spec import (
    Backend,
    Registry,
    StoreSpec,
    cast_param,
    cast_params,
    parse_spec,
    resolve_spec,
)

__all__ = [
    "Backend",
    "ClosingStore",
    "Registry",
    "StoreSpec",
    "cast_param",
    "cast_params",
    "parse_spec",
    "resolve_spec",
]
