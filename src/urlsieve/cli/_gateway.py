"""Options shared by the gateway subcommands (``squid-helper``, ``serve``)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from urlsieve.gateway.config import GatewayConfig
from urlsieve.gateway.unknown import BurstGate, UnknownFeed

__all__ = [
    "BURST_STORE_SECONDS",
    "add_rule_options",
    "burst_gate",
    "rule_overrides",
    "unknown_feed",
]

#: How long a request waits at most for the burst count in the queue's store.
BURST_STORE_SECONDS = 0.25


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


def unknown_feed(config: GatewayConfig, log: Callable[[str], None]) -> UnknownFeed | None:
    """The feed of unknown URLs into the learner's queue (``learn.queue``), or None when
    learning is off or ``learn.unknown = "allow"``. The queue is opened now: a bad spec
    or an unreadable queue fails at start-up, not at the first unknown URL."""
    if not config.learn_queue or config.unknown_policy == "allow":
        return None
    from urlsieve.learn.sink import queue_sink

    return UnknownFeed(queue_sink(config.learn_queue), log=log)


def burst_gate(config: GatewayConfig, log: Callable[[str], None]) -> BurstGate | None:
    """The cap on requests of an unknown site (``learn.burst``), counted in the learner's
    queue store through a connection of its own (the request path never waits for the
    feed's batch writes); None unless ``learn.unknown = "allow-first"`` with
    ``learn.pending`` other than ``pass``."""
    if not config.learn_queue or config.unknown_policy != "allow-first":
        return None
    if config.pending == "pass":
        return None
    from urlsieve.learn.queue import open_queue

    # On the request path: a store that does not answer within these bounds is skipped for
    # that request (the gate counts in this process and says so), never waited for.
    scheme = config.learn_queue.split(":", 1)[0].lower()
    bounds = (
        {"busy_timeout": BURST_STORE_SECONDS}
        if scheme == "sqlite"
        else {"timeout": BURST_STORE_SECONDS}
        if scheme in ("valkey", "valkeys", "redis", "rediss", "unix")
        else {}
    )
    queue = open_queue(config.learn_queue, **bounds)
    return BurstGate(queue.admit, config.burst, log=log)
