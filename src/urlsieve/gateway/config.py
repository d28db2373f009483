"""The gateway's configuration: one TOML file, environment overrides, validation.

Precedence, highest first: command-line options, ``URLSIEVE_*`` environment
variables, the TOML file (``--config FILE`` or ``URLSIEVE_CONFIG``), defaults.

.. code-block:: toml

    [rules]
    lists = ["/var/lib/urlsieve/ut1"]        # block lists: files or squidGuard category dirs
    allow = ["/etc/urlsieve/allow.txt"]      # allow lists
    categories = ["adult", "malware"]        # block only these categories (default: all)
    snapshot = "/var/lib/urlsieve/rules.snap"  # compiled by `urlsieve compile --config FILE`

    [squid]
    mode = "redirect"                        # redirect | rewrite | acl
    redirect_url = "http://block.lan/?url=%u&category=%c&client=%a"
    redirect_status = 302                    # 301, 302, 303, 307 or 308 (redirect mode)
    failure_mode = "closed"                  # closed: block and log; open: allow and log
    reload_check_seconds = 1.0               # how often the snapshot file is checked for a change

    [learn]                                  # the self-learning gateway (seed 001)
    queue = "sqlite:/var/lib/urlsieve/learn/queue.db"  # where unknown URLs go
    unknown = "allow-first"                  # allow-first | block | allow
    overlay = "/var/lib/urlsieve/learn/learned.snap"  # learned rules, beside the base rules

    [service]
    bind = "127.0.0.1:8399"
    token_file = "/etc/urlsieve/token"       # or token = "…": protects POST /v1/reload
    seen_store = "memory:"                   # any urlsieve seen-store spec

The library never reads the environment: :func:`load_config` takes the
mapping to read (the CLI passes ``os.environ``).
"""

from __future__ import annotations

import math
import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from urlsieve.exceptions import ConfigError
from urlsieve.gateway.protocol import REDIRECT_STATUSES, HelperMode, validate_template
from urlsieve.gateway.unknown import DEFAULT_BURST, PENDING_ANSWERS
from urlsieve.policy.model import Policy
from urlsieve.policy.native import POLICY_SECTIONS, has_policy, read_native

__all__ = [
    "ENV_VARS",
    "UNKNOWN_POLICIES",
    "FailureMode",
    "GatewayConfig",
    "describe",
    "load_config",
    "parse_bind",
]


#: What the gateway does with a URL no rule decides (base or learned): ``allow-first``
#: allows it and queues it for learning (seed 001's first-time allow), ``block`` blocks
#: it until it is classified (and queues it), ``allow`` allows it (no learning).
UNKNOWN_POLICIES = ("allow-first", "block", "allow")


class FailureMode(StrEnum):
    """What the helper answers when it cannot decide (no rules loaded, an internal error)."""

    CLOSED = "closed"  # block, and log why
    OPEN = "open"  # allow, and log why


