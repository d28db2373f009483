"""``urlsieve demo``: run the main job on the bundled sample data, no setup needed."""

from __future__ import annotations

import argparse
import sys
from importlib import resources
from typing import Any

from urlsieve.exceptions import InvalidURL
from urlsieve.url import canonicalize


def sample_urls() -> list[str]:
    """The bundled sample requests (comments and blank lines removed)."""
    text = resources.files("urlsieve").joinpath("data/sample-urls.txt").read_text("utf-8")
    return [ln for ln in text.splitlines() if ln.strip() and not ln.startswith("#")]


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "demo",
        help="canonicalise the bundled sample requests (no files or servers needed)",
        description="Run urlsieve on its bundled sample requests and show what it does.",
    )
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    urls = sample_urls()
    width = max(len(u) for u in urls)
    print(f"{'request':<{width}}  canonical", file=sys.stdout)
    for url in urls:
        try:
            result = canonicalize(url)
        except InvalidURL as exc:
            result = f"(rejected: {exc.reason})"
        print(f"{url:<{width}}  {result}")
    return 0
