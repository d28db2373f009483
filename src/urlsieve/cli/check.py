"""``urlsieve check``: the verdict for each URL given."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from urlsieve.cli._io import input_lines, is_blank, too_long
from urlsieve.cli._lists import (
    add_list_arguments,
    load_filter,
    rule_fields,
    take_urls,
    verdict_record,
)
from urlsieve.exceptions import InvalidURL

#: Exit status when every URL was read and at least one is blocked.
BLOCKED = 3


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "check",
        help="check URLs against rule lists",
        description=(
            "Print 'action<TAB>category<TAB>rule-source<TAB>url' for each URL (arguments, or "
            "standard input with '-'). Exit status: 0 nothing blocked, 3 at least one URL "
            "blocked, 1 some URL could not be read (reported on stderr), 2 usage or list error."
        ),
    )
    p.add_argument("urls", nargs="*", metavar="URL", help="URLs, or '-' to read standard input")
    add_list_arguments(p)
    p.add_argument("--format", choices=("text", "jsonl"), default="text")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    urls = take_urls(args)
    flt = load_filter(args)
    rejected = blocked = 0
    for number, text in input_lines(urls):
        if text is None:
            rejected += 1
            print(f"line {number}: {too_long()}", file=sys.stderr)
            continue
        if is_blank(text):
            continue  # a blank line is no URL, and no error
        try:
            verdict = flt.check(text)
        except InvalidURL as exc:
            rejected += 1
            print(f"line {number}: {exc.reason}: {text[:200]!r}", file=sys.stderr)
            continue
        blocked += verdict.blocked
        if args.format == "jsonl":
            matching = flt.matching_categories(text)
            print(json.dumps(verdict_record(text, verdict, matching)))
        else:
            print("\t".join((*rule_fields(verdict.rule), text)))
    if rejected:
        print(f"urlsieve check: {rejected} input(s) rejected", file=sys.stderr)
        return 1
    return BLOCKED if blocked else 0
