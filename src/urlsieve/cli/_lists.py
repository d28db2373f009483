"""List options shared by ``check``, ``explain`` and ``filter``: loading, progress, warnings."""

from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import replace
from pathlib import Path

from urlsieve.config import GatewayConfig, configured_rules, load_config, rules_source
from urlsieve.exceptions import ConfigError
from urlsieve.filter import Filter
from urlsieve.match import Verdict
from urlsieve.rules import FORMATS, Rule, list_files

__all__ = [
    "add_list_arguments",
    "load_filter",
    "progress_bar",
    "rule_fields",
    "take_urls",
    "verdict_record",
]

#: Show a progress bar when the lists are at least this large (and stderr is a terminal).
PROGRESS_BYTES = 4 << 20
MAX_WARNINGS = 10


def add_list_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("rule lists")
    g.add_argument(
        "--lists",
        nargs="+",
        action="extend",
        default=[],
        metavar="PATH",
        help="block lists: files, or squidGuard category trees (directories)",
    )
    g.add_argument(
        "--allow",
        nargs="+",
        action="extend",
        default=[],
        metavar="PATH",
        help="allow lists (every rule in them allows)",
    )
    g.add_argument(
        "--snapshot",
        metavar="FILE",
        help="a compiled snapshot (urlsieve compile); with --categories, those of it",
    )
    g.add_argument(
        "--categories",
        metavar="NAME,...",
        help="read only these categories of the trees (an alias selects its target)",
    )
    g.add_argument(
        "--config",
        metavar="FILE",
        help="take lists, allow lists, categories or the snapshot from this gateway "
        "configuration (or $URLSIEVE_CONFIG); options win over $URLSIEVE_* over the file",
    )
    g.add_argument(
        "--list-format",
        choices=("auto", *sorted(FORMATS)),
        default="auto",
        help="format of list files (default: auto, sniffed per file)",
    )
    g.add_argument(
        "--strict", action="store_true", help="stop at the first bad list line (exit status 2)"
    )
    g.add_argument(
        "--all-warnings",
        action="store_true",
        help=f"print every bad list line (default: the first {MAX_WARNINGS})",
    )


class _Bar:
    """A one-line progress bar on stderr: ``loading lists  42% 9.3/22.0 MB``."""

    def __init__(self, total: int) -> None:
        self.total = max(total, 1)
        self.done = 0
        self.last = 0.0

    def __call__(self, chars: int) -> None:
        self.done += chars
        now = time.monotonic()
        if now - self.last >= 0.1:
            self.last = now
            share = min(self.done / self.total, 1.0)
            bar = "#" * int(share * 30)
            sys.stderr.write(
                f"\rloading lists [{bar:<30}] {share:4.0%} "
                f"{self.done / 1e6:.1f}/{self.total / 1e6:.1f} MB"
            )
            sys.stderr.flush()

    def close(self) -> None:
        sys.stderr.write("\r" + " " * 70 + "\r")
        sys.stderr.flush()


def progress_bar(paths: list[str]) -> _Bar | None:
    """A progress bar for reading ``paths`` when stderr is a terminal and they are large
    (:data:`PROGRESS_BYTES`); None otherwise."""
    if not sys.stderr.isatty():
        return None
    total = sum(f.stat().st_size for f in list_files(paths))
    return _Bar(total) if total >= PROGRESS_BYTES else None


def take_urls(args: argparse.Namespace) -> list[str]:
    """The URLs of a ``--lists PATH... URL...`` command line.

    ``--lists``/``--allow`` take one or more values, so argparse hands them the
    URLs that follow too: trailing values that are not existing files or
    directories are URLs (``--`` before the URLs also works).
    """
    moved: list[str] = []
    for name in ("allow", "lists"):
        values: list[str] = getattr(args, name)
        given = bool(values)
        while values and not Path(values[-1]).exists():
            moved.insert(0, values.pop())
        if given and not values:
            raise ConfigError(
                f"--{name}: no such file or directory: {moved[0]!r} "
                "(put URLs after the lists, or after '--')"
            )
    return moved + list(args.urls)


