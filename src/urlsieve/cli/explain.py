"""``urlsieve explain``: why a URL gets its verdict."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from urlsieve.cli._lists import add_list_arguments, load_filter, take_urls
from urlsieve.cli._policy import add_who_arguments, engine_for, wants_policy, who_and_when
from urlsieve.exceptions import ConfigError, InvalidURL
from urlsieve.policy.engine import explain_decision


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "explain",
        help="show the canonical URL, the expressions probed and the deciding rule",
        description=(
            "Explain the verdict for each URL: its canonical form, the lookup expressions "
            "probed (most specific first) and the rule (file:line) that decided. "
            "Exit status 1 if a URL cannot be read, 2 on usage or list errors."
        ),
    )
    p.add_argument("urls", nargs="*", metavar="URL")
    add_list_arguments(p)
    add_who_arguments(p)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    if wants_policy(args):
        return _run_policy(args)
    urls = take_urls(args)
    flt = load_filter(args)
    if not urls:
        raise ConfigError("explain needs at least one URL after the lists")
    status = 0
    for i, url in enumerate(urls):
        if i:
            print()
        try:
            print(flt.explain(url))
        except InvalidURL as exc:
            print(f"urlsieve explain: {exc.reason}: {url!r}", file=sys.stderr)
            status = 1
    return status


def _run_policy(args: argparse.Namespace) -> int:
    """The decision of the configured policy for each URL, for one client at one time."""
    urls = take_urls(args)
    if not urls:
        raise ConfigError("explain needs at least one URL")
    engine = engine_for(args, args.config or os.environ.get("URLSIEVE_CONFIG"))
    who, at = who_and_when(args, engine)
    status = 0
    for i, url in enumerate(urls):
        if i:
            print()
        try:
            print("\n".join(explain_decision(engine, url, who, at)))
        except InvalidURL as exc:
            print(f"urlsieve explain: {exc.reason}: {url!r}", file=sys.stderr)
            status = 1
    return status
