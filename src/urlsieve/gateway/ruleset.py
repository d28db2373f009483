"""What the service reports about its rules (:func:`rules_info`).

Loading the rules from a configuration moved to the assembly room
(:mod:`urlsieve.config.assemble` and :mod:`urlsieve.config.rules`); the old names are still
importable from here for one release.
"""

from __future__ import annotations

import time
from typing import Any

from urlsieve.filter import Filter

__all__ = ["rules_info"]

#: Names moved to the assembly room: module → names, importable from here for a release.
_MOVED = {
    "urlsieve.config.rules": (
        "category_names",
        "category_rules",
        "check_selection",
        "compile_lists",
        "load_selected",
        "open_snapshot",
        "resolve_selection",
        "snapshot_selection",
    ),
    "urlsieve.config.assemble": (
        "LayeredLoader",
        "base_loader",
        "configured_category_names",
        "filter_loader",
        "policy_loader",
        "rules_notify",
        "rules_watch",
    ),
}


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


def __getattr__(name: str) -> Any:
    import importlib

    for module, names in _MOVED.items():
        if name in names:
            return getattr(importlib.import_module(module), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
