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

Relative paths are relative to the file's directory. Every key is checked: a typo is an
error naming the key and the keys known.
"""

from __future__ import annotations

import math
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from urlsieve.exceptions import ConfigError
from urlsieve.store.spec import resolve_spec

__all__ = ["LearnSettings", "read_learn_settings"]


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


_TOP = {
    "queue", "unknown", "overlay", "directory", "phrases", "banned", "exceptions", "lexicons",
    "limit", "limits", "promote_after", "batch", "lease_seconds", "crawl", "spool", "verdicts",
    "unclassifiable", "burst", "pending", "pending_url",
}  # fmt: skip
_CRAWL = {
    "user_agent": str, "timeout": float, "max_bytes": int, "concurrency": int, "per_host": int,
    "delay": float, "max_redirects": int, "robots": bool, "allow_networks": list, "hosts": dict,
    "content_types": list, "ports": list, "accept": str, "accept_language": str,
    "check_user_agent": str, "robots_agent": str, "scan_bytes": int,
}  # fmt: skip
_SPOOL = {"segment_bytes": int, "segment_seconds": float, "max_bytes": int}


def read_learn_settings(path: str) -> LearnSettings:
    """The ``[learn]`` section of the TOML file at ``path``; :class:`ConfigError` naming
    the key for anything missing, unknown or of the wrong type."""
    try:
        with open(path, "rb") as fh:
            data = tomllib.load(fh)
    except OSError as exc:
        raise ConfigError(f"config file {path}: {exc.strerror or exc}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {path}: not valid TOML: {exc}") from exc
    section = data.get("learn")
    if not isinstance(section, dict):
        raise ConfigError(
            f"config file {path}: no [learn] section: set at least learn.queue, "
            "learn.directory and learn.overlay"
        )
    return learn_settings(section, path)


def learn_settings(section: Mapping[str, Any], path: str) -> LearnSettings:
    where = f"{path} [learn]"
    base = Path(path).resolve().parent

    def bad(key: str, expected: str) -> ConfigError:
        return ConfigError(f"{where}: {key} must be {expected}, not {section.get(key)!r}")

    for key in section:
        if key not in _TOP:
            raise ConfigError(
                f"{where}: unknown option learn.{key} (known: {', '.join(sorted(_TOP))})"
            )
    for key in ("queue", "directory", "overlay"):
        if not isinstance(section.get(key), str) or not section[key]:
            raise ConfigError(f"{where}: learn.{key} is required (a string)")

    def one_path(value: Any, key: str) -> Path:
        if not isinstance(value, str) or not value:
            raise bad(key, "a path")
        p = Path(value).expanduser()
        return p if p.is_absolute() else base / p

    def paths(key: str) -> tuple[Path, ...]:
        value = section.get(key, [])
        if not isinstance(value, list):
            raise bad(key, "a list of paths")
        return tuple(one_path(v, key) for v in value)

    def integer(key: str, default: int, low: int, high: int) -> int:
        value = section.get(key, default)
        if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
            raise bad(key, f"an integer from {low} to {high}")
        return value

    lexicons = []
    raw = section.get("lexicons", [])
    if not isinstance(raw, list):
        raise bad("lexicons", "a list of {path, category, weight} tables")
    for at, item in enumerate(raw, 1):
        if (
            not isinstance(item, dict)
            or set(item) != {"path", "category", "weight"}
            or not isinstance(item["category"], str)
            or not isinstance(item["weight"], int)
        ):
            raise ConfigError(
                f'{where}: lexicons #{at} must be {{ path = "…", category = "…", weight = N }}'
            )
        lexicons.append((one_path(item["path"], "lexicons"), item["category"], item["weight"]))
    limits = section.get("limits", {})
    if not isinstance(limits, dict) or not all(
        isinstance(v, int) and not isinstance(v, bool) for v in limits.values()
    ):
        raise bad("limits", "a table of category = integer")
    lease = section.get("lease_seconds", 120.0)
    if not isinstance(lease, int | float) or not (math.isfinite(lease) and 1 <= lease <= 86400):
        raise bad("lease_seconds", "a number of seconds from 1 to 86400")
    unknown = section.get("unknown", "allow-first")
    if unknown not in ("allow-first", "block", "allow"):
        raise bad("unknown", "'allow-first', 'block' or 'allow'")
    unclassifiable = section.get("unclassifiable", "block")
    if unclassifiable not in ("block", "allow"):
        raise bad("unclassifiable", "'block' or 'allow' (a policy may warn on the category)")
    crawl = _table(section, "crawl", _CRAWL, where)
    spool = _table(section, "spool", _SPOOL, where)
    return LearnSettings(
        queue=resolve_spec(str(section["queue"]), base),
        verdicts=_verdicts_spec(section.get("verdicts"), base, where),
        directory=one_path(section["directory"], "directory"),
        overlay=one_path(section["overlay"], "overlay"),
        unknown=unknown,
        unclassifiable=unclassifiable,
        phrases=paths("phrases"),
        banned=paths("banned"),
        exceptions=paths("exceptions"),
        lexicons=tuple(lexicons),
        limit=integer("limit", 50, 1, 1_000_000),
        limits=dict(limits),
        promote_after=integer("promote_after", 3, 0, 1_000_000),
        batch=integer("batch", 32, 1, 10_000),
        lease_seconds=float(lease),
        crawl=crawl,
        spool=spool,
        source_file=path,
    )


def _verdicts_spec(value: Any, base: Path, where: str) -> str | None:
    """``learn.verdicts``: a server URL as it is, a path relative to the file."""
    if value is None:
        return None
    if not isinstance(value, str) or not value:
        raise ConfigError(f"{where}: learn.verdicts must be a path or a valkey:// URL")
    if "://" in value:
        return value
    path = Path(value).expanduser()
    return str(path if path.is_absolute() else base / path)


def _table(
    section: Mapping[str, Any], name: str, kinds: Mapping[str, type], where: str
) -> dict[str, Any]:
    table = section.get(name, {})
    if not isinstance(table, dict):
        raise ConfigError(f"{where}: learn.{name} must be a table")
    out: dict[str, Any] = {}
    for key, given in table.items():
        kind = kinds.get(key)
        if kind is None:
            raise ConfigError(
                f"{where}: unknown option learn.{name}.{key} (known: {', '.join(sorted(kinds))})"
            )
        value = given
        if kind is float and isinstance(given, int) and not isinstance(given, bool):
            value = float(given)
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise ConfigError(f"{where}: learn.{name}.{key} must be {kind.__name__}, not {value!r}")
        out[key] = tuple(value) if isinstance(value, list) else value
    return out
