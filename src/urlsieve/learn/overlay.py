"""Learned verdicts → ordinary list trees → the overlay snapshot, swapped atomically.

The trees are squidGuard-style category directories any urlsieve reader (and an
administrator) can read, each rule preceded by its provenance comment::

    learned/block/gambling/urls      # learned block category=gambling score=85 phrases=…
                                     =casino.test/en/casino.html|
    learned/block/gambling/domains   promoted sites (enough pages of one registrable
                                     domain alike: the domain and its subdomains)
    learned/allow/clean/urls         pages classified clean (the learned allow list)
    learned/allow/override/…         an operator's ``learn allow``
    learned/block/unclassifiable/urls  pages the crawler could not read (allow/… when
                                     ``learn.unclassifiable = "allow"``)
    learned/allow/resource/urls      subresources (images, style sheets, scripts, fonts)
                                     of sites with no dirty page

A **resource** (a URL the crawler found to be an image, a style sheet, a script, a font…:
:data:`urlsieve.learn.crawl.SUBRESOURCE_TYPES`) has no text to classify: its verdict
follows its site (the registrable domain, :func:`~urlsieve.url.expressions.learning_domain`),
rendered anew at every build (:func:`render_resource`): **block**, with the site's category,
when the site is blocked (an explicit host verdict covering it, or promotion) or has any
page learned dirty; **allow** otherwise. So when a page of the site is later learned dirty,
its resources are blocked from the next build on. A resource does not count as a page of
its site (it never makes a site known clean, nor promotes one).

A learned page is written as an exact rule (``=host/path|``: that host, that path), not as
the list line ``host/path``, which would also cover every page below the path and every
subdomain: a clean front page would otherwise allow a whole shared host unclassified.
Only promotion (enough pages of one site alike) makes a domain rule.

The sites known clean (enough pages clean, none blocked) are listed in the snapshot's
metadata (``clean_domains``): the gateway lets their new pages pass without counting
them against the burst cap of unknown sites (``learn.burst``).

The overlay snapshot is compiled from them and replaces the old one by rename, so a
gateway (which watches the file) swaps it in between two requests. It holds only what
was learned, so compiling it takes milliseconds whatever the size of the base lists.
"""

from __future__ import annotations

import dataclasses
import itertools
import time
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from urlsieve._notify import notify_change
from urlsieve.filter import Filter
from urlsieve.learn.verdicts import Learned, Verdicts
from urlsieve.match.snapshot import SnapshotInfo
from urlsieve.store.files import file_lock, write_atomic
from urlsieve.url.expressions import learning_domain

__all__ = [
    "CLEAN_CATEGORY",
    "RESOURCE",
    "UNCLASSIFIABLE",
    "OverlayBuild",
    "build_overlay",
    "category_directory",
    "clean_domains",
    "promoted_hosts",
    "render_resource",
    "render_tree",
    "rendered_resources",
    "rule_line",
    "site_report",
]

#: The category of the learned allow list (pages classified clean).
CLEAN_CATEGORY = "clean"
#: The category of a verdict on a URL the crawler could not read (see learn.runner).
UNCLASSIFIABLE = "unclassifiable"
#: The stored category of a subresource's verdict (its rendered one follows its site).
RESOURCE = "resource"


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
    """Sites to block as a whole, keyed by their registrable domain
    (:func:`~urlsieve.url.expressions.learning_domain`: ``a1.evil.test`` and
    ``a2.evil.test`` are one site, ``evil.test``): at least ``after`` pages of the site
    classified blocked under one category, no other blocked category, and more pages
    blocked than allowed. The pages of the site classified clean (or allowed by an
    operator) stay allowed as exceptions: their exact rules are more specific than the
    domain rule. Redirect and ``unclassifiable`` verdicts do not count: a short link or an
    open redirect to a blocked site, or a page the crawler could not read, says nothing
    about the site's own pages. ``after`` 0 turns promotion off."""
    if after <= 0:
        return {}
    sites = _sites(verdicts)
    promoted = {}
    for domain, site in sites.items():
        if not site.blocked:
            continue
        category, pages = site.blocked.most_common(1)[0]
        if pages >= after and len(site.blocked) == 1 and pages > len(site.allowed):
            examples = site.examples[category]
            exceptions = (
                f"; {len(site.allowed)} allowed pages are exceptions" if site.allowed else ""
            )
            promoted[domain] = Learned(
                key=domain,
                host=domain,
                action="block",
                category=category,
                source="learned",
                score=max(e.score for e in examples),
                evidence=examples[0].evidence,
                url=examples[0].url,
                note=f"promoted: {pages} pages of {domain} classified {category}{exceptions}",
            )
    return promoted


