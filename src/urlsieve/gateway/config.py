"""The gateway's options (:class:`GatewayConfig`) and their validation.

The file is read by the assembly room (:func:`urlsieve.config.read_config`), which
builds this from the TOML file, the ``URLSIEVE_*`` environment variables and the
command-line options. ``load_config``, ``describe`` and ``ENV_VARS`` are still importable
from here (for one release); they live in :mod:`urlsieve.config`.

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

"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from urlsieve.exceptions import ConfigError
from urlsieve.gateway.protocol import REDIRECT_STATUSES, HelperMode, validate_template
from urlsieve.gateway.unknown import DEFAULT_BURST, PENDING_ANSWERS
from urlsieve.policy.model import Policy

__all__ = [
    "SQUID_OPTIONS",
    "UNKNOWN_POLICIES",
    "FailureMode",
    "GatewayConfig",
    "parse_bind",
]


#: What the gateway does with a URL no rule decides (base or learned): ``allow-first``
#: allows it and queues it for learning (seed 001's first-time allow), ``block`` blocks
#: it until it is classified (and queues it), ``allow`` allows it (no learning).
UNKNOWN_POLICIES = ("allow-first", "block", "allow")


#: The options of the ``[squid]`` section (the helper's).
SQUID_OPTIONS = ("mode", "redirect_url", "redirect_status", "failure_mode", "reload_check_seconds")


class FailureMode(StrEnum):
    """What the helper answers when it cannot decide (no rules loaded, an internal error)."""

    CLOSED = "closed"  # block, and log why
    OPEN = "open"  # allow, and log why


@dataclass(frozen=True)
class GatewayConfig:
    """Every gateway option, validated. Read by :func:`urlsieve.config.read_config`, or built
    directly."""

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
        return any(self.origins.get(name, "default") != "default" for name in SQUID_OPTIONS)

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


#: Names moved to the assembly room, importable from here for one release.
_MOVED = ("ENV_VARS", "describe", "load_config")


def __getattr__(name: str) -> Any:
    if name in _MOVED:
        import urlsieve.config

        return getattr(urlsieve.config, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