@dataclass(frozen=True)
class GatewayConfig:
    """Every gateway option, validated. Build with :func:`load_config` or directly."""

    lists: tuple[str, ...] = ()
    allow: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    snapshot: str | None = None
    mode: HelperMode = HelperMode.REDIRECT
    redirect_url: str | None = None
    redirect_status: int | None = None
    failure_mode: FailureMode = FailureMode.CLOSED
    reload_check_seconds: float = 1.0
    bind: str = "127.0.0.1:8399"
    token: str | None = field(default=None, repr=False)
    token_file: str | None = None
    seen_store: str | None = None
    #: Peers of the service whose client fields and headers are believed (policies).
    trusted_proxies: tuple[str, ...] = ("127.0.0.1", "::1")
    #: Headers a trusted peer names the client and the user in (e.g. X-Forwarded-For).
    client_header: str | None = None
    user_header: str | None = None
    #: A squidGuard.conf to run from as it is (its dests, sources, times and ACLs).
    squidguard_conf: str | None = None
    #: The policy written in the file's [[source]]/[[time]]/[[dest]]/[[acl]] tables.
    policy: Policy | None = field(default=None, compare=False)
    #: The learned overlay snapshot, looked up where the base rules decide nothing.
    overlay: str | None = None
    #: The seen-store-like spec of the queue of unknown URLs (learning on when set).
    learn_queue: str | None = None
    #: One of UNKNOWN_POLICIES; None: allow-first with a queue, allow without.
    unknown: str | None = None
    #: ``allow-first``: requests of one unknown site (registrable domain) that pass.
    burst: int = DEFAULT_BURST
    #: What a request of an unknown site gets after its burst (PENDING_ANSWERS).
    pending: str = "check"
    #: The "checking this site" page (a block-page template: %u …); None: the block page
    #: (``squid.redirect_url``) with category ``pending``.
    pending_url: str | None = None

    #: The decision stream: a JSON-lines file every helper and the service append to, and
    #: the console tails (:mod:`urlsieve.console.stream`); None: off.
    decision_log: str | None = None
    #: The console's login: ``scrypt$…`` from ``urlsieve console hash-password`` (the
    #: service token logs in too).
    console_password_hash: str | None = field(default=None, repr=False)
    #: The addresses the console answers (its pages 403 for any other peer).
    console_clients: tuple[str, ...] = ("127.0.0.1", "::1")
    console_session_minutes: float = 60.0
    #: Mark the console's cookies ``Secure`` on every answer, for a console behind a proxy
    #: that terminates TLS (the service then sees http); without it, only over https.
    console_secure_cookies: bool = False
    #: A directory of templates (and ``locale/*.json``) overriding the block pages' and
    #: the console's.
    console_templates: str | None = None
    #: The SQLite file of users' review requests (None: kept in memory).
    console_reviews: str | None = None
    #: Where each option was set: "default", "file", "env:NAME" or "option".
    origins: Mapping[str, str] = field(default_factory=dict, compare=False)
    source_file: str | None = None

    @property
    def helper_configured(self) -> bool:
        """Whether any ``[squid]`` option was set (file, environment or option)."""
        squid = [name for name, (section, _, _, _) in _OPTIONS.items() if section == "squid"]
        return any(self.origins.get(name, "default") != "default" for name in squid)

    def validate(self, *, needs_rules: bool = True, helper: bool = False) -> GatewayConfig:
        """Raise :class:`ConfigError` for an invalid or contradictory combination.

        ``helper``: also check what only the Squid helper needs (the block page).
        """
        if self.policy is not None and self.squidguard_conf:
            raise ConfigError(
                "a policy in the config file and rules.squidguard_conf are both set: keep one"
            )
        policed = self.policy is not None or self.squidguard_conf is not None
        if needs_rules and not self.lists and not self.snapshot and not policed:
            raise ConfigError(
                "no rules: set rules.lists (block lists) or rules.snapshot (a compiled "
                "snapshot), or pass --lists / --snapshot"
            )
        if self.categories and not self.lists and self.snapshot is None:
            raise ConfigError("rules.categories selects from rules.lists, which is empty")
        if self.redirect_url:
            validate_template(self.redirect_url)
        redirects = self.mode in (HelperMode.REDIRECT, HelperMode.REWRITE)
        if helper and redirects and not self.redirect_url and not policed:
            raise ConfigError(
                f"squid.mode={self.mode.value!r} needs squid.redirect_url (the block page, "
                "e.g. 'http://block.lan/?url=%u&category=%c'); or set squid.mode='acl' "
                "and let Squid's deny_info choose the page"
            )
        if self.redirect_status is not None:
            if self.mode is HelperMode.REWRITE:
                raise ConfigError(
                    "squid.redirect_status contradicts squid.mode='rewrite' (a rewrite sends no "
                    "redirect to the client): remove it, or set squid.mode='redirect'"
                )
            if self.redirect_status not in REDIRECT_STATUSES:
                allowed = ", ".join(map(str, sorted(REDIRECT_STATUSES)))
                raise ConfigError(
                    f"squid.redirect_status={self.redirect_status}: Squid accepts {allowed}"
                )
        if not (
            math.isfinite(self.reload_check_seconds) and 0 <= self.reload_check_seconds <= 3600
        ):
            raise ConfigError(
                f"squid.reload_check_seconds={self.reload_check_seconds}: use 0 (check before "
                "every request) to 3600"
            )
        if self.token and self.token_file:
            raise ConfigError(
                "service.token and service.token_file are both set: keep one "
                "(token_file keeps the secret out of the config file)"
            )
        if self.token is not None and len(self.token) < 16:
            raise ConfigError("service.token is shorter than 16 characters: use a longer secret")
        if self.unknown is not None and self.unknown not in UNKNOWN_POLICIES:
            raise ConfigError(
                f"learn.unknown={self.unknown!r}: use one of "
                + ", ".join(repr(p) for p in UNKNOWN_POLICIES)
            )
        if not 0 <= self.burst <= 1_000_000:
            raise ConfigError(
                f"learn.burst={self.burst}: use 0 to 1000000 requests of an unknown site "
                "(default 3; learn.pending = 'pass' lifts the cap)"
            )
        if self.pending not in PENDING_ANSWERS:
            raise ConfigError(
                f"learn.pending={self.pending!r}: use one of "
                + ", ".join(repr(p) for p in PENDING_ANSWERS)
            )
        if self.pending_url:
            validate_template(self.pending_url)
        if self.unknown in ("allow-first", "block") and not self.learn_queue:
            raise ConfigError(
                f"learn.unknown={self.unknown!r} queues unknown URLs for learning: set "
                "learn.queue (e.g. 'sqlite:/var/lib/urlsieve/learn/queue.db'), or set "
                "learn.unknown='allow'"
            )
        if self.console_password_hash is not None:
            from urlsieve.console.auth import check_hash

            try:
                check_hash(self.console_password_hash)
            except ValueError as exc:
                raise ConfigError(str(exc)) from None
        if not (
            math.isfinite(self.console_session_minutes)
            and 0 < self.console_session_minutes <= 7 * 24 * 60
        ):
            raise ConfigError(
                f"console.session_minutes={self.console_session_minutes}: use more than 0, at "
                "most 10080 (a week)"
            )
        parse_bind(self.bind)
        if self.seen_store is not None:
            from urlsieve.seen import parse_spec

            parse_spec(self.seen_store)
        return self

    @property
    def unknown_policy(self) -> str:
        """What happens to an unknown URL (see :data:`UNKNOWN_POLICIES`)."""
        if self.unknown is not None:
            return self.unknown
        return "allow-first" if self.learn_queue else "allow"

    @property
    def status(self) -> int:
        """The redirect status sent to Squid (302 unless configured)."""
        return self.redirect_status or 302

    def read_token(self) -> str | None:
        """The reload token, from ``token`` or ``token_file`` (None: reload is disabled)."""
        if self.token_file is None:
            return self.token
        try:
            token = Path(self.token_file).read_text("utf-8").strip()
        except OSError as exc:
            raise ConfigError(
                f"service.token_file {self.token_file}: {exc.strerror or exc}"
            ) from exc
        if len(token) < 16:
            raise ConfigError(
                f"service.token_file {self.token_file}: the token is shorter than 16 characters"
            )
        return token


