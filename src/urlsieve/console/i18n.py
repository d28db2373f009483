"""Translations of the block pages and the console, chosen by ``Accept-Language``.

A catalog is a JSON object mapping the English text to its translation
(``locale/<tag>.json`` in this package, or in the administrator's template directory,
which wins). English needs none. A text missing from a catalog stays English.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

__all__ = ["Catalogs", "negotiate"]

MAX_HEADER = 1024
MAX_CATALOG = 1 << 20


def negotiate(header: str | None, available: set[str]) -> str:
    """The best of ``available`` (lower-case tags) for an ``Accept-Language`` value:
    exact tag first, then its primary language; ``en`` when nothing fits."""
    if not header:
        return "en"
    ranked: list[tuple[float, int, str]] = []
    for index, part in enumerate(header[:MAX_HEADER].split(",")[:32]):
        tag, _, params = part.strip().partition(";")
        tag = tag.strip().lower()
        q = 1.0
        params = params.strip()
        if params.startswith("q="):
            try:
                q = float(params[2:])
            except ValueError:
                q = 0.0
        if tag and q > 0 and not math.isnan(q):
            ranked.append((-q, index, tag))
    for _q, _i, tag in sorted(ranked):
        if tag == "en" or tag.startswith("en-"):
            return "en"
        if tag in available:
            return tag
        primary = tag.split("-")[0]
        if primary in available:
            return primary
        for name in sorted(available):
            if name.split("-")[0] == primary:
                return name
    return "en"


class Catalogs:
    """The catalogs of the package, then of ``override`` (its ``locale/`` directory)."""

    def __init__(self, package: Path, override: Path | None = None) -> None:
        self.catalogs: dict[str, dict[str, str]] = {}
        for directory in (package, override):
            if directory is None or not directory.is_dir():
                continue
            for path in sorted(directory.glob("*.json")):
                if path.stat().st_size > MAX_CATALOG:
                    raise ValueError(f"{path}: a catalog of over {MAX_CATALOG} bytes")
                data = json.loads(path.read_text("utf-8"))
                if not isinstance(data, dict) or not all(
                    isinstance(k, str) and isinstance(v, str) for k, v in data.items()
                ):
                    raise ValueError(f"{path}: a catalog maps English text to text")
                self.catalogs.setdefault(path.stem.lower(), {}).update(data)

    @property
    def languages(self) -> set[str]:
        return set(self.catalogs)

    def gettext(self, language: str) -> dict[str, str]:
        return self.catalogs.get(language, {})
