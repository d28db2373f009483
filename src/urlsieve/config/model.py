"""The configuration file, read once: one typed model, one casting style, one path rule.

:func:`read_config` reads the TOML file (``--config FILE`` or ``URLSIEVE_CONFIG``) once
and returns a frozen :class:`Config`: the gateway's options (:class:`GatewayConfig`, with
the policy written in the file's ``[[source]]``/``[[acl]]`` tables), and the learner's
``[learn]`` section (:class:`~urlsieve.learn.config.LearnSettings`). Each part declares
the settings it needs; this module alone knows which TOML key, environment variable and
kind each one is read from (:data:`OPTIONS`, :data:`LEARN_OPTIONS`), and casts them all
with :func:`cast`.

Precedence, highest first: command-line options (``overrides``), ``URLSIEVE_*``
environment variables (:data:`ENV_VARS`), the file, defaults.

**One rule for relative paths**: every path-valued option written in the file (lists,
allow lists, snapshot, squidGuard configuration, overlay, token file, decision stream,
console templates and reviews, the learner's directory and phrase lists, and the file of
a store spec such as ``sqlite:q.db``, ``bloom:seen.bf`` or the policy's ``warn_store``)
is relative to the file's directory, whatever the current directory. A path given on
the command line or in the environment is relative to the current directory, as a shell
user expects.

The library never reads the environment: :func:`read_config` takes the mapping to read
(the CLI passes ``os.environ``). Every error is a :class:`ConfigError` saying where:
``FILE [section]: key must be …``, ``$URLSIEVE_X: …`` or ``command line: …``.
"""

from __future__ import annotations

import math
import os
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from urlsieve.exceptions import ConfigError
from urlsieve.gateway.config import FailureMode, GatewayConfig
from urlsieve.gateway.protocol import HelperMode
from urlsieve.policy.model import Policy
from urlsieve.policy.native import POLICY_SECTIONS, has_policy, read_native
from urlsieve.store.spec import parse_flag, resolve_spec

if TYPE_CHECKING:  # the learner's package is loaded only when its section is read
    from urlsieve.learn.config import LearnSettings

__all__ = [
    "ENV_VARS",
    "LEARN_OPTIONS",
    "OPTIONS",
    "Config",
    "cast",
    "learn_settings",
    "load_config",
    "read_config",
    "read_policy",
]


# -- the options -------------------------------------------------------------------------

#: :class:`GatewayConfig` field → (TOML section, TOML key, environment variable, kind).
OPTIONS: dict[str, tuple[str, str, str, str]] = {
    "lists": ("rules", "lists", "URLSIEVE_LISTS", "paths"),
    "allow": ("rules", "allow", "URLSIEVE_ALLOW", "paths"),
    "categories": ("rules", "categories", "URLSIEVE_CATEGORIES", "names"),
    "snapshot": ("rules", "snapshot", "URLSIEVE_SNAPSHOT", "path"),
    "squidguard_conf": ("rules", "squidguard_conf", "URLSIEVE_SQUIDGUARD_CONF", "path"),
    "mode": ("squid", "mode", "URLSIEVE_MODE", "mode"),
    "redirect_url": ("squid", "redirect_url", "URLSIEVE_REDIRECT_URL", "str"),
    "redirect_status": ("squid", "redirect_status", "URLSIEVE_REDIRECT_STATUS", "int"),
    "failure_mode": ("squid", "failure_mode", "URLSIEVE_FAILURE_MODE", "failure"),
    "reload_check_seconds": ("squid", "reload_check_seconds", "URLSIEVE_RELOAD_CHECK", "float"),
    "bind": ("service", "bind", "URLSIEVE_BIND", "str"),
    "token": ("service", "token", "URLSIEVE_TOKEN", "str"),
    "token_file": ("service", "token_file", "URLSIEVE_TOKEN_FILE", "path"),
    "seen_store": ("service", "seen_store", "URLSIEVE_SEEN_STORE", "spec"),
    "trusted_proxies": ("service", "trusted_proxies", "URLSIEVE_TRUSTED_PROXIES", "addresses"),
    "client_header": ("service", "client_header", "URLSIEVE_CLIENT_HEADER", "str"),
    "user_header": ("service", "user_header", "URLSIEVE_USER_HEADER", "str"),
    "overlay": ("learn", "overlay", "URLSIEVE_OVERLAY", "path"),
    "learn_queue": ("learn", "queue", "URLSIEVE_LEARN_QUEUE", "spec"),
    "unknown": ("learn", "unknown", "URLSIEVE_UNKNOWN", "str"),
    "burst": ("learn", "burst", "URLSIEVE_BURST", "int"),
    "pending": ("learn", "pending", "URLSIEVE_PENDING", "str"),
    "pending_url": ("learn", "pending_url", "URLSIEVE_PENDING_URL", "str"),
    "decision_log": ("console", "decision_log", "URLSIEVE_DECISION_LOG", "path"),
    "console_password_hash": (
        "console",
        "password_hash",
        "URLSIEVE_CONSOLE_PASSWORD_HASH",
        "str",
    ),
    "console_clients": ("console", "clients", "URLSIEVE_CONSOLE_CLIENTS", "addresses"),
    "console_secure_cookies": (
        "console",
        "secure_cookies",
        "URLSIEVE_CONSOLE_SECURE_COOKIES",
        "bool",
    ),
    "console_session_minutes": (
        "console",
        "session_minutes",
        "URLSIEVE_CONSOLE_SESSION_MINUTES",
        "float",
    ),
    "console_templates": ("console", "templates", "URLSIEVE_CONSOLE_TEMPLATES", "path"),
    "console_reviews": ("console", "reviews", "URLSIEVE_CONSOLE_REVIEWS", "path"),
}

