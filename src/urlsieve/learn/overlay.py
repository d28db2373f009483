"""Learned verdicts → ordinary list trees → the overlay snapshot, swapped atomically.

The trees are squidGuard-style category directories any urlsieve reader (and an
administrator) can read, each rule preceded by its provenance comment::

    learned/block/gambling/urls      # learned block category=gambling score=85 phrases=…
                                     =casino.test/en/casino.html|
    learned/block/gambling/domains   promoted hosts (enough pages of one host alike)
    learned/allow/clean/urls         pages classified clean (the learned allow list)
    learned/allow/override/…         an operator's ``learn allow``
    learned/block/unclassifiable/urls  pages the crawler could not read (allow/… when
                                     ``learn.unclassifiable = "allow"``)

A learned page is written as an exact rule (``=host/path|``: that host, that path), not as
the list line ``host/path``, which would also cover every page below the path and every
subdomain: a clean front page would otherwise allow a whole shared host unclassified.
Only promotion (enough pages of one host alike) makes a host rule.

The overlay snapshot is compiled from them and replaces the old one by rename, so a
gateway (which watches the file) swaps it in between two requests. It holds only what
was learned, so compiling it takes milliseconds whatever the size of the base lists.
"""

from __future__ import annotations

import time
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from urlsieve.filter import Filter
from urlsieve.learn.verdicts import Learned, Verdicts
from urlsieve.match.snapshot import SnapshotInfo
from urlsieve.store.files import file_lock, write_atomic

__all__ = [
    "CLEAN_CATEGORY",
    "UNCLASSIFIABLE",
    "OverlayBuild",
    "build_overlay",
    "category_directory",
    "promoted_hosts",
    "render_tree",
    "rule_line",
]

#: The category of the learned allow list (pages classified clean).
CLEAN_CATEGORY = "clean"
#: The category of a verdict on a URL the crawler could not read (see learn.runner).
UNCLASSIFIABLE = "unclassifiable"


@dataclass(frozen=True)
class OverlayBuild:
    """What one rebuild did."""

    rules: int
    promoted: int
    seconds: float
    info: SnapshotInfo


def rule_line(verdict: Learned) -> str:
    """The list line enforcing ``verdict``: its host for a host rule, else the exact rule
    for its page (that host only, that path only: a trailing ``|`` of the path itself stays
    part of the path)."""
    return verdict.key if verdict.is_host else f"={verdict.key}|"


def category_directory(category: str) -> str:
    """``category`` as one directory name inside the tree: path separators, NUL and other
    control characters become ``_``, and an empty or dot-led name is prefixed with ``_``,
    so no category (an operator's ``--category``, a phrase list's) writes outside it; it is
    cut to 60 characters (a file name has a length limit in bytes)."""
    name = "".join("_" if c in "/\\" or ord(c) < 0x20 or c == "\x7f" else c for c in category[:60])
    return f"_{name}" if not name or name.startswith(".") else name


def promoted_hosts(verdicts: Iterable[Learned], after: int) -> dict[str, Learned]:
    """Hosts to block as a whole: at least ``after`` pages of the host classified blocked
    under one category, and none of its pages classified clean or allowed by an operator.
    Redirect and ``unclassifiable`` verdicts do not count: a short link or an open
    redirect to a blocked site, or a page the crawler could not read, says nothing about
    the host's own pages. ``after`` 0 turns promotion off."""
    if after <= 0:
        return {}
    blocked: dict[str, Counter[str]] = defaultdict(Counter)
    scores: dict[tuple[str, str], list[Learned]] = defaultdict(list)
    allowed: set[str] = set()
    for v in verdicts:
        if v.is_host or v.category == UNCLASSIFIABLE:  # says nothing of the other pages
            continue
        if v.action == "allow":
            allowed.add(v.host)
        elif v.source == "learned":
            blocked[v.host][v.category] += 1
            scores[(v.host, v.category)].append(v)
    promoted = {}
    for host, categories in blocked.items():
        if host in allowed:
            continue
        category, pages = categories.most_common(1)[0]
        if pages >= after and len(categories) == 1:
            examples = scores[(host, category)]
            promoted[host] = Learned(
                key=host,
                host=host,
                action="block",
                category=category,
                source="learned",
                score=max(e.score for e in examples),
                evidence=examples[0].evidence,
                url=examples[0].url,
                note=f"promoted: {pages} pages of {host} classified {category}",
            )
    return promoted


def _write(path: Path, lines: list[str]) -> None:
    """Write a list file atomically (readers never see half of it; a crash keeps the old)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, "".join(lines))


def render_tree(store: Verdicts, tree: Path, *, promote_after: int = 3) -> tuple[int, int]:
    """Write the verdicts as list trees under ``tree/block`` and ``tree/allow``; files of
    categories that no longer have rules are emptied. Returns (rules, promoted hosts)."""
    verdicts = list(store.all())
    explicit_hosts = {v.key for v in verdicts if v.is_host}
    promoted = {
        h: v for h, v in promoted_hosts(verdicts, promote_after).items() if h not in explicit_hosts
    }
    # Lines per (side, category, kind): a file's path is built once, not per verdict.
    files: dict[tuple[str, str, str], list[str]] = defaultdict(list)
    for v in [*verdicts, *promoted.values()]:
        side = "block" if v.action == "block" else "allow"
        category = (
            category_directory(v.category)
            if side == "block"
            else (
                "override"
                if v.source == "override"
                else UNCLASSIFIABLE
                if v.category == UNCLASSIFIABLE
                else CLEAN_CATEGORY
            )
        )
        kind = "domains" if v.is_host else "urls"
        files[(side, category, kind)] += [f"# {v.provenance()}\n", f"{rule_line(v)}\n"]
    paths = {
        tree / side / category / kind: lines for (side, category, kind), lines in files.items()
    }
    for old in tree.glob("*/*/*"):
        if old.is_file() and old not in paths and old.name in ("urls", "domains"):
            _write(old, [])
    for path, lines in paths.items():
        _write(path, lines)
    for side in ("block", "allow"):
        (tree / side).mkdir(parents=True, exist_ok=True)
    return sum(len(lines) // 2 for lines in files.values()), len(promoted)


def build_overlay(
    store: Verdicts, tree: Path, output: Path, *, promote_after: int = 3
) -> OverlayBuild:
    """Render the trees and compile them into the overlay snapshot at ``output``
    (written to a temporary file and renamed over the old one).

    Builds are serialised across processes (an ``flock`` on ``output.lock``): the
    learner and the service's overrides both build, and a build that read the verdicts
    before another's write must not be the one renamed last."""
    started = time.perf_counter()
    output.parent.mkdir(parents=True, exist_ok=True)
    with file_lock(output.with_name(output.name + ".lock")):
        rules, promoted = render_tree(store, tree, promote_after=promote_after)
        source = Filter.from_lists(
            [tree / "block"],
            [tree / "allow"],
            meta={"learned": True, "tree": str(tree)},
        )
        info = source.save(output)
        source.close()
    return OverlayBuild(rules, promoted, time.perf_counter() - started, info)
