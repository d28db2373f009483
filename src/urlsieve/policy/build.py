"""Compiling a policy's destinations into one snapshot, and loading a compiled policy.

Each destination's ``domainlist`` and ``urllist`` are read as one category named
after it; the lists of ``[rules]`` (UT1 trees) add their own categories beside.
The expression lists are read and checked here (RE2), so a bad line is reported
as ``file:line: reason`` at compile time and the good lines still load.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from urlsieve.exceptions import RuleSyntaxError
from urlsieve.filter import Filter
from urlsieve.match.snapshot import SnapshotBuilder, SnapshotMatcher
from urlsieve.policy.expressions import ExpressionSet, read_expressions
from urlsieve.policy.model import Policy
from urlsieve.rules.load import LoadResult, load_category_files, load_lists, read_list_text
from urlsieve.rules.model import ALLOW

__all__ = ["PolicyRules", "build_rules"]


@dataclass
class PolicyRules:
    """A policy's compiled rules: the filter (categories = destinations), the expression
    lists, and every line skipped on the way."""

    filter: Filter
    expressions: ExpressionSet
    warnings: list[RuleSyntaxError] = field(default_factory=list)
    patterns: dict[str, list[str]] = field(default_factory=dict)
    #: ``file:line: text`` for lines read in a way worth knowing (squidGuard's grammar).
    notes: list[str] = field(default_factory=list)


def build_rules(
    policy: Policy,
    lists: Sequence[str] = (),
    allow: Sequence[str] = (),
    *,
    strict: bool = False,
    meta: dict[str, object] | None = None,
) -> PolicyRules:
    """Read every list the policy names (and ``lists``/``allow`` trees) into one snapshot."""
    builder = SnapshotBuilder()
    result = LoadResult()
    if lists:
        # The trees' expression files are applied here (under RE2), not reported as skipped.
        tree = load_lists(lists, strict=False, sink=builder)
        for report in tree.reports:
            if report.format == "squidguard-expressions":
                report.warnings.clear()
        if strict and tree.warnings:
            raise tree.warnings[0]
        result.merge(tree)
    if allow:
        result.merge(load_lists(allow, action=ALLOW, strict=strict, sink=builder))
    patterns: dict[str, list[str]] = {}
    warnings: list[RuleSyntaxError] = []
    notes: list[str] = []
    for report in result.reports:
        # A category's "expressions" file (UT1's optional very_restrictive_expression is not
        # applied unless named as a destination's expressionlist).
        if (
            report.format == "squidguard-expressions"
            and report.action != ALLOW
            and os.path.basename(report.source) == "expressions"
        ):
            good, bad = read_expressions(report.source)
            warnings += bad
            if good:
                patterns.setdefault(report.category, []).extend(p for p, _line in good)
    for dest in policy.dests.values():
        if dest.domainlist or dest.urllist:
            loaded = load_category_files(
                dest.name,
                domains=dest.domainlist,
                urls=dest.urllist,
                strict=strict,
                sink=builder,
            )
            result.merge(loaded)
        if dest.expressionlist:
            notes += _expression_notes(dest.expressionlist)
            good, bad = read_expressions(dest.expressionlist)
            if bad and strict:
                raise bad[0]
            warnings += bad
            patterns[dest.name] = [p for p, _line in good]
    meta = {**(meta or {}), "aliases": dict(result.aliases), "expressions": patterns}
    matcher = SnapshotMatcher.from_image(builder.build(meta))
    rules = Filter(matcher, load=result)
    return PolicyRules(
        rules, ExpressionSet(patterns), result.warnings + warnings, patterns, result.notes + notes
    )


def _expression_notes(path: str) -> list[str]:
    """squidGuard reads every line of an expressionlist as an expression, blanks and all
    (``sgDestExpressionList`` in its ``sg.y``): one with blanks around it needs them in
    the URL and matches nothing there; urlsieve strips them (a deviation, noted)."""
    try:
        text = read_list_text(Path(path))
    except (OSError, RuleSyntaxError):
        return []  # read_expressions reports it
    out = []
    for number, line in enumerate(text.split("\n"), 1):
        body = line.rstrip("\r")
        core = body.strip()
        if core and not core.startswith("#") and core != body:
            out.append(
                f"{path}:{number}: {body!r} has blanks around it: squidGuard keeps them (so it "
                "matches nothing there); urlsieve strips them (deviation)"
            )
    return out


def load_rules(path: str) -> PolicyRules:
    """A compiled policy snapshot (written by :func:`build_rules` and ``Filter.save``)."""
    rules = Filter.load(path)
    info = rules.info
    patterns = dict(info.meta.get("expressions", {})) if info is not None else {}
    return PolicyRules(rules, ExpressionSet(patterns), [], patterns)
