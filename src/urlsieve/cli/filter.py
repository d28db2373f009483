"""``urlsieve filter``: stream URLs from stdin to stdout with their verdicts."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, BinaryIO

from urlsieve.cli._io import stdin_text
from urlsieve.cli._lists import add_list_arguments, load_filter, verdict_record
from urlsieve.exceptions import InvalidURL
from urlsieve.match import Verdict
from urlsieve.rules import Rule
from urlsieve.url import parse_url

#: Lines read per batch (bytes, roughly): output is written once per batch.
BATCH = 1 << 16


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "filter",
        help="stream URLs from stdin to stdout with their verdicts",
        description=(
            "Read one URL per line on standard input and write one line per URL: "
            "'action<TAB>category-or-dash<TAB>rule-source-or-dash<TAB>input-url' "
            "(or JSON lines), so the output lines up with the input. A line that is not "
            "a URL gets the action 'invalid' and is reported on stderr as 'line N: reason'; "
            "the stream goes on and the exit status is then 1 (blank lines are 'invalid' "
            "too, but not reported). Exit status 2: the lists could not be loaded."
        ),
    )
    add_list_arguments(p)
    p.add_argument("--format", choices=("text", "jsonl"), default="text")
    p.add_argument(
        "--only",
        choices=("block", "allow", "none", "invalid"),
        action="append",
        help="write only these verdicts (repeatable)",
    )
    p.set_defaults(run=run)


def _output() -> BinaryIO | None:
    return getattr(sys.stdout, "buffer", None)


def run(args: argparse.Namespace) -> int:
    flt = load_filter(args)
    match = flt.match
    only = frozenset(args.only) if args.only else None
    jsonl = args.format == "jsonl"
    none_prefix = "none\t-\t-\t"
    binary = _output()
    write = sys.stdout.write
    rejected = 0
    number = 0
    stream = stdin_text()
    while True:
        lines = stream.readlines(BATCH)
        if not lines:
            break
        out: list[str] = []
        for line in lines:
            number += 1
            text = line.rstrip("\r\n")
            if number == 1 and text.startswith("\ufeff"):
                text = text[1:]
            try:
                url = parse_url(text)
            except InvalidURL as exc:
                if text.strip():
                    rejected += 1
                    print(f"line {number}: {exc.reason}: {text!r}", file=sys.stderr)
                if only is None or "invalid" in only:
                    if jsonl:
                        record = {"url": text, "action": "invalid", "error": exc.reason}
                        out.append(json.dumps(record) + "\n")
                    else:
                        out.append(f"invalid\t-\t-\t{text}\n")
                continue
            rule: Rule | None = match(url)
            if only is not None and (rule.action if rule is not None else "none") not in only:
                continue
            if jsonl:
                out.append(json.dumps(verdict_record(text, Verdict.of(rule, url.canonical))))
                out.append("\n")
            elif rule is None:
                out.append(f"{none_prefix}{text}\n")
            else:
                out.append(f"{rule.action}\t{rule.category}\t{rule.where}\t{text}\n")
        if binary is not None:
            binary.write("".join(out).encode("utf-8", "surrogateescape"))
        else:
            write("".join(out))
    if binary is not None:
        binary.flush()
    if rejected:
        print(f"urlsieve filter: {rejected} input line(s) rejected", file=sys.stderr)
        return 1
    return 0
