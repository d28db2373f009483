"""The options that choose who asks and when (``explain``, ``config check``), and the policy
engine of a configuration."""

from __future__ import annotations

import argparse
import os

from urlsieve.config import GatewayConfig, load_config, policy_loader
from urlsieve.exceptions import ConfigError
from urlsieve.policy.engine import PolicyEngine, Who, parse_when


def add_who_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("policy (who asks, and when)")
    g.add_argument("--client", metavar="ADDRESS", help="the client address (e.g. 10.1.2.3)")
    g.add_argument("--client-name", metavar="NAME", help="the client host name")
    g.add_argument("--user", metavar="NAME", help="the user name Squid sends")
    g.add_argument("--at", metavar="TIME", help="when, e.g. 2026-05-01T10:00 (default: now)")
    g.add_argument("--squidguard-conf", metavar="FILE", help="the policy of this squidGuard.conf")


def wants_policy(args: argparse.Namespace) -> bool:
    return any(
        getattr(args, k, None) for k in ("client", "client_name", "user", "at", "squidguard_conf")
    )


def policy_engine(config: GatewayConfig) -> PolicyEngine:
    load = policy_loader(config)
    if load is None:
        raise ConfigError(
            "--client/--user/--at need a policy: a configuration with [[acl]] tables "
            "(--config FILE) or --squidguard-conf FILE"
        )
    engine: PolicyEngine = load()
    return engine


def engine_for(args: argparse.Namespace, config_file: str | None) -> PolicyEngine:
    config = load_config(
        config_file,
        env=os.environ,
        overrides={"squidguard_conf": getattr(args, "squidguard_conf", None)},
        needs_rules=False,
    )
    return policy_engine(config)


def who_and_when(args: argparse.Namespace, engine: PolicyEngine) -> tuple[Who, float | None]:
    try:
        at = parse_when(args.at, engine.policy.timezone)
    except ValueError as exc:
        raise ConfigError(f"--at {exc}") from None
    return Who(args.client, args.client_name, args.user), at