def clean_domains(verdicts: Iterable[Learned], after: int) -> list[str]:
    """Sites known clean: at least ``after`` pages classified clean and none blocked.
    Their new pages are allowed the first time and queued (a dirty one gets its own
    rule); they do not wait for the burst cap (``learn.burst``). ``after`` 0: none."""
    if after <= 0:
        return []
    return sorted(
        domain
        for domain, site in _sites(verdicts).items()
        if not site.blocked and site.clean >= after
    )


@dataclass
class _Site:
    """What was learned about one registrable domain's pages."""

    blocked: Counter[str] = field(default_factory=Counter)
    examples: dict[str, list[Learned]] = field(default_factory=lambda: defaultdict(list))
    allowed: list[Learned] = field(default_factory=list)
    clean: int = 0  # pages learned clean (not an operator's allow)


def _sites(verdicts: Iterable[Learned]) -> dict[str, _Site]:
    sites: dict[str, _Site] = defaultdict(_Site)
    for v in verdicts:
        if v.is_host or v.category in (UNCLASSIFIABLE, RESOURCE):  # not a page of the site
            continue
        site = sites[learning_domain(v.host)]
        if v.action == "allow":
            site.allowed.append(v)
            site.clean += v.source == "learned"
        elif v.source == "learned":
            site.blocked[v.category] += 1
            site.examples[v.category].append(v)
    return sites


def site_report(verdicts: Iterable[Learned], host: str, after: int) -> dict[str, Any]:
    """What ``learn show`` says of ``host``'s site: its registrable domain, the domain's
    verdict (an operator's or promoted; else known clean, mostly clean or unknown), and
    its pages that decide otherwise (a promoted site's clean pages, a clean site's dirty ones)."""
    verdicts = list(verdicts)
    domain = learning_domain(host)
    site = _sites(verdicts).get(domain, _Site())
    promoted = promoted_hosts(verdicts, after).get(domain)
    explicit = next((v for v in verdicts if v.is_host and v.key == domain), None)
    verdict = explicit or promoted
    if verdict is not None:
        exceptions = (
            site.allowed
            if verdict.action == "block"
            else list(itertools.chain.from_iterable(site.examples.values()))
        )
        state = f"{verdict.action} {verdict.category}"
    elif domain in clean_domains(verdicts, after):
        exceptions, state = [], "known clean"
    elif after > 0 and site.clean >= after and site.clean > sum(site.blocked.values()):
        # The reverse of a promoted site: mostly clean, its blocked pages are exceptions,
        # and new pages are not let through on trust (they wait for their own verdict).
        exceptions = list(itertools.chain.from_iterable(site.examples.values()))
        state = "mostly clean (not trusted: new pages wait for their own verdict)"
    else:
        exceptions, state = [], "unknown"
    pages = sum(site.blocked.values()) + len(site.allowed)
    return {
        "domain": domain,
        "state": state,
        "verdict": verdict,
        "pages": pages,
        "blocked": dict(site.blocked),
        "allowed": len(site.allowed),
        "exceptions": exceptions,
    }


