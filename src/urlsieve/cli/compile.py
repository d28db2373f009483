"""``urlsieve compile``: compile rule lists into one memory-mappable snapshot file."""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any

from urlsieve.cli._lists import progress_bar
from urlsieve.config import GatewayConfig, compile_lists, load_config
from urlsieve.exceptions import ConfigError


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "compile",
        help="compile rule lists into a snapshot file",
        description=(
            "Read block lists (--lists) and allow lists (--allow), or the [rules] of a "
            "config file, and write one versioned, checksummed snapshot that helpers and "
            "the service open memory-mapped (shared by every process). The file is "
            "replaced atomically: running helpers pick it up on their next check."
        ),
    )
    p.add_argument("--lists", nargs="+", metavar="PATH", help="block lists or squidGuard dirs")
    p.add_argument("--allow", nargs="+", metavar="PATH", default=None, help="allow lists")
    p.add_argument(
        "--categories",
        metavar="NAME,...",
        help="block only these categories (comma-separated; default: all)",
    )
    p.add_argument("-o", "--output", metavar="FILE", help="snapshot to write (rules.snapshot)")
    p.add_argument("--config", metavar="FILE", help="take lists, categories, output from here")
    p.add_argument("--strict", action="store_true", help="stop at the first bad list line")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    overrides = {
        "lists": args.lists,
        "allow": args.allow,
        "categories": args.categories,
        "snapshot": args.output,
    }
    config = load_config(args.config, env=os.environ, overrides=overrides, needs_rules=False)
    if config.policy is not None:
        return _compile_policy(config, args.strict)
    if not config.lists:
        raise ConfigError("nothing to compile: pass --lists PATH... (or rules.lists in --config)")
    if not config.snapshot:
        raise ConfigError("no output: pass -o FILE (or rules.snapshot in --config)")
    started = time.perf_counter()
    bar = progress_bar([*config.lists, *config.allow])
    try:
        info, source = compile_lists(
            config.lists,
            config.allow,
            config.snapshot,
            categories=config.categories,
            strict=args.strict,
            progress=bar,
        )
    finally:
        if bar is not None:
            bar.close()
    elapsed = time.perf_counter() - started
    for skipped in source.skipped:  # allow-type categories of the trees, and why
        print(f"skipped: {skipped}", file=sys.stderr)
    for warning in source.warnings[:20]:
        print(f"warning: {warning}", file=sys.stderr)
    if len(source.warnings) > 20:
        print(f"warning: … {len(source.warnings) - 20} more skipped lines", file=sys.stderr)
    print(
        f"{info.path}: {info.rules} rules, {info.size} bytes, format {info.format_version}, "
        f"version {info.version}, compiled in {elapsed:.2f} s",
        file=sys.stderr,
    )
    return 0


def _compile_policy(config: GatewayConfig, strict: bool) -> int:
    """A configuration with a policy: its destinations' lists, the trees of [rules] and the
    expression lists, compiled into the snapshot the policy helpers load."""
    from urlsieve import __version__
    from urlsieve.policy.build import build_rules
    from urlsieve.policy.engine import PolicyEngine

    if not config.snapshot:
        raise ConfigError("no output: pass -o FILE (or rules.snapshot in --config)")
    assert config.policy is not None
    started = time.perf_counter()
    rules = build_rules(
        config.policy,
        config.lists,
        config.allow,
        strict=strict,
        meta={"compiled_by": f"urlsieve {__version__}", "policy": config.source_file},
    )
    PolicyEngine(config.policy, rules.filter, expressions=rules.expressions)  # names check
    info = rules.filter.save(config.snapshot)
    elapsed = time.perf_counter() - started
    for warning in rules.warnings[:20]:
        print(f"warning: {warning}", file=sys.stderr)
    if len(rules.warnings) > 20:
        print(f"warning: … {len(rules.warnings) - 20} more skipped lines", file=sys.stderr)
    expressions = sum(len(p) for p in rules.patterns.values())
    print(
        f"{info.path}: {info.rules} rules and {expressions} expressions for the policy, "
        f"{info.size} bytes, version {info.version}, compiled in {elapsed:.2f} s",
        file=sys.stderr,
    )
    return 0
