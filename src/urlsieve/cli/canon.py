"""``urlsieve canon``: print the canonical form of each URL."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from urlsieve.cli._io import input_lines, is_blank, too_long
from urlsieve.exceptions import InvalidURL
from urlsieve.url import lookup_expressions, parse_url
from urlsieve.url.profile import PROFILES


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "canon",
        help="print the canonical form of URLs",
        description=(
            "Print one canonical URL per input URL (arguments, or standard input with '-'), "
            "one output line per input line. A URL that cannot be canonicalised gets an "
            "empty output line and is reported on stderr as 'line N: reason', the run goes "
            "on, and the exit status is 1; a blank line gets an empty line, not reported."
        ),
    )
    p.add_argument("urls", nargs="*", metavar="URL", help="URLs, or '-' to read standard input")
    p.add_argument(
        "--profile",
        choices=sorted(PROFILES),
        default="filter",
        help="canonicalisation profile (default: filter)",
    )
    p.add_argument(
        "--format",
        choices=("text", "jsonl"),
        default="text",
        help="text: the canonical URL; jsonl: its parts as JSON lines",
    )
    p.add_argument(
        "--expressions",
        action="store_true",
        help="print the lookup expressions of each URL, tab-separated",
    )
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    profile = PROFILES[args.profile]
    write = sys.stdout.write
    rejected = 0
    for number, text in input_lines(args.urls):
        # One output line per input line: a blank or rejected line gets an empty one.
        if text is None or is_blank(text):
            if text is None:
                rejected += 1
                print(f"line {number}: {too_long()}", file=sys.stderr)
            write("\n")
            continue
        try:
            url = parse_url(text, profile)
        except InvalidURL as exc:
            rejected += 1
            print(f"line {number}: {exc.reason}: {text[:200]!r}", file=sys.stderr)
            write("\n")
            continue
        if args.expressions:
            write("\t".join(lookup_expressions(url)) + "\n")
        elif args.format == "jsonl":
            record = {
                "canonical": url.canonical,
                "scheme": url.scheme,
                "host": url.host,
                "port": url.port,
                "path": url.path,
                "query": url.query,
                "userinfo": url.userinfo,
                "is_ip": url.is_ip,
            }
            write(json.dumps(record) + "\n")
        else:
            write(url.canonical + "\n")
    if rejected:
        print(f"urlsieve canon: {rejected} input(s) rejected", file=sys.stderr)
        return 1
    return 0
