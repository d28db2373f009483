"""The learner's settings: the ``[learn]`` section of the gateway's TOML file.

.. code-block:: toml

    [learn]
    queue = "sqlite:/var/lib/urlsieve/learn/queue.db"   # shared with the gateway
    unknown = "allow-first"                            # the gateway's side (see gateway.config)
    burst = 3                      # gateway: requests of an unknown site that pass, then…
    pending = "check"              # …a self-reloading "checking" page | block | pass
    unclassifiable = "block"       # a URL the crawler cannot read: block | allow (see runner)
    overlay = "/var/lib/urlsieve/learn/learned.snap"   # the learned rules the gateway loads
    directory = "/var/lib/urlsieve/learn"              # verdicts.db, spool/, learned/ lists
    verdicts = "valkey://10.0.0.5:6379/0?prefix=site"  # a fleet's shared verdicts (optional)
    phrases = ["/etc/urlsieve/phraselists/weightedphraselist"]   # E2Guardian weighted lists
    banned = ["/etc/urlsieve/phraselists/bannedphraselist"]
    exceptions = ["/etc/urlsieve/phraselists/exceptionphraselist"]
    lexicons = [{ path = "/etc/urlsieve/words.txt", category = "adult", weight = 20 }]
    limit = 50                     # the naughtiness limit (E2Guardian's naughtinesslimit)
    limits = { gambling = 40 }     # per category
    promote_after = 3              # pages of one site alike → a domain rule (0: off)
    batch = 32                     # URLs claimed at a time
    lease_seconds = 120            # a claimed URL not done by then goes to another learner

    [learn.crawl]
    user_agent = "Mozilla/5.0 …"   # a browser's by default, with its Accept headers
    check_user_agent = "urlsieve-learn/…"   # a clean page is fetched again as this ("": off)
    timeout = 10.0
    max_bytes = 2000000            # kept as the page
    scan_bytes = 32000000          # a longer page is classified as it is read, up to this
    concurrency = 64
    per_host = 2
    delay = 0.0
    robots = true
    allow_networks = []            # e.g. ["127.0.0.0/8"]: private targets allowed explicitly
    ports = [80, 443, 8000, 8080, 8443]   # ports fetched from public addresses
    hosts = {}                     # static name → address map, checked before DNS

    [learn.spool]
    segment_bytes = 67108864
    segment_seconds = 0.1          # a segment is closed (handed to the classifier) this soon
    max_bytes = 1073741824

The section is read by the assembly room (:func:`urlsieve.config.read_config`, with the
rest of the file): relative paths are relative to the file's directory, and every key is
checked (a typo is an error naming the key and the keys known).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["LearnSettings"]


@dataclass(frozen=True)
class LearnSettings:
    queue: str
    directory: Path
    overlay: Path
    unknown: str = "allow-first"
    #: The action of an ``unclassifiable`` verdict: "block" or "allow".
    unclassifiable: str = "block"
    phrases: tuple[Path, ...] = ()
    banned: tuple[Path, ...] = ()
    exceptions: tuple[Path, ...] = ()
    lexicons: tuple[tuple[Path, str, int], ...] = ()
    limit: int = 50
    limits: Mapping[str, int] = field(default_factory=dict)
    promote_after: int = 3
    batch: int = 32
    lease_seconds: float = 120.0
    crawl: Mapping[str, Any] = field(default_factory=dict)
    spool: Mapping[str, Any] = field(default_factory=dict)
    source_file: str | None = None

    #: A ``valkey://`` URL shared by a fleet's learners; None: ``directory/verdicts.db``.
    verdicts: str | None = None

    @property
    def verdicts_path(self) -> Path:
        return self.directory / "verdicts.db"

    @property
    def verdicts_spec(self) -> str:
        """Where the verdicts are: :attr:`verdicts`, else the local SQLite file."""
        return self.verdicts or str(self.verdicts_path)

    @property
    def spool_dir(self) -> Path:
        return self.directory / "spool"

    @property
    def tree(self) -> Path:
        return self.directory / "learned"


#: Names moved to the assembly room (:mod:`urlsieve.config`), importable from here for
#: one release: ``read_learn_settings(path)`` is ``read_config(path, env={},
#: needs_rules=False).learner()``; ``learn_settings`` is :func:`urlsieve.config.learn_settings`.
_MOVED = ("learn_settings", "read_learn_settings")


def __getattr__(name: str) -> Any:
    if name == "learn_settings":
        from urlsieve.config import model

        return model.learn_settings
    if name == "read_learn_settings":
        from urlsieve.config import read_config

        def read_learn_settings(path: str) -> LearnSettings:
            return read_config(path, env={}, needs_rules=False).learner()

        return read_learn_settings
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
