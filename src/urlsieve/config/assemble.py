"""The assembly room's builder: a configuration turned into the running parts.

One place decides, for every entry point (``urlsieve check``/``explain``/``filter``, the
Squid helper, the HTTP service, the Scrapy integration, the learner), what the
configuration's rules are (:func:`rules_loader`: the policy engine when the file has a
policy, else the snapshot or the lists with the learned overlay beside them), which files
reload them (:func:`rules_watch`, :func:`rules_notify`), and which stores and learner
hooks it opens (:func:`open_seen_store`, :func:`unknown_feed`, :func:`burst_gate`,
:func:`learn_admin`).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from urlsieve.config.model import Config, read_config, read_policy
from urlsieve.config.rules import category_names, open_rules, snapshot_to_open
from urlsieve.exceptions import ConfigError, StoreError, UrlsieveError
from urlsieve.filter import Filter
from urlsieve.gateway.config import GatewayConfig
from urlsieve.gateway.live import FileSignature, file_signature
from urlsieve.gateway.unknown import BurstGate, UnknownFeed
from urlsieve.layered import LayeredFilter

if TYPE_CHECKING:
    from urlsieve.gateway.learning import LearnReview
    from urlsieve.learn.admin import LearnAdmin
    from urlsieve.learn.config import LearnSettings
    from urlsieve.policy.engine import PolicyEngine
    from urlsieve.policy.model import Policy
    from urlsieve.seen import SeenStore

__all__ = [
    "BURST_STORE_SECONDS",
    "LayeredLoader",
    "base_loader",
    "burst_gate",
    "configured_category_names",
    "configured_rules",
    "filter_loader",
    "learn_admin",
    "open_learn_admin",
    "open_seen_store",
    "policy_loader",
    "rules_loader",
    "rules_notify",
    "rules_source",
    "rules_watch",
    "unknown_feed",
]

#: How long a request waits at most for the burst count in the queue's store.
BURST_STORE_SECONDS = 0.25

Log = Callable[[str], None]


def _quiet(_msg: str) -> None:
    pass


# -- the rules ---------------------------------------------------------------------------


def rules_loader(config: GatewayConfig, log: Log = _quiet) -> Callable[[], Any]:
    """A function loading what decides requests: the policy engine when the configuration
    has a policy (:func:`policy_loader`), else the rules (:func:`filter_loader`). Each
    call loads again (a reload)."""
    return policy_loader(config, log) or filter_loader(config, log)


def base_loader(config: GatewayConfig) -> Callable[[], Filter]:
    """A function loading the administrator's rules alone (no overlay): the snapshot
    when set, else the lists (:func:`~urlsieve.config.rules.open_rules`)."""

    def load() -> Filter:
        return open_rules(config.lists, config.allow, config.categories, snapshot=config.snapshot)

    return load


def filter_loader(config: GatewayConfig, log: Log = _quiet) -> Callable[[], Filter]:
    """A function loading the configured rules (:func:`base_loader`); with
    ``learn.overlay``, the learned overlay beside them (:class:`LayeredLoader`).

    A snapshot compiled for other categories than configured is refused with the fix.
    """
    base = base_loader(config)
    if config.overlay:
        return LayeredLoader(base, config.snapshot, config.overlay, log)
    return base


def rules_source(config: GatewayConfig) -> str | None:
    """The snapshot the commands that check URLs and exit read the configured rules
    from, or None for the lists (:func:`~urlsieve.config.rules.snapshot_to_open`); a
    configured snapshot not compiled yet is replaced by the lists it is compiled from
    (``urlsieve compile --config``)."""
    snapshot = config.snapshot
    if snapshot is not None and not os.path.exists(snapshot) and config.lists:
        snapshot = None  # not compiled yet: read the lists it would be compiled from
    return snapshot_to_open(config.lists, config.allow, snapshot)


def configured_rules(config: GatewayConfig, log: Log = _quiet, **options: Any) -> Filter:
    """The configured rules, loaded once as the gateway enforces them (with the learned
    overlay), from :func:`rules_source`: for the commands that check URLs and exit.
    ``options`` go to :meth:`Filter.from_lists` when lists are read."""
    snapshot = rules_source(config)
    base = open_rules(config.lists, config.allow, config.categories, snapshot=snapshot, **options)
    if not config.overlay:
        return base
    return LayeredLoader(lambda: base, None, config.overlay, log)()


class LayeredLoader:
    """Loads the base rules and the learned overlay beside them (:class:`LayeredFilter`).

    The base is loaded again only when its snapshot file changed or a reload was asked
    for (:meth:`invalidate`): an overlay change — every few seconds while the gateway
    learns — reopens only the small overlay, whatever the size of the base lists. A
    missing overlay file means nothing is learned yet. An overlay that cannot be opened
    never costs the base rules: the last good overlay stays (the base alone when there is
    none, or when the bad file is the last one rewritten in place), and ``log`` says why.
    """

    def __init__(
        self,
        load_base: Callable[[], Filter],
        base: str | None,
        overlay: str,
        log: Callable[[str], None] = lambda _msg: None,
    ) -> None:
        self._load_base = load_base
        self._base_path = base
        self._overlay = overlay
        self._log = log
        self._base: Filter | None = None
        self._base_signature: FileSignature | None = None
        self._last: Filter | None = None  # the last overlay that opened
        self._last_inode: int | None = None

    def invalidate(self) -> None:
        self._base = None

    def __call__(self) -> LayeredFilter:
        signature = None if self._base_path is None else file_signature(self._base_path)
        if self._base is None or signature != self._base_signature:
            self._base = self._load_base()
            self._base_signature = signature
        return LayeredFilter(self._base, self._open_overlay())

    def _open_overlay(self) -> Filter | None:
        try:
            inode = os.stat(self._overlay).st_ino
        except OSError:
            self._last = self._last_inode = None
            return None  # nothing learned yet (or forgotten)
        try:
            overlay = Filter.load(self._overlay)
        except (UrlsieveError, OSError) as exc:
            if self._last is not None and inode == self._last_inode:
                self._last = self._last_inode = None  # its mapped bytes changed under us
            kept = "the last good one" if self._last is not None else "none (base rules alone)"
            self._log(f"learned overlay {self._overlay} cannot be used, keeping {kept}: {exc}")
            return self._last
        self._last, self._last_inode = overlay, inode
        return overlay


def rules_watch(config: GatewayConfig) -> list[str]:
    """The files whose change reloads the rules: the base first, then the overlay (not
    under a policy, which does not use it)."""
    base = config.squidguard_conf or config.snapshot
    policed = config.policy is not None or config.squidguard_conf is not None
    return [p for p in (base, None if policed else config.overlay) if p]


def rules_notify(config: GatewayConfig) -> list[str]:
    """The files whose writer announces its changes (:mod:`urlsieve._notify`): the learned
    overlay (not under a policy)."""
    policed = config.policy is not None or config.squidguard_conf is not None
    return [config.overlay] if config.overlay and not policed else []


def policy_loader(
    config: GatewayConfig, log: Callable[[str], None] = lambda _msg: None
) -> Callable[[], Any] | None:
    """A function building the policy engine, when the configuration has a policy (its
    own tables, or ``rules.squidguard_conf``); None otherwise. Each call re-reads the
    policy, so a reload (SIGHUP) picks up policy changes."""
    from urlsieve.policy.build import build_rules, load_rules
    from urlsieve.policy.engine import PolicyEngine
    from urlsieve.policy.squidguard import read_squidguard

    if config.squidguard_conf:
        conf_path = config.squidguard_conf

        def load_squidguard() -> PolicyEngine:
            conf = read_squidguard(conf_path)
            rules = build_rules(conf.policy, config.lists, config.allow)
            conf.policy.skipped += [str(w) for w in rules.warnings]
            conf.policy.notes[:0] = conf.notes
            conf.policy.notes += rules.notes
            _log_report(conf.policy, log)
            return PolicyEngine(conf.policy, rules.filter, expressions=rules.expressions)

        return load_squidguard
    if config.policy is None:
        return None
    source_file = config.source_file

    def load_policy() -> PolicyEngine:
        policy = read_policy(source_file) if source_file else config.policy
        if policy is None:
            raise ConfigError(f"config file {source_file}: its policy tables are gone")
        if config.snapshot:
            rules = load_rules(config.snapshot)
        else:
            rules = build_rules(policy, config.lists, config.allow)
            policy.skipped += [str(w) for w in rules.warnings]
            policy.notes += rules.notes
        _log_report(policy, log)
        return PolicyEngine(policy, rules.filter, expressions=rules.expressions)

    return load_policy


def _log_report(policy: Policy, log: Callable[[str], None]) -> None:
    """Say once, as the policy loads, what its files skipped and noted."""
    for line in policy.report():
        log(line)
    if policy.skipped:
        log(
            f"policy loaded without {len(policy.skipped)} list lines or entries that cannot be "
            "read (listed above): the rest is in force"
        )


def configured_category_names(config_path: str | None) -> set[str]:
    """Every category name of the lists the configuration file at ``config_path`` loads
    (its snapshot's selection included); raises what loading them raises."""
    config = read_config(config_path, env=os.environ, needs_rules=False).gateway
    base = base_loader(config)()
    try:
        info = base.info
        return category_names(base) | (
            set(info.meta.get("categories") or ()) if info is not None else set()
        )
    finally:
        base.close()


# -- stores and the learner's hooks ------------------------------------------------------


def open_seen_store(config: GatewayConfig) -> SeenStore | None:
    """The service's seen store (``service.seen_store``), or None when none is set; a
    store that cannot be opened is a :class:`ConfigError` naming the option."""
    if not config.seen_store:
        return None
    from urlsieve.seen import open_seen

    try:
        return open_seen(config.seen_store)
    except (StoreError, ConfigError) as exc:
        raise ConfigError(f"service.seen_store {config.seen_store!r}: {exc}") from exc


def unknown_feed(config: GatewayConfig, log: Log) -> UnknownFeed | None:
    """The feed of unknown URLs into the learner's queue (``learn.queue``), or None when
    learning is off or ``learn.unknown = "allow"``. The queue is opened now: a bad spec
    or an unreadable queue fails at start-up, not at the first unknown URL."""
    if not config.learn_queue or config.unknown_policy == "allow":
        return None
    from urlsieve.learn.sink import queue_sink

    return UnknownFeed(queue_sink(config.learn_queue), log=log)


def burst_gate(config: GatewayConfig, log: Log) -> BurstGate | None:
    """The cap on requests of an unknown site (``learn.burst``), counted in the learner's
    queue store through a connection of its own (the request path never waits for the
    feed's batch writes); None unless ``learn.unknown = "allow-first"`` with
    ``learn.pending`` other than ``pass``."""
    if not config.learn_queue or config.unknown_policy != "allow-first":
        return None
    if config.pending == "pass":
        return None
    from urlsieve.learn.queue import open_queue

    # On the request path: a store that does not answer within these bounds is skipped for
    # that request (the gate counts in this process and says so), never waited for.
    scheme = config.learn_queue.split(":", 1)[0].lower()
    bounds = (
        {"busy_timeout": BURST_STORE_SECONDS}
        if scheme == "sqlite"
        else {"timeout": BURST_STORE_SECONDS}
        if scheme in ("valkey", "valkeys", "redis", "rediss", "unix")
        else {}
    )
    queue = open_queue(config.learn_queue, **bounds)
    return BurstGate(queue.admit, config.burst, log=log)


def learn_admin(config: Config, log: Log) -> LearnReview | None:
    """The learned verdicts for the service's ``/v1/learn/*`` endpoints
    (:class:`urlsieve.learn.admin.LearnAdmin`), or None when they stay off: no config
    file or no ``[learn]`` section (silently), a section without the learner's keys
    (``learn.directory``: the learner runs elsewhere) or no ``service.token`` (logged).
    The verdict store is opened now, so a damaged one fails at start-up."""
    if config.learn is None and config.learn_missing is None:
        return None  # no config file, or no [learn] section
    try:
        settings = config.learner()
    except ConfigError as exc:
        log(f"the learn endpoints (/v1/learn/*) are off: {exc}")
        return None
    if config.gateway.read_token() is None:
        log(
            "the learn endpoints (/v1/learn/*) are off: they need service.token or "
            "service.token_file"
        )
        return None
    admin: LearnReview = open_learn_admin(settings)  # checked against the service's protocol
    return admin


def open_learn_admin(settings: LearnSettings) -> LearnAdmin:
    """The learned verdicts of ``settings`` for review and override
    (:class:`~urlsieve.learn.admin.LearnAdmin`), spelling a block's category as the
    gateway's lists of the same file spell it."""
    from urlsieve.learn.admin import LearnAdmin

    source = settings.source_file
    return LearnAdmin(settings, list_categories=lambda: configured_category_names(source))