def _configured(args: argparse.Namespace) -> GatewayConfig:
    """The rule options of the command line, the environment and ``--config``, with the
    gateway's precedence (options > ``URLSIEVE_*`` > file). Rules given on the command
    line replace the configuration's: its snapshot goes with ``--lists``/``--allow``, and
    its learned overlay (``learn.overlay``, enforced beside its own rules) with those and
    with ``--snapshot``."""
    snapshot_option = getattr(args, "snapshot", None)
    if snapshot_option and (args.lists or args.allow):
        raise ConfigError(
            "--snapshot is a whole compiled rule set: give it without --lists/--allow, or "
            "compile those lists into it with `urlsieve compile`"
        )
    config = load_config(
        args.config,
        env=os.environ,
        overrides={
            "lists": args.lists or None,
            "allow": args.allow or None,
            "categories": args.categories,
            "snapshot": snapshot_option,
        },
        needs_rules=False,
    )
    own = not args.lists and not args.allow
    return replace(
        config,
        snapshot=config.snapshot if own else None,
        overlay=config.overlay if own and not snapshot_option else None,
    )


def load_filter(args: argparse.Namespace) -> Filter:
    """Build the filter from ``--lists``/``--allow`` (or ``--config``); report bad lines.

    The assembly room decides, as for the gateway (:func:`urlsieve.config.configured_rules`):
    a compiled snapshot (``--snapshot``, the configuration's, or the only ``--lists``
    path) is opened memory-mapped, ``--categories`` choosing among its categories; the
    rules of a configuration with ``learn.overlay`` come with the learned overlay beside
    them: what was learned, and promoted, is what ``check`` and ``explain`` say.
    """
    config = _configured(args)
    if not config.lists and not config.allow and config.snapshot is None:
        raise ConfigError(
            "no rules: give --lists PATH... (block) and/or --allow PATH..., or --snapshot FILE"
        )
    paths = [*config.lists, *config.allow]
    reads_lists = rules_source(config) is None
    bar = progress_bar(paths) if reads_lists else None
    try:
        flt = configured_rules(
            config,
            _say,
            format=args.list_format,
            strict=args.strict,
            progress=bar,
        )
    finally:
        if bar is not None:
            bar.close()
    if reads_lists:
        _report(flt, args.all_warnings)
    return flt


def _say(message: str) -> None:
    print(f"urlsieve: {message}", file=sys.stderr)


def _report(flt: Filter, all_warnings: bool) -> None:
    """Say what reading the lists skipped, and whether they gave no rule."""
    warnings = flt.warnings
    shown = warnings if all_warnings else warnings[:MAX_WARNINGS]
    for warning in shown:
        print(f"urlsieve: {warning}", file=sys.stderr)
    if len(warnings) > len(shown):
        print(
            f"urlsieve: ... {len(warnings) - len(shown)} more bad list lines skipped "
            "(--all-warnings shows them)",
            file=sys.stderr,
        )
    for skipped in flt.skipped:
        print(f"urlsieve: note: {skipped}", file=sys.stderr)
    if not len(flt):
        print(
            "urlsieve: warning: the lists gave no rules (check the paths and their format)",
            file=sys.stderr,
        )


def rule_fields(rule: Rule | None) -> tuple[str, str, str]:
    """``(action, category, source:line)`` of a deciding rule, dashes when there is none."""
    if rule is None:
        return ("none", "-", "-")
    return (rule.action, rule.category, rule.where)


def verdict_record(
    url: str, verdict: Verdict, matching: list[str] | None = None
) -> dict[str, object]:
    """A verdict as a JSON-ready dict (``matching``: every category with a matching rule,
    the deciding one among them)."""
    rule = verdict.rule
    return {
        "url": url,
        "canonical": verdict.canonical,
        "action": verdict.action,
        "category": verdict.category,
        **({} if matching is None else {"categories": matching}),
        "rule": None
        if rule is None
        else {
            "pattern": rule.pattern,
            "action": rule.action,
            "category": rule.category,
            "source": rule.source,
            "line": rule.line,
        },
    }