#: Environment variable → option, for the documentation and ``config check``.
ENV_VARS = {env: name for name, (_, _, env, _) in OPTIONS.items()} | {
    "URLSIEVE_CONFIG": "the config file"
}

#: The learner's ``[learn]`` keys (:class:`LearnSettings` fields) → (kind, bounds or
#: choices, default). ``queue``, ``overlay`` and ``unknown`` are the gateway's too.
LEARN_OPTIONS: dict[str, tuple[str, Any, Any]] = {
    "queue": ("spec", None, None),
    "directory": ("path", None, None),
    "overlay": ("path", None, None),
    "verdicts": ("store", None, None),
    "unknown": ("choice", ("allow-first", "block", "allow"), "allow-first"),
    "unclassifiable": ("choice", ("block", "allow"), "block"),
    "phrases": ("paths", None, ()),
    "banned": ("paths", None, ()),
    "exceptions": ("paths", None, ()),
    "lexicons": ("lexicons", None, ()),
    "limit": ("int", (1, 1_000_000), 50),
    "limits": ("int_table", None, {}),
    "promote_after": ("int", (0, 1_000_000), 3),
    "batch": ("int", (1, 10_000), 32),
    "lease_seconds": ("float", (1, 86400), 120.0),
    "crawl": ("table", "crawl", {}),
    "spool": ("table", "spool", {}),
    # the gateway's own [learn] keys (GatewayConfig): cast with OPTIONS
    "burst": ("gateway", None, None),
    "pending": ("gateway", None, None),
    "pending_url": ("gateway", None, None),
}
#: The learner's required keys: a [learn] section without them configures the gateway's
#: side only (the learner runs elsewhere).
LEARN_REQUIRED = ("queue", "directory", "overlay")

#: The typed keys of ``[learn.crawl]`` and ``[learn.spool]``.
TABLES: dict[str, dict[str, type]] = {
    "crawl": {
        "user_agent": str, "timeout": float, "max_bytes": int, "concurrency": int,
        "per_host": int, "delay": float, "max_redirects": int, "robots": bool,
        "allow_networks": list, "hosts": dict, "content_types": list, "ports": list,
        "accept": str, "accept_language": str, "check_user_agent": str, "robots_agent": str,
        "scan_bytes": int,
    },
    "spool": {"segment_bytes": int, "segment_seconds": float, "max_bytes": int},
}  # fmt: skip


# -- casting -----------------------------------------------------------------------------


