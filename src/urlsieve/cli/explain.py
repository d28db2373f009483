"""``urlsieve explain``: why a URL gets its verdict."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from urlsieve.cli._lists import add_list_arguments, load_filter, take_urls
from urlsieve.exceptions import ConfigError, InvalidURL


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
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
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
