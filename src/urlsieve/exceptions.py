"""Every error urlsieve raises on purpose.

Hierarchy::

    UrlsieveError                      base of everything below
    ├── InvalidURL (ValueError)        a string that is not a usable URL, with the reason
    ├── RuleSyntaxError (ValueError)   a bad line in a rule list (``path:line: reason``)
    ├── ConfigError (ValueError)       contradictory or invalid options
    ├── SnapshotError                  a compiled snapshot that cannot be used (``path: reason``)
    ├── HelperProtocolError (ValueError) a Squid helper request line that cannot be read
    ├── NoRules                        a gateway process has no rules loaded (and why)
    ├── ResolveError                   a name server that does not answer or fails (timeout,
    │                                  SERVFAIL, refused); a name that does not exist is not one
    ├── StoreError                     a store (seen store, queue, verdicts, grants, index)
    │                                  cannot do what was asked
    │   ├── StoreCorrupt               a file that is not a store, truncated, or damaged
    │   ├── ProfileMismatch            a store written under another canonical profile
    │   ├── StoreReadOnly              a write to a store opened read-only
    │   ├── StoreFull                  the disk (or a size cap) is full: the write did not happen
    │   ├── StoreClosed                an operation on a store after close()
    │   └── StoreUnavailable           a server that does not answer or refuses
    │                                  (network, OOM, READONLY)
    └── LearnError                     the self-learning gateway (``urlsieve.learn``)
        ├── QueueCorrupt               a queue or verdict database that cannot be read (path,
        │                              what to do); also a StoreCorrupt
        ├── QueueUnavailable           the learner's queue or verdict store does not answer
        │                              (the learner retries); also a StoreUnavailable
        └── SpoolCorrupt               a WARC segment that cannot be read (path, what to do);
                                       also a StoreCorrupt

Every store, whatever its family, raises the ``Store*`` errors: ``except StoreUnavailable``
catches a queue, verdict store, grant store or seen store that cannot be reached. The
learner's own names stay as subclasses, so code that catches them keeps working.

Driver and OS errors are translated where they cross into urlsieve, with
``raise ... from exc`` so the original stays visible.
"""

from __future__ import annotations

__all__ = [
    "ConfigError",
    "HelperProtocolError",
    "InvalidURL",
    "LearnError",
    "NoRules",
    "ProfileMismatch",
    "QueueCorrupt",
    "QueueUnavailable",
    "ResolveError",
    "RuleSyntaxError",
    "SnapshotError",
    "SpoolCorrupt",
    "StoreClosed",
    "StoreCorrupt",
    "StoreError",
    "StoreFull",
    "StoreReadOnly",
    "StoreUnavailable",
    "UrlsieveError",
]


class UrlsieveError(Exception):
    """Base class of every error urlsieve raises on purpose."""


class InvalidURL(UrlsieveError, ValueError):
    """A string that cannot be canonicalised; ``reason`` says why."""

    def __init__(self, reason: str, url: str | None = None) -> None:
        self.reason = reason
        self.url = url
        super().__init__(reason if url is None else f"{reason}: {url!r}")


class RuleSyntaxError(UrlsieveError, ValueError):
    """A rule list line that cannot be read; the message is ``source:line: reason``."""

    def __init__(self, reason: str, source: str | None = None, line: int | None = None) -> None:
        self.reason = reason
        self.source = source
        self.line = line
        where = "" if source is None else (f"{source}:{line}: " if line else f"{source}: ")
        super().__init__(f"{where}{reason}")


class ConfigError(UrlsieveError, ValueError):
    """Invalid or contradictory options; the message says how to fix them."""


class SnapshotError(UrlsieveError):
    """A file that is not a usable snapshot: wrong magic or format version, truncated, corrupt."""

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"{path}: {reason}")


class HelperProtocolError(UrlsieveError, ValueError):
    """A Squid helper request line that cannot be read; ``channel`` is echoed in the BH reply."""

    def __init__(self, reason: str, channel: str | None = None) -> None:
        self.reason = reason
        self.channel = channel
        super().__init__(reason)


class NoRules(UrlsieveError):
    """No rule set could be loaded; the message says why (the failure mode decides)."""


class ResolveError(UrlsieveError):
    """DNS failed for a host name (a name that does not exist is an empty answer, not this)."""

    def __init__(self, host: str, reason: str) -> None:
        self.host = host
        self.reason = reason
        super().__init__(f"cannot resolve {host!r}: {reason}")


class StoreError(UrlsieveError):
    """A seen store cannot do what was asked."""


class StoreCorrupt(StoreError):
    """A file that is not a store of the expected kind, truncated, or damaged."""


class ProfileMismatch(StoreError):
    """A persistent store written under another canonical profile (or profile version)."""


class StoreReadOnly(StoreError):
    """A write to a store that was opened read-only."""


class StoreFull(StoreError):
    """No space left (disk or size cap): the write did not happen."""


class StoreClosed(StoreError):
    """An operation on a store that has been closed (every backend raises this one)."""


class StoreUnavailable(StoreError):
    """A store's server does not answer or refuses the command (network, OOM, READONLY)."""


class LearnError(UrlsieveError):
    """The self-learning gateway (:mod:`urlsieve.learn`) cannot do what was asked."""


class QueueCorrupt(StoreCorrupt, LearnError):
    """A queue or verdict database that is not one, or is damaged; the message names the
    file and the fix. A :class:`StoreCorrupt` like every damaged store."""

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"{path}: {reason}")


class QueueUnavailable(StoreUnavailable, LearnError):
    """The learner's queue or verdict store does not answer or refuses; nothing queued is
    lost, retry later. A :class:`StoreUnavailable` like every store that cannot be reached."""


class SpoolCorrupt(StoreCorrupt, LearnError):
    """A WARC segment that cannot be read; the message names the file and the fix."""

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"{path}: {reason}")
