"""``urlsieve dedup``: stream URLs through a seen store, printing the unseen ones."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Iterator
from itertools import islice
from typing import Any, TextIO

from urlsieve.cli._io import input_lines
from urlsieve.exceptions import InvalidURL
from urlsieve.seen import SeenStore, open_seen, parse_spec
from urlsieve.seen.base import PROFILES

MARKERS = {True: "new", False: "seen"}


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "dedup",
        help="print only the URLs not seen before (de-duplicate a stream)",
        description=(
            "Read URLs (arguments, or standard input with '-' or none), add each to the store, "
            "and print the ones it had not seen. A URL that cannot be canonicalised is "
            "reported on stderr as 'line N: reason' and the run goes on (exit status 1). "
            "Progress and, at the end, the store's statistics go to stderr."
        ),
        epilog=(
            "stores: memory:  exact:PATH[?capacity=N]  bloom:PATH[?capacity=N&error=E]  "
            "(add ?readonly=1 to only look up, ?profile=crawler to change canonicalisation)"
        ),
    )
    p.add_argument("urls", nargs="*", metavar="URL", help="URLs, or '-' to read standard input")
    p.add_argument("--store", required=True, metavar="SPEC", help="seen store, e.g. bloom:seen.bf")
    p.add_argument(
        "--print",
        dest="show",
        choices=("new", "seen", "all"),
        default="new",
        help="which URLs to print; 'all' prefixes each with 'new<TAB>' or 'seen<TAB>'",
    )
    p.add_argument(
        "--profile",
        choices=sorted(PROFILES),
        help="canonicalisation profile (default: the spec's, else filter)",
    )
    p.add_argument(
        "--batch", type=int, default=1000, metavar="N", help="URLs per store batch (default 1000)"
    )
    p.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="progress line on stderr (default: when stderr is a terminal)",
    )
    p.set_defaults(run=run)


class _Progress:
    def __init__(self, out: TextIO, enabled: bool) -> None:
        self._out = out
        self._enabled = enabled
        self._start = self._last = time.monotonic()

    def update(self, read: int, new: int, rejected: int, final: bool = False) -> None:
        now = time.monotonic()
        if not self._enabled or (not final and now - self._last < 0.5):
            return
        self._last = now
        rate = read / max(now - self._start, 1e-9)
        end = "\n" if final else ""
        line = f"\r{read:,} read, {new:,} new, {rejected:,} rejected, {rate:,.0f} URLs/s"
        self._out.write(line + end)
        self._out.flush()


def _batches(items: Iterator[tuple[int, str]], size: int) -> Iterator[list[tuple[int, str]]]:
    while batch := list(islice(items, size)):
        yield batch


def _add(
    store: SeenStore, batch: list[tuple[int, str]], *, lookup: bool = False
) -> list[bool | InvalidURL]:
    """Flags for a batch (True: new); a batch with bad URLs is redone one URL at a time.

    With ``lookup`` nothing is added: True means "not in the store".
    """

    def many(urls: list[str]) -> list[bool]:
        if lookup:
            return [not seen for seen in store.contains_many(urls)]
        return list(store.add_many(urls))

    try:
        return list[bool | InvalidURL](many([text for _, text in batch]))
    except InvalidURL:
        pass
    flags: list[bool | InvalidURL] = []
    for _, text in batch:
        try:
            flags.append(many([text])[0])
        except InvalidURL as exc:
            flags.append(exc)
    return flags


def run(args: argparse.Namespace) -> int:
    if args.batch < 1:
        print("urlsieve dedup: --batch must be at least 1", file=sys.stderr)
        return 2
    profile = PROFILES[args.profile] if args.profile else None
    progress = _Progress(
        sys.stderr, sys.stderr.isatty() if args.progress is None else args.progress
    )
    write = sys.stdout.write
    read = new = rejected = 0
    readonly = parse_spec(args.store).params.get("readonly", "").lower() in (
        "1",
        "true",
        "yes",
        "on",
    )
    with open_seen(args.store, profile=profile) as store:
        for batch in _batches(input_lines(args.urls), args.batch):
            flags = _add(store, batch, lookup=readonly)
            for (number, text), flag in zip(batch, flags, strict=True):
                read += 1
                if isinstance(flag, InvalidURL):
                    rejected += 1
                    print(f"line {number}: {flag.reason}: {text!r}", file=sys.stderr)
                    continue
                new += flag
                if args.show == "all":
                    write(f"{MARKERS[flag]}\t{text}\n")
                elif flag == (args.show == "new"):
                    write(text + "\n")
            sys.stdout.flush()
            progress.update(read, new, rejected)
        store.flush()
        progress.update(read, new, rejected, final=True)
        stats = store.stats()
    print(
        f"urlsieve dedup: {read:,} read, {new:,} new, {read - new - rejected:,} seen, "
        f"{rejected:,} rejected" + (" (read-only: nothing added)" if readonly else ""),
        file=sys.stderr,
    )
    for key, value in stats.as_dict().items():
        print(f"  {key}: {value}", file=sys.stderr)
    return 1 if rejected else 0
