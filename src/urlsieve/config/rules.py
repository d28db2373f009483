"""Reading rules: the one decision between a compiled snapshot and the lists, and the
category selection every command, the gateway and the Scrapy integration share."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

from urlsieve import __version__
from urlsieve.exceptions import ConfigError
from urlsieve.filter import Filter
from urlsieve.match.snapshot import SnapshotInfo, is_snapshot
from urlsieve.rules.categories import did_you_mean, resolve
from urlsieve.rules.model import ALLOW, BLOCK

__all__ = [
    "category_names",
    "category_rules",
    "check_selection",
    "compile_lists",
    "load_selected",
    "open_rules",
    "open_snapshot",
    "resolve_selection",
    "snapshot_selection",
    "snapshot_to_open",
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


def snapshot_to_open(
    lists: Sequence[str], allow: Sequence[str], snapshot: str | None = None
) -> str | None:
    """The one decision between a compiled snapshot and the lists: the snapshot file to
    open, or None to read the lists. ``snapshot`` (configured) wins; else a lone block
    list that is a compiled snapshot is one. A snapshot among other lists is a
    :class:`ConfigError`: it is a whole rule set, never read together with lists."""
    if snapshot is not None:
        return snapshot
    snapshots = [p for p in [*lists, *allow] if os.path.isfile(p) and is_snapshot(p)]
    if not snapshots:
        return None
    if snapshots == list(lists) and len(lists) == 1 and not allow:
        return snapshots[0]
    raise ConfigError(
        f"{snapshots[0]} is a compiled snapshot, a whole rule set: it is not read "
        "together with other lists; give it as the snapshot (--snapshot FILE, "
        "rules.snapshot, or alone in URLSIEVE_RULES) with the categories to choose among "
        "its categories, or compile the lists together with `urlsieve compile`"
    )


def open_rules(
    lists: Sequence[str],
    allow: Sequence[str],
    categories: Sequence[str] = (),
    *,
    snapshot: str | None = None,
    **options: Any,
) -> Filter:
    """The rules of a snapshot or of lists (:func:`snapshot_to_open`), ``categories``
    selected; ``options`` go to :meth:`Filter.from_lists` when the lists are read."""
    chosen = snapshot_to_open(lists, allow, snapshot)
    if chosen is not None:
        return open_snapshot(chosen, categories)
    return load_selected(lists, allow, categories, **options)[0]