def cast(
    name: str, kind: str, value: Any, where: str, *, base: Path | None = None, extra: Any = None
) -> Any:
    """``value`` of option ``name`` as ``kind``, or a :class:`ConfigError` saying
    ``where: name must be …``. Relative paths are joined to ``base`` (the config file's
    directory; None: left relative to the current directory)."""

    def bad(expected: str) -> ConfigError:
        return ConfigError(f"{where}: {name} must be {expected}, not {value!r}")

    def path(item: Any) -> str:
        if not isinstance(item, str) or not item:
            raise bad("a path (string)")
        expanded = Path(item).expanduser()
        return str(base / expanded if base is not None and not expanded.is_absolute() else expanded)

    def words(what: str) -> list[str]:
        items = value
        if isinstance(value, str):  # environment: comma-separated
            items = [v.strip() for v in value.split(",") if v.strip()]
        if not isinstance(items, list) or not all(isinstance(v, str) for v in items):
            raise bad(what)
        return items

    if kind == "paths":
        items = [v for v in value.split(os.pathsep) if v] if isinstance(value, str) else value
        if not isinstance(items, list):
            raise bad("a list of paths")
        return tuple(path(v) for v in items)
    if kind == "path":
        return path(value)
    if kind == "spec":  # a store or queue spec: a relative file in it is the file's
        if not isinstance(value, str) or not value:
            raise bad("a spec string (e.g. 'sqlite:PATH')")
        return resolve_spec(value, base)
    if kind == "store":  # a server URL, a spec, or a plain path
        if not isinstance(value, str) or not value:
            raise bad("a path or a valkey:// URL")
        if "://" in value:
            return value
        return resolve_spec(value, base) if ":" in value else path(value)
    if kind == "names":
        items = words("a list of category names")
        if not all(items):
            raise bad("a list of category names")
        return tuple(items)
    if kind == "addresses":
        from urlsieve.policy.clients import AddressSyntaxError, parse_address

        items = words("a list of addresses or networks")
        for item in items:
            try:
                parse_address(item)
            except AddressSyntaxError as exc:
                raise ConfigError(f"{where}: {name}: {exc}") from None
        return tuple(items)
    if kind == "str":
        if not isinstance(value, str):
            raise bad("a string")
        return value
    if kind == "choice":
        if value not in extra:
            raise bad(" or ".join(repr(c) for c in extra))
        return value
    if kind == "int":
        number = int(value) if isinstance(value, str) and value.strip().isdigit() else value
        wrong = not isinstance(number, int) or isinstance(number, bool)
        if wrong or (extra is not None and not extra[0] <= number <= extra[1]):
            raise bad(
                "an integer" if extra is None else f"an integer from {extra[0]} to {extra[1]}"
            )
        return number
    if kind == "float":
        try:
            number = float(value)
        except (TypeError, ValueError):
            raise bad("a number") from None
        if isinstance(value, bool) or (
            extra is not None and not (math.isfinite(number) and extra[0] <= number <= extra[1])
        ):
            raise bad("a number" if extra is None else f"a number from {extra[0]} to {extra[1]}")
        return number
    if kind == "bool":
        flag = parse_flag(value.strip()) if isinstance(value, str) else value  # environment
        if not isinstance(flag, bool):
            raise bad("true or false")
        return flag
    if kind == "mode":
        return _member(HelperMode, value, bad)
    if kind == "failure":
        return _member(FailureMode, value, bad)
    if kind == "int_table":
        if not isinstance(value, dict) or not all(
            isinstance(v, int) and not isinstance(v, bool) for v in value.values()
        ):
            raise bad("a table of category = integer")
        return dict(value)
    if kind == "lexicons":
        return _lexicons(value, where, path, bad)
    if kind == "table":
        return _table(value, extra, where)
    raise AssertionError(kind)  # pragma: no cover


def _member(enum: Any, value: Any, bad: Callable[[str], ConfigError]) -> Any:
    try:
        return enum(value)
    except ValueError:
        raise bad("one of " + ", ".join(repr(m.value) for m in enum)) from None