def parse_bind(bind: str) -> tuple[str, int]:
    """``host:port`` (``[v6]:port`` for IPv6) → ``(host, port)``."""
    host, sep, port = bind.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(f"service.bind={bind!r}: write HOST:PORT, e.g. '127.0.0.1:8399'")
    return host.strip("[]"), int(port)


# Option name → (TOML section, TOML key, environment variable, kind).
_OPTIONS: dict[str, tuple[str, str, str, str]] = {
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
    "seen_store": ("service", "seen_store", "URLSIEVE_SEEN_STORE", "str"),
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

#: Sections whose other keys belong to another reader (the learner reads all of [learn]
#: and checks its own keys: ``urlsieve learn`` and ``urlsieve config check``).
_SHARED_SECTIONS = ("learn",)

#: Environment variable → option, for the documentation and ``config check``.
ENV_VARS = {env: name for name, (_, _, env, _) in _OPTIONS.items()} | {
    "URLSIEVE_CONFIG": "the config file"
}


def _convert(name: str, kind: str, value: Any, where: str, base: Path | None) -> Any:
    def bad(expected: str) -> ConfigError:
        return ConfigError(f"{where}: {name} must be {expected}, not {value!r}")

    def path(item: Any) -> str:
        if not isinstance(item, str) or not item:
            raise bad("a path (string)")
        expanded = Path(item).expanduser()
        return str(base / expanded if base is not None and not expanded.is_absolute() else expanded)

    if kind == "paths":
        if isinstance(value, str):  # environment: os.pathsep-separated
            value = [v for v in value.split(os.pathsep) if v]
        if not isinstance(value, list):
            raise bad("a list of paths")
        return tuple(path(v) for v in value)
    if kind == "names":
        if isinstance(value, str):  # environment: comma-separated
            value = [v.strip() for v in value.split(",") if v.strip()]
        if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
            raise bad("a list of category names")
        return tuple(value)
    if kind == "addresses":
        if isinstance(value, str):  # environment: comma-separated
            value = [v.strip() for v in value.split(",") if v.strip()]
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise bad("a list of addresses or networks")
        from urlsieve.policy.clients import AddressSyntaxError, parse_address

        for item in value:
            try:
                parse_address(item)
            except AddressSyntaxError as exc:
                raise ConfigError(f"{where}: {name}: {exc}") from None
        return tuple(value)
    if kind == "path":
        return path(value)
    if kind == "spec":  # a store or queue spec: a relative file in it is the file's
        if not isinstance(value, str) or not value:
            raise bad("a spec string (e.g. 'sqlite:PATH')")
        from urlsieve.store.spec import resolve_spec

        return resolve_spec(value, base)
    if kind == "str":
        if not isinstance(value, str):
            raise bad("a string")
        return value
    if kind == "int":
        if isinstance(value, str) and value.strip().isdigit():
            return int(value)
        if not isinstance(value, int) or isinstance(value, bool):
            raise bad("an integer")
        return value
    if kind == "bool":
        if isinstance(value, str):  # environment
            from urlsieve.store.spec import parse_flag

            flag = parse_flag(value.strip())
            if flag is not None:
                return flag
        if not isinstance(value, bool):
            raise bad("true or false")
        return value
    if kind == "float":
        try:
            return float(value)
        except (TypeError, ValueError):
            raise bad("a number") from None
    if kind == "mode":
        try:
            return HelperMode(value)
        except ValueError:
            raise bad("one of " + ", ".join(repr(m.value) for m in HelperMode)) from None
    if kind == "failure":
        try:
            return FailureMode(value)
        except ValueError:
            raise bad("one of " + ", ".join(repr(m.value) for m in FailureMode)) from None
    raise AssertionError(kind)  # pragma: no cover


def _read_file(path: str) -> dict[str, Any]:
    try:
        with open(path, "rb") as fh:
            data = tomllib.load(fh)
    except OSError as exc:
        raise ConfigError(f"config file {path}: {exc.strerror or exc}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {path}: not valid TOML: {exc}") from exc
    sections = {section for section, _, _, _ in _OPTIONS.values()} | set(POLICY_SECTIONS)
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
        known = {key for s, key, _, _ in _OPTIONS.values() if s == section}
        if section in _SHARED_SECTIONS:
            continue
        for key in body:
            if key not in known:
                raise ConfigError(
                    f"config file {path}: unknown option {section}.{key} "
                    f"(known in [{section}]: {', '.join(sorted(known))})"
                )
    return data


def load_config(
    path: str | None = None,
    *,
    env: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
    needs_rules: bool = True,
    helper: bool = False,
) -> GatewayConfig:
    """Read the TOML file (``path``, else ``env['URLSIEVE_CONFIG']``, else none), apply the
    environment variables in ``env``, then ``overrides`` (command-line options; ``None``
    values are ignored), and validate (``helper``: for the Squid helper, which needs
    a block page unless ``mode`` is ``acl``).

    Relative paths in the file are relative to the file's directory.
    """
    env = env or {}
    overrides = {k: v for k, v in (overrides or {}).items() if v is not None}
    unknown = set(overrides) - set(_OPTIONS)
    if unknown:
        raise ConfigError(f"unknown option(s): {', '.join(sorted(unknown))}")
    path = path or env.get("URLSIEVE_CONFIG") or None
    data = _read_file(path) if path else {}
    base = Path(path).resolve().parent if path else None
    values: dict[str, Any] = {}
    origins: dict[str, str] = {}
    for name, (section, key, env_name, kind) in _OPTIONS.items():
        if name in overrides:
            values[name] = _convert(name, kind, overrides[name], "command line", None)
            origins[name] = "option"
        elif env_name in env:
            values[name] = _convert(name, kind, env[env_name], f"${env_name}", None)
            origins[name] = f"env:{env_name}"
        elif key in data.get(section, {}):
            values[name] = _convert(name, kind, data[section][key], f"{path} [{section}]", base)
            origins[name] = "file"
        else:
            origins[name] = "default"
    if path and has_policy(data):
        values["policy"] = read_native(data, path)
    config = GatewayConfig(**values, origins=origins, source_file=path)
    return config.validate(needs_rules=needs_rules, helper=helper)


def describe(config: GatewayConfig) -> list[str]:
    """Human-readable lines saying what the gateway will do with this configuration."""

    def origin(name: str) -> str:
        where = config.origins.get(name, "default")
        return "" if where == "default" else f"  [{where}]"

    out = [f"config file: {config.source_file or '(none)'}"]
    if config.snapshot:
        out.append(f"rules: compiled snapshot {config.snapshot}{origin('snapshot')}")
        if config.lists:
            out.append("  (`urlsieve compile --config FILE` rebuilds it from the lists below)")
    for name, label in (("lists", "block lists"), ("allow", "allow lists")):
        items = getattr(config, name)
        out.append(f"{label}: {', '.join(items) if items else '(none)'}{origin(name)}")
    categories = ", ".join(config.categories) if config.categories else "all in the lists"
    out.append(f"categories blocked: {categories}{origin('categories')}")
    if config.policy is not None or config.squidguard_conf:
        out.append(
            "policy: "
            + (
                f"squidGuard configuration {config.squidguard_conf}"
                if config.squidguard_conf
                else "the [[source]]/[[time]]/[[acl]] tables of this file"
            )
            + "; block pages come from its ACLs and destinations"
        )
    if not config.helper_configured:
        out.append("squid helper: not configured (no [squid] options)")
    elif config.mode is HelperMode.ACL:
        out.append(
            "squid helper: external_acl_type form: OK (blocked, tag=category) / ERR (allowed)"
            + origin("mode")
        )
    else:
        verb = "redirects" if config.mode is HelperMode.REDIRECT else "rewrites"
        status = f" with status {config.status}" if config.mode is HelperMode.REDIRECT else ""
        page = config.redirect_url or "the policy's block pages"
        out.append(
            f"squid helper: url_rewrite_program form: {verb} blocked URLs to "
            f"{page}{status}{origin('mode')}"
        )
    fail = (
        "block every request and log why"
        if config.failure_mode is FailureMode.CLOSED
        else "allow every request and log why"
    )
    out.append(
        f"when no rules can be loaded: {fail} "
        f"(failure_mode={config.failure_mode.value}){origin('failure_mode')}"
    )
    out.append(
        f"reload: on SIGHUP, and on a snapshot change (checked every "
        f"{config.reload_check_seconds:g} s){origin('reload_check_seconds')}"
    )
    out.append(f"service: listens on {config.bind}{origin('bind')}")
    if config.token_file:
        out.append(f"service reload: token from {config.token_file}{origin('token_file')}")
    elif config.token:
        out.append(f"service reload: token set (hidden){origin('token')}")
    else:
        out.append("service reload: disabled (no service.token or service.token_file)")
    out.append(f"seen store: {config.seen_store or '(none: POST /v1/seen answers 404)'}")
    unknown = config.unknown_policy
    if config.learn_queue:
        out.append(
            f"unknown URLs: {unknown}, queued for learning in {config.learn_queue}"
            f"{origin('unknown')}"
        )
        if unknown == "allow-first" and config.pending != "pass":
            out.append(
                f"unknown sites: {config.burst} requests of a site pass, then "
                f"{'a checking page' if config.pending == 'check' else 'a block'} until "
                f"its verdict (learn.burst, learn.pending){origin('burst')}"
            )
    else:
        out.append(f"unknown URLs: allowed (no learn.queue: learning is off){origin('unknown')}")
    if config.overlay:
        out.append(f"learned rules: overlay snapshot {config.overlay}{origin('overlay')}")
    out.append(
        f"decision stream: {config.decision_log or '(off: console.decision_log)'}"
        f"{origin('decision_log')}"
    )
    login = "password hash" if config.console_password_hash else None
    if config.token or config.token_file:
        login = f"{login} or the service token" if login else "the service token"
    out.append(
        f"console: /console/ for {', '.join(config.console_clients)}"
        f"{origin('console_clients')}, login by "
        f"{login or 'nothing (off: set console.password_hash)'}"
        f", sessions of {config.console_session_minutes:g} min"
    )
    return out