def render_resource(
    verdict: Learned,
    sites: dict[str, _Site],
    hosts: dict[str, Learned],
    promoted: dict[str, Learned],
) -> Learned:
    """The verdict a resource (stored with category :data:`RESOURCE`) is enforced with: its
    site's. Block, with the site's category, when a host verdict covers its host (an
    operator's or the learner's, the most specific one) and blocks, when its site is
    promoted, or when any page of its site was learned dirty (the worse wins: a host
    allow does not unblock the resources of a site with a dirty page); allow otherwise.
    ``sites`` is :func:`_sites` of every verdict, ``hosts`` the host verdicts by key,
    ``promoted`` :func:`promoted_hosts`."""
    domain = learning_domain(verdict.host)
    site = sites.get(domain, _Site())
    what = verdict.note or "a resource"
    labels = verdict.host.split(".")
    covering = next(
        (hosts[h] for h in (".".join(labels[i:]) for i in range(len(labels))) if h in hosts),
        None,
    )
    block: tuple[str, str] | None = None
    if covering is not None and covering.action == "block":
        block = covering.category, f"its site {covering.key} is blocked by {covering.source}"
    elif domain in promoted:
        block = promoted[domain].category, f"its site {domain} is blocked ({promoted[domain].note})"
    elif site.blocked:
        category, pages = site.blocked.most_common(1)[0]
        example = site.examples[category][0].key
        block = (
            category,
            (
                f"its site {domain} has {_pages(sum(site.blocked.values()))} learned dirty "
                f"({pages} {category}, e.g. {example})"
            ),
        )
    if block is not None:
        category, why = block
        note = f"{what}: a resource; {why}"
        return dataclasses.replace(verdict, action="block", category=category, note=note[:1000])
    pages = len(site.allowed)
    why = f"{_pages(pages)} allowed" if pages else "no page learned yet"
    if covering is not None:
        why += f"; its host {covering.key} is allowed by {covering.source}"
    note = f"{what}: a resource; its site {domain} has no dirty page ({why})"
    return dataclasses.replace(verdict, action="allow", category=RESOURCE, note=note[:1000])


def _pages(count: int) -> str:
    return f"{count} page" if count == 1 else f"{count} pages"


def rendered_resources(
    verdicts: Iterable[Learned], after: int, promoted: dict[str, Learned] | None = None
) -> dict[str, Learned]:
    """Every resource verdict as :func:`render_resource` renders it now, by key."""
    verdicts = list(verdicts)
    resources = [v for v in verdicts if v.category == RESOURCE and not v.is_host]
    if not resources:
        return {}
    sites = _sites(verdicts)
    hosts = {v.key: v for v in verdicts if v.is_host}
    if promoted is None:
        promoted = promoted_hosts(verdicts, after)
    return {v.key: render_resource(v, sites, hosts, promoted) for v in resources}


def _write(path: Path, lines: list[str]) -> None:
    """Write a list file atomically (readers never see half of it; a crash keeps the old).
    Not synced: the lists are rendered anew from the verdict store on every build."""
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, "".join(lines), durable=False)


def render_tree(store: Verdicts, tree: Path, *, promote_after: int = 3) -> tuple[int, int]:
    """Write the verdicts as list trees under ``tree/block`` and ``tree/allow``; files of
    categories that no longer have rules are emptied. Returns (rules, promoted hosts)."""
    verdicts = list(store.all())
    explicit_hosts = {v.key for v in verdicts if v.is_host}
    promoted = {
        h: v for h, v in promoted_hosts(verdicts, promote_after).items() if h not in explicit_hosts
    }
    resources = rendered_resources(verdicts, promote_after, promoted)
    # Lines per (side, category, kind): a file's path is built once, not per verdict.
    files: dict[tuple[str, str, str], list[str]] = defaultdict(list)
    for v in [*(resources.get(v.key, v) for v in verdicts), *promoted.values()]:
        side = "block" if v.action == "block" else "allow"
        category = (
            category_directory(v.category)
            if side == "block"
            else (
                "override"
                if v.source == "override"
                else v.category
                if v.category in (UNCLASSIFIABLE, RESOURCE)
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
        clean = clean_domains(store.all(), promote_after)
        source = Filter.from_lists(
            [tree / "block"],
            [tree / "allow"],
            meta={"learned": True, "tree": str(tree), "clean_domains": clean},
        )
        info = source.save(output)
        source.close()
        notify_change(output)
    return OverlayBuild(rules, promoted, time.perf_counter() - started, info)