def _lexicons(
    value: Any, where: str, path: Callable[[Any], str], bad: Callable[[str], ConfigError]
) -> tuple[tuple[Path, str, int], ...]:
    if not isinstance(value, list):
        raise bad("a list of {path, category, weight} tables")
    out = []
    for at, item in enumerate(value, 1):
        if (
            not isinstance(item, dict)
            or set(item) != {"path", "category", "weight"}
            or not isinstance(item["category"], str)
            or not isinstance(item["weight"], int)
        ):
            raise ConfigError(
                f'{where}: lexicons #{at} must be {{ path = "…", category = "…", weight = N }}'
            )
        out.append((Path(path(item["path"])), item["category"], item["weight"]))
    return tuple(out)


def _table(value: Any, name: str, where: str) -> dict[str, Any]:
    kinds = TABLES[name]
    if not isinstance(value, dict):
        raise ConfigError(f"{where}: learn.{name} must be a table")
    out: dict[str, Any] = {}
    for key, given in value.items():
        kind = kinds.get(key)
        if kind is None:
            raise ConfigError(
                f"{where}: unknown option learn.{name}.{key} (known: {', '.join(sorted(kinds))})"
            )
        item = given
        if kind is float and isinstance(given, int) and not isinstance(given, bool):
            item = float(given)
        if not isinstance(item, kind) or (kind is int and isinstance(item, bool)):
            raise ConfigError(f"{where}: learn.{name}.{key} must be {kind.__name__}, not {item!r}")
        out[key] = tuple(item) if isinstance(item, list) else item
    return out


# -- the model ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Config:
    """One configuration file, read and typed: what every entry point (the CLI, the Squid
    helper, the service, the Scrapy integration, the learner) builds its parts from
    (:mod:`urlsieve.config.assemble`)."""

    #: The gateway's options: rules, ``[squid]``, ``[service]``, ``[console]``, the
    #: gateway's side of ``[learn]``, and the policy of the file's tables.
    gateway: GatewayConfig = field(default_factory=GatewayConfig)
    #: The learner's ``[learn]`` section; None when the file has none, or one without the
    #: learner's keys (``learn_missing`` says which).
    learn: LearnSettings | None = None
    learn_missing: str | None = None
    #: The file read (None: defaults, environment and options only).
    path: str | None = None

    @property
    def policy(self) -> Policy | None:
        """The policy of the file's ``[[source]]``/``[[time]]``/``[[dest]]``/``[[acl]]``."""
        return self.gateway.policy

    def learner(self) -> LearnSettings:
        """The learner's settings, or a :class:`ConfigError` saying what is missing."""
        if self.learn is None:
            raise ConfigError(
                self.learn_missing
                or f"config file {self.path or '(none)'}: no [learn] section: set at least "
                "learn.queue, learn.directory and learn.overlay"
            )
        return self.learn


def _read_file(path: str) -> dict[str, Any]:
    try:
        with open(path, "rb") as fh:
            data = tomllib.load(fh)
    except OSError as exc:
        raise ConfigError(f"config file {path}: {exc.strerror or exc}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {path}: not valid TOML: {exc}") from exc
    sections = {section for section, _, _, _ in OPTIONS.values()} | set(POLICY_SECTIONS)
    for section, body in data.items():
        if section in POLICY_SECTIONS:
            continue  # read by urlsieve.policy.native, which checks its own keys
        if section not in sections:
            raise ConfigError(
                f"config file {path}: unknown section [{section}] "
                f"(known: {', '.join(sorted(sections))})"
            )
        if not isinstance(body, dict):
            raise ConfigError(f"config file {path}: [{section}] must be a table")
        known = {key for s, key, _, _ in OPTIONS.values() if s == section}
        if section == "learn":
            known |= set(LEARN_OPTIONS)
        for key in body:
            if key not in known:
                raise ConfigError(
                    f"config file {path}: unknown option {section}.{key} "
                    f"(known in [{section}]: {', '.join(sorted(known))})"
                )
    return data


def learn_settings(section: Mapping[str, Any], path: str) -> LearnSettings:
    """The learner's settings from a ``[learn]`` table of the file at ``path``; every
    key is checked, the learner's required ones (:data:`LEARN_REQUIRED`) too."""
    where = f"{path} [learn]"
    for key in section:
        if key not in LEARN_OPTIONS:
            raise ConfigError(
                f"{where}: unknown option learn.{key} (known: {', '.join(sorted(LEARN_OPTIONS))})"
            )
    for key in LEARN_REQUIRED:
        if not isinstance(section.get(key), str) or not section[key]:
            raise ConfigError(f"{where}: learn.{key} is required (a string)")
    return _learner(section, path)


