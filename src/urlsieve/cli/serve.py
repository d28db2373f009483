"""``urlsieve serve``: the HTTP lookup service on uvicorn (needs the ``service`` extra)."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from urlsieve.cli._gateway import add_rule_options, rule_overrides, unknown_feed
from urlsieve.exceptions import ConfigError
from urlsieve.gateway.config import load_config, parse_bind

#: Exit status when the application could not start (e.g. the seen store cannot be opened).
STARTUP_FAILED = 2


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "serve",
        help="run the HTTP lookup service",
        description=(
            "Serve GET/POST /v1/check, GET /v1/explain, POST /v1/seen, GET /metrics, "
            "GET /healthz and POST /v1/reload (token) on uvicorn. SIGHUP reloads the "
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
    config = load_config(args.config, env=os.environ, overrides=overrides)
    try:
        from urlsieve.gateway.server import serve
        from urlsieve.gateway.service import ServiceLimits, create_app
    except ImportError as exc:
        raise ConfigError(
            f"the service needs its extra: pip install 'urlsieve[service]' ({exc})"
        ) from exc
    host, port = parse_bind(config.bind)

    def log(message: str) -> None:
        print(f"urlsieve serve: {message}", file=sys.stderr, flush=True)

    limits = ServiceLimits()
    feed = unknown_feed(config, log)
    app = create_app(config, log=log, limits=limits, reload_on_sighup=True, unknown=feed)
    try:
        if not serve(app, host, port, limits=limits, log_level=args.log_level, log=log):
            log("the service did not start (the error is above)")
            return STARTUP_FAILED
    finally:
        if feed is not None:
            feed.close()
    return 0
