"""Options shared by the gateway subcommands (``squid-helper``, ``serve``)."""

from __future__ import annotations

import argparse
from typing import Any

__all__ = ["add_rule_options", "rule_overrides"]


def add_rule_options(p: argparse.ArgumentParser) -> None:
    """``--config``, ``--snapshot``, ``--lists``, ``--allow``, ``--categories``."""
    p.add_argument("--config", metavar="FILE", help="TOML configuration (or $URLSIEVE_CONFIG)")
    p.add_argument("--snapshot", metavar="FILE", help="compiled snapshot to use")
    p.add_argument("--lists", nargs="+", metavar="PATH", help="block lists (when no snapshot)")
    p.add_argument("--allow", nargs="+", metavar="PATH", default=None, help="allow lists")
    p.add_argument("--categories", metavar="NAME,...", help="block only these categories")


def rule_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The rule options given on the command line, as configuration overrides."""
    return {
        "snapshot": args.snapshot,
        "lists": args.lists,
        "allow": args.allow,
        "categories": args.categories,
    }