def _learner(section: Mapping[str, Any], path: str) -> LearnSettings:
    from urlsieve.learn.config import LearnSettings

    return LearnSettings(**_learn_values(section, path), source_file=path)


def _learn_values(section: Mapping[str, Any], path: str) -> dict[str, Any]:
    """The learner's keys of ``section``, cast (:data:`LEARN_OPTIONS`)."""
    where = f"{path} [learn]"
    base = Path(path).resolve().parent
    values: dict[str, Any] = {}
    for key, (kind, extra, default) in LEARN_OPTIONS.items():
        if kind == "gateway":
            continue
        if key in section:
            values[key] = cast(key, kind, section[key], where, base=base, extra=extra)
        elif default is not None:
            values[key] = default
    for key in ("directory", "overlay", "phrases", "banned", "exceptions"):
        if key in values:
            given = values[key]
            values[key] = tuple(map(Path, given)) if isinstance(given, tuple) else Path(given)
    return values


def read_config(
    path: str | None = None,
    *,
    env: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
    needs_rules: bool = True,
    helper: bool = False,
) -> Config:
    """Read the TOML file (``path``, else ``env['URLSIEVE_CONFIG']``, else none) once,
    apply the environment variables in ``env``, then ``overrides`` (command-line options
    by :data:`OPTIONS` name; ``None`` values are ignored), and validate (``needs_rules``:
    some rules must be configured; ``helper``: what the Squid helper needs too, a block
    page unless ``mode`` is ``acl``)."""
    env = env or {}
    overrides = {k: v for k, v in (overrides or {}).items() if v is not None}
    unknown = set(overrides) - set(OPTIONS)
    if unknown:
        raise ConfigError(f"unknown option(s): {', '.join(sorted(unknown))}")
    path = path or env.get("URLSIEVE_CONFIG") or None
    data = _read_file(path) if path else {}
    base = Path(path).resolve().parent if path else None
    values: dict[str, Any] = {}
    origins: dict[str, str] = {}
    for name, (section, key, env_name, kind) in OPTIONS.items():
        if name in overrides:
            values[name] = cast(name, kind, overrides[name], "command line")
            origins[name] = "option"
        elif env_name in env:
            values[name] = cast(name, kind, env[env_name], f"${env_name}")
            origins[name] = f"env:{env_name}"
        elif key in data.get(section, {}):
            values[name] = cast(name, kind, data[section][key], f"{path} [{section}]", base=base)
            origins[name] = "file"
        else:
            origins[name] = "default"
    if path and has_policy(data):
        values["policy"] = read_native(data, path)
    gateway = GatewayConfig(**values, origins=origins, source_file=path)
    gateway.validate(needs_rules=needs_rules, helper=helper)
    learn: LearnSettings | None = None
    missing: str | None = None
    table = data.get("learn")
    if path and isinstance(table, dict):
        absent = [k for k in LEARN_REQUIRED if not table.get(k)]
        if absent:  # the gateway's side only: the learner's keys are checked when it runs
            _learn_values(table, path)
            missing = f"{path} [learn]: learn.{absent[0]} is required (a string)"
        else:
            learn = _learner(table, path)
    return Config(gateway=gateway, learn=learn, learn_missing=missing, path=path)


def load_config(
    path: str | None = None,
    *,
    env: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
    needs_rules: bool = True,
    helper: bool = False,
) -> GatewayConfig:
    """The gateway's options of :func:`read_config` (the same arguments)."""
    return read_config(
        path, env=env, overrides=overrides, needs_rules=needs_rules, helper=helper
    ).gateway


def read_policy(path: str) -> Policy | None:
    """The policy of the config file at ``path`` read again (a reload picks up its
    changes), by the same reader; None when it has no policy tables."""
    data = _read_file(path)
    return read_native(data, path) if has_policy(data) else None
