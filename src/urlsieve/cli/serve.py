"""``urlsieve serve``: the HTTP lookup service on uvicorn (needs the ``service`` extra)."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from urlsieve._accel import slow_path_message
from urlsieve.cli._gateway import add_rule_options, rule_overrides
from urlsieve.config import burst_gate, learn_admin, parse_bind, read_config, unknown_feed
from urlsieve.exceptions import ConfigError

__all__ = ["STARTUP_FAILED", "register", "run"]

#: Exit status when the application could not start (e.g. the seen store cannot be opened).
STARTUP_FAILED = 2


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "serve",
        help="run the HTTP lookup service",
        description=(
            "Serve GET/POST /v1/check, GET /v1/explain, GET/POST /v1/continue (a "
            "policy's warnings), POST /v1/seen, GET /metrics, GET /healthz and POST "
            "/v1/reload (token) on uvicorn (its proxy headers off: only "
            "service.trusted_proxies may name a client); with a [learn] section "
            "and a token, the review endpoints /v1/learn/* too. SIGHUP reloads the "
            "rules (the old ones stay on failure); SIGINT/SIGTERM stop. Needs "
            "pip install 'urlsieve[service]'."
        ),
        epilog=(
            "Exit status: 0 after SIGINT/SIGTERM; 2 for a configuration error, an "
            "address that cannot be bound (e.g. already in use) or an application that "
            "does not start (never 3, which means 'blocked' for check)."
        ),
    )
    add_rule_options(p)
    p.add_argument("--bind", metavar="HOST:PORT", help="listen address (127.0.0.1:8399)")
    p.add_argument("--seen-store", metavar="SPEC", help="seen store for POST /v1/seen")
    p.add_argument("--log-level", default="warning", help="uvicorn log level")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    overrides = {
        **rule_overrides(args),
        "bind": args.bind,
        "seen_store": args.seen_store,
    }
    whole = read_config(args.config, env=os.environ, overrides=overrides)
    config = whole.gateway
    try:
        from urlsieve.service.app import ServiceLimits, create_app
        from urlsieve.service.server import serve
    except ImportError as exc:
        raise ConfigError(
            f"the service needs its extra: pip install 'urlsieve[service]' ({exc})"
        ) from exc
    host, port = parse_bind(config.bind)

    def log(message: str) -> None:
        print(f"urlsieve serve: {message}", file=sys.stderr, flush=True)

    if (slow := slow_path_message()) is not None:
        log(slow)
    limits = ServiceLimits()
    admin = learn_admin(whole, log)
    feed = unknown_feed(config, log)
    burst = burst_gate(config, log) if feed is not None else None
    app = create_app(
        config,
        log=log,
        limits=limits,
        reload_on_sighup=True,
        unknown=feed,
        learn=admin,
        burst=burst,
    )
    try:
        if not serve(app, host, port, limits=limits, log_level=args.log_level, log=log):
            log("the service did not start (the error is above)")
            return STARTUP_FAILED
    finally:
        if feed is not None:
            feed.close()
        if admin is not None:
            admin.close()
    return 0
