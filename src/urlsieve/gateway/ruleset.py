"""Loading the gateway's rules from its configuration: a compiled snapshot, or the lists."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from urlsieve import __version__
from urlsieve.exceptions import ConfigError, UrlsieveError
from urlsieve.filter import Filter
from urlsieve.gateway.config import GatewayConfig
from urlsieve.gateway.live import FileSignature, file_signature
from urlsieve.layered import LayeredFilter
from urlsieve.match.snapshot import SnapshotInfo
from urlsieve.rules.categories import did_you_mean, resolve
from urlsieve.rules.model import ALLOW, BLOCK

if TYPE_CHECKING:
    from urlsieve.policy.model import Policy

__all__ = [
    "LayeredLoader",
    "configured_category_names",
    "base_loader",
    "category_names",
    "category_rules",
    "check_selection",
    "compile_lists",
    "filter_loader",
    "load_selected",
    "open_snapshot",
    "resolve_selection",
    "rules_info",
    "rules_notify",
    "rules_watch",
    "snapshot_selection",
]


def category_rules(source: Filter) -> dict[tuple[str, str], tuple[int, int]]:
    """Per ``(category, action)``: the rules its lists give, and how many of them another
    category read first also lists (from the load reports)."""
    counts: dict[tuple[str, str], tuple[int, int]] = {}
    for report in source.reports:
        key = (report.category, report.action)
        given, shared = counts.get(key, (0, 0))
        counts[key] = (given + report.loaded + report.duplicates, shared + report.duplicates)
    return counts


def check_selection(source: Filter, categories: Sequence[str]) -> list[str]:
    """Lines saying what each selected category gives (aliases resolved).

    Raises :class:`ConfigError` for a name the lists do not have (saying which they
    have, and the nearest ones: "did you mean") and for a selection that gives no rule
    at all. Names are matched ignoring case (:func:`resolve_selection` first).
    """
    if not categories:
        return []
    categories = resolve_selection(source, categories)
    aliases = source.aliases
    counts = category_rules(source)
    lines = []
    total = 0
    for name in categories:
        target = aliases.get(name, name)
        parts = []
        for action in (BLOCK, ALLOW):
            given, shared = counts.get((target, action), (0, 0))
            total += given
            also = f" ({shared} also in another category)" if shared else ""
            parts.append(f"{given} {action} rules{also}")
        shown = name if target == name else f"{name} (alias of {target})"
        lines.append(f"category {shown}: {', '.join(parts)}")
    if not total:
        raise ConfigError(
            f"the selected categories ({', '.join(categories)}) give no rule: "
            "choose categories with domains or urls files"
        )
    return lines


def category_names(source: Filter) -> set[str]:
    """Every category name the lists of ``source`` have (aliases included)."""
    return set(source.categories) | set(source.aliases) | {r.category for r in source.reports}


def configured_category_names(config_path: str | None) -> set[str]:
    """Every category name of the lists the configuration file at ``config_path`` loads
    (its snapshot's selection included); raises what loading them raises."""
    import os

    from urlsieve.gateway.config import load_config

    base = base_loader(load_config(config_path, env=os.environ))()
    try:
        info = base.info
        return category_names(base) | (
            set(info.meta.get("categories") or ()) if info is not None else set()
        )
    finally:
        base.close()


def resolve_selection(source: Filter, categories: Sequence[str]) -> list[str]:
    """``categories`` as the lists spell them (matched ignoring case); :class:`ConfigError`
    naming the unknown ones, with the nearest known names."""
    present = category_names(source)
    resolved, missing = [], []
    for name in categories:
        found = resolve(name, present)
        if found is None:
            missing.append(name + did_you_mean(name, present))
        else:
            resolved.append(found)
    if missing:
        known = ", ".join(sorted(present)) or "none"
        raise ConfigError(
            f"categories not found in the lists: {', '.join(missing)} (the lists have: {known})"
        )
    return resolved


def load_selected(
    lists: Sequence[str], allow: Sequence[str], categories: Sequence[str] = (), **options: Any
) -> tuple[Filter, list[str]]:
    """:meth:`Filter.from_lists` (``options`` passed on) and :func:`check_selection`: the
    filter, and a line per selected category; every caller selects categories this way.
    A name given in another case than the lists' is read again under the lists' spelling
    (once, at load)."""
    source = Filter.from_lists(lists, allow, categories=categories, **options)
    resolved = resolve_selection(source, categories) if categories else []
    if resolved != list(categories):
        source.close()
        source = Filter.from_lists(lists, allow, categories=resolved, **options)
    return source, check_selection(source, resolved)


def compile_lists(
    lists: Sequence[str],
    allow: Sequence[str],
    output: str,
    *,
    categories: Sequence[str] = (),
    strict: bool = False,
    progress: Callable[[int], None] | None = None,
) -> tuple[SnapshotInfo, Filter]:
    """Read the lists and compile the selected rules into a snapshot at ``output``
    (``progress`` is told the characters read as they are)."""
    meta: dict[str, Any] = {
        "lists": [os.path.abspath(p) for p in lists],
        "allow": [os.path.abspath(p) for p in allow],
        "compiled_by": f"urlsieve {__version__}",
    }
    source, _ = load_selected(lists, allow, categories, strict=strict, meta=meta, progress=progress)
    return source.save(output), source


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


def filter_loader(
    config: GatewayConfig, log: Callable[[str], None] = lambda _msg: None
) -> Callable[[], Filter]:
    """A function loading the configured rules: the snapshot when set, else the lists;
    with ``learn.overlay``, the learned overlay beside them (:class:`LayeredLoader`).

    A snapshot compiled for other categories than configured is refused with the fix.
    """
    base = base_loader(config)
    if config.overlay:
        return LayeredLoader(base, config.snapshot, config.overlay, log)
    return base


def base_loader(config: GatewayConfig) -> Callable[[], Filter]:
    """A function loading the administrator's rules alone (no overlay)."""
    if config.snapshot:
        snapshot = config.snapshot

        def load_snapshot() -> Filter:
            return open_snapshot(snapshot, config.categories)

        return load_snapshot

    def load_lists() -> Filter:
        return load_selected(config.lists, config.allow, config.categories)[0]

    return load_lists


def snapshot_selection(info: SnapshotInfo, categories: Sequence[str]) -> str | None:
    """Why a snapshot cannot serve ``categories``, or None when it can: one answer for
    every command. A snapshot compiled from every category serves any selection (chosen per
    request); one compiled for a selection serves that selection and any part of it."""
    if not categories:
        return None
    compiled = info.compiled_categories
    aliases = info.meta.get("aliases") or {}
    known = set(info.meta.get("categories") or ()) | set(aliases)
    categories = _snapshot_names(info, categories)
    if not compiled:
        missing = [c + did_you_mean(c, known) for c in categories if known and c not in known]
        if missing:
            return (
                f"snapshot {info.path} has no categories {', '.join(missing)} "
                f"(it has: {', '.join(sorted(known))}; an allow-type category of a tree is "
                "compiled only when named: `urlsieve compile --categories …`)"
            )
        return None
    have = set(compiled) | {a for a, target in aliases.items() if target in compiled}
    missing = [c for c in categories if c not in have]
    if not missing:
        return None
    return (
        f"snapshot {info.path} was compiled for categories {', '.join(compiled)}, not "
        f"{', '.join(missing)}: recompile it with `urlsieve compile` for this selection, or "
        "compile every category (no --categories): that snapshot serves any selection"
    )


def _snapshot_names(info: SnapshotInfo, categories: Sequence[str]) -> list[str]:
    """``categories`` as a snapshot spells them (matched ignoring case)."""
    aliases = info.meta.get("aliases") or {}
    known = set(info.meta.get("categories") or ()) | set(aliases) | set(info.compiled_categories)
    return [resolve(c, known) or c for c in categories]


def open_snapshot(path: str, categories: Sequence[str] = ()) -> Filter:
    """A compiled snapshot enforcing ``categories`` (every compiled one when empty);
    :class:`ConfigError` with the fix when it cannot serve them (:func:`snapshot_selection`)."""
    loaded = Filter.load(path)
    if not categories or loaded.info is None:
        return loaded
    why = snapshot_selection(loaded.info, categories)
    if why is not None:
        loaded.close()
        raise ConfigError(why)
    categories = _snapshot_names(loaded.info, categories)
    if sorted(loaded.info.compiled_categories) == sorted(categories):
        return loaded
    return loaded.select(categories)


def rules_info(rules: Filter | None, loaded_at: float | None, generation: int) -> dict[str, Any]:
    """What the service reports about the loaded rules (health and metrics)."""
    info: dict[str, Any] = {"loaded_at": loaded_at, "generation": generation}
    if rules is None:
        return info
    info["rules"] = len(rules)
    snapshot = rules.info
    if snapshot is not None and snapshot.path:
        info.update(
            source="snapshot",
            path=snapshot.path,
            version=snapshot.version,
            format=snapshot.format_version,
            created=snapshot.created,
            age_seconds=round(time.time() - snapshot.created, 3),
        )
    else:
        info["source"] = "lists"
    return info


def policy_loader(
    config: GatewayConfig, log: Callable[[str], None] = lambda _msg: None
) -> Callable[[], Any] | None:
    """A function building the policy engine, when the configuration has a policy (its
    own tables, or ``rules.squidguard_conf``); None otherwise. Each call re-reads the
    policy, so a reload (SIGHUP) picks up policy changes."""
    from urlsieve.policy.build import build_rules, load_rules
    from urlsieve.policy.engine import PolicyEngine
    from urlsieve.policy.native import read_native
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
        import tomllib

        policy = config.policy
        if source_file:
            with open(source_file, "rb") as fh:
                policy = read_native(tomllib.load(fh), source_file)
        assert policy is not None
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
