"""``urlsieve dedup``: stream URLs through a seen store, printing the unseen ones."""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from itertools import islice
from types import FrameType
from typing import Any, TextIO

from urlsieve.cli._io import Line, input_lines, is_blank, too_long
from urlsieve.exceptions import InvalidURL
from urlsieve.seen import SeenStore, open_seen, parse_spec
from urlsieve.url.profile import PROFILES

MARKERS = {True: "new", False: "seen"}


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "dedup",
        help="print only the URLs not seen before (de-duplicate a stream)",
        description=(
            "Read URLs (arguments, or standard input with '-' or none), add each to the store, "
            "and print the ones it had not seen. A URL that cannot be canonicalised is "
            "reported on stderr as 'line N: reason' and the run goes on (exit status 1). "
            "Progress and, at the end, the store's statistics go to stderr. A URL is never "
            "marked seen without being printed: SIGINT/SIGTERM finish the batch, flush the "
            "store and exit 130; a closed output (| head) is reported with the lines marked "
            "but not delivered, exit status 141."
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

    def note(self, message: str) -> None:
        """A message on its own line: the progress line is cleared first, redrawn later."""
        if self._enabled:
            self._out.write("\r\x1b[K")
            self._last = 0.0  # redraw at the next update
        print(message, file=self._out, flush=True)

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


def _batches(items: Iterator[Line], size: int) -> Iterator[list[Line]]:
    while batch := list(islice(items, size)):
        yield batch


def _add(store: SeenStore, urls: list[str], *, lookup: bool = False) -> list[bool | InvalidURL]:
    """Flags for a batch (True: new); a batch with bad URLs is redone one URL at a time.

    With ``lookup`` nothing is added: True means "not in the store".
    """

    def many(batch: list[str]) -> list[bool]:
        if lookup:
            return [not seen for seen in store.contains_many(batch)]
        return list(store.add_many(batch))

    try:
        return list[bool | InvalidURL](many(urls))
    except InvalidURL:
        pass
    flags: list[bool | InvalidURL] = []
    for url in urls:
        try:
            flags.append(many([url])[0])
        except InvalidURL as exc:
            flags.append(exc)
    return flags


class _Interrupted(Exception):
    """SIGINT or SIGTERM while waiting for input (nothing of the batch is marked yet)."""


class _Signals:
    """SIGINT/SIGTERM handling that never separates marking from printing: while a batch
    is marked and printed a signal only asks to stop after it; while waiting for input it
    stops at once (what was read of the next batch is not marked)."""

    def __init__(self) -> None:
        self.busy = False
        self.stop: int | None = None
        self._old: dict[int, Any] = {}

    def _handle(self, signum: int, _frame: FrameType | None) -> None:
        self.stop = signum
        if not self.busy:
            raise _Interrupted

    def __enter__(self) -> _Signals:
        if threading.current_thread() is threading.main_thread():
            for signum in (signal.SIGINT, signal.SIGTERM):
                self._old[signum] = signal.signal(signum, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        for signum, handler in self._old.items():
            signal.signal(signum, handler)


class _Output:
    """Standard output written batch by batch, counting what the reader really got."""

    def __init__(self) -> None:
        try:
            sys.stdout.flush()
            self._fd: int | None = sys.stdout.fileno()
        except (AttributeError, OSError, ValueError):  # not a file (tests capture it)
            self._fd = None

    def write(self, lines: list[str]) -> int:
        """Write ``lines``; how many were delivered whole (all, unless the reader left)."""
        if self._fd is None:
            buffer = getattr(sys.stdout, "buffer", None)
            if buffer is not None:  # bytes that are not UTF-8 go out as they came in
                buffer.write("".join(lines).encode("utf-8", "surrogateescape"))
                buffer.flush()
            else:
                sys.stdout.write("".join(lines))
                sys.stdout.flush()
            return len(lines)
        data = memoryview("".join(lines).encode("utf-8", "surrogateescape"))
        done = 0
        try:
            while done < len(data):
                done += os.write(self._fd, data[done:])
        except BrokenPipeError:
            delivered = bytes(data[:done]).count(b"\n")
            raise _Closed(delivered) from None
        return len(lines)


class _Closed(Exception):
    """The reader closed the output after ``delivered`` whole lines."""

    def __init__(self, delivered: int) -> None:
        self.delivered = delivered


class _Undelivered(Exception):
    """The reader left: the input lines of the URLs marked seen but not delivered."""

    def __init__(self, lines: list[int]) -> None:
        self.lines = lines


def run(args: argparse.Namespace) -> int:
    if args.batch < 1:
        print("urlsieve dedup: --batch must be at least 1", file=sys.stderr)
        return 2
    profile = PROFILES[args.profile] if args.profile else None
    progress = _Progress(
        sys.stderr, sys.stderr.isatty() if args.progress is None else args.progress
    )
    readonly = parse_spec(args.store).params.get("readonly", "").lower() in (
        "1",
        "true",
        "yes",
        "on",
    )
    counts = {"read": 0, "new": 0, "rejected": 0}
    status = 0
    undelivered: list[int] = []
    with open_seen(args.store, profile=profile) as store, _Signals() as signals:
        output = _Output()
        lines = input_lines(args.urls)
        try:
            for batch in _batches(lines, args.batch):
                signals.busy = True
                try:
                    _dedup_batch(
                        store,
                        batch,
                        show=args.show,
                        readonly=readonly,
                        output=output,
                        counts=counts,
                        note=progress.note,
                    )
                except _Undelivered as closed:
                    undelivered = closed.lines
                    status = 141
                    break
                signals.busy = False
                progress.update(counts["read"], counts["new"], counts["rejected"])
                if signals.stop is not None:
                    break
        except _Interrupted:
            pass
        signals.busy = True  # from here on a signal waits: the store is being flushed
        store.flush()
        stats = store.stats()
        progress.update(counts["read"], counts["new"], counts["rejected"], final=True)
    read, new, rejected = counts["read"], counts["new"], counts["rejected"]
    print(
        f"urlsieve dedup: {read:,} read, {new:,} new, {read - new - rejected:,} seen, "
        f"{rejected:,} rejected" + (" (read-only: nothing added)" if readonly else ""),
        file=sys.stderr,
    )
    if undelivered:
        print(
            f"urlsieve dedup: the output was closed: {len(undelivered):,} URL(s) marked "
            f"seen in the store were not delivered (input lines {_ranges(undelivered)})",
            file=sys.stderr,
        )
    if signals.stop is not None:
        name = signal.Signals(signals.stop).name
        print(f"urlsieve dedup: {name}: stopped after a whole batch", file=sys.stderr)
        status = 130
    for key, value in stats.as_dict().items():
        print(f"  {key}: {_shown(value)}", file=sys.stderr)
    return status or (1 if rejected else 0)


def _dedup_batch(
    store: SeenStore,
    batch: list[Line],
    *,
    show: str,
    readonly: bool,
    output: _Output,
    counts: dict[str, int],
    note: Callable[[str], None],
) -> None:
    """Mark one batch and print it; :class:`_Undelivered` says which marked URLs were not
    printed because the reader left."""
    urls: list[tuple[int, str]] = []
    for number, text in batch:
        counts["read"] += 1
        if text is None:
            counts["rejected"] += 1
            note(f"line {number}: {too_long()}")
        elif is_blank(text):
            counts["read"] -= 1  # a blank line is no URL: not counted, not reported
        else:
            urls.append((number, text))
    flags = _add(store, [text for _, text in urls], lookup=readonly)
    out: list[str] = []
    owed: list[int] = []  # the line of each output line that marked a new URL
    for (number, text), flag in zip(urls, flags, strict=True):
        if isinstance(flag, InvalidURL):
            counts["rejected"] += 1
            note(f"line {number}: {flag.reason}: {text[:200]!r}")
            continue
        counts["new"] += flag
        if show == "all":
            out.append(f"{MARKERS[flag]}\t{text}\n")
        elif flag == (show == "new"):
            out.append(text + "\n")
        else:
            continue
        owed.append(number if flag and not readonly else 0)
    try:
        output.write(out)
    except _Closed as closed:
        raise _Undelivered([n for n in owed[closed.delivered :] if n]) from None


def _ranges(numbers: list[int]) -> str:
    """``3-7, 9`` for [3, 4, 5, 6, 7, 9]."""
    parts: list[str] = []
    start = prev = numbers[0]
    for n in [*numbers[1:], None]:
        if n is not None and n == prev + 1:
            prev = n
            continue
        parts.append(str(start) if start == prev else f"{start}-{prev}")
        if n is not None:
            start = prev = n
    return ", ".join(parts)


def _shown(value: object) -> str:
    """A statistic as a person reads it, not as Python writes it."""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:.3g}" if value < 1 else f"{value:,.2f}"
    if isinstance(value, dict):
        return ", ".join(f"{k}: {_shown(v)}" for k, v in value.items()) or "-"
    if isinstance(value, list | tuple):
        return ", ".join(_shown(v) for v in value) or "-"
    return "-" if value is None else str(value)
