"""Drivers: feed bytes to each edge of urlsieve and collect what comes out, as bytes.

- the Squid helper: :func:`ask` (one line through ``SquidHelper.handle``) and
  :func:`serve_stream` (a byte stream through ``serve`` over ``os.pipe``);
- the streaming commands: :func:`run_cli` (``main(argv)`` in-process, stdin and
  stdout as byte streams, stdout strict UTF-8 like a terminal in a UTF-8 locale).
"""

from __future__ import annotations

import functools
import io
import os
import sys
import threading
import typing
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import product

from tests.fuzz.policy import BLOCK_PAGE, rules_filter
from urlsieve.gateway import FailureMode, HelperMode, HelperSettings, LiveRules, SquidHelper
from urlsieve.gateway.squid import serve
from urlsieve.gateway.unknown import UnknownFeed

# -- the Squid helper -------------------------------------------------------------------

MODES = (HelperMode.REDIRECT, HelperMode.REWRITE, HelperMode.ACL)
#: --channels on, off and auto.
CHANNELS = (True, False, None)
CHANNEL_NAMES = {True: "on", False: "off", None: "auto"}


@dataclass(frozen=True)
class HelperCase:
    mode: HelperMode
    channels: bool | None
    failure_mode: FailureMode = FailureMode.CLOSED
    #: Learning on (``unknown = "allow-first"``): unknown URLs go through the real sink
    #: (canonicalised into a memory queue) from the feed's thread.
    learning: bool = False

    @property
    def id(self) -> str:
        learning = "-learning" if self.learning else ""
        return f"{self.mode.value}-channels-{CHANNEL_NAMES[self.channels]}{learning}"

    def helper(self) -> SquidHelper:
        settings = HelperSettings(
            mode=self.mode,
            redirect_url=None if self.mode is HelperMode.ACL else BLOCK_PAGE,
            failure_mode=self.failure_mode,
            channels=self.channels,
        )
        feed = _learning_feed() if self.learning else None
        return SquidHelper(LiveRules(rules_filter), settings, unknown=feed)


@functools.cache
def _learning_feed() -> UnknownFeed:
    """One feed (one thread) for every learning helper of the run."""
    from urlsieve.learn.queue import open_queue
    from urlsieve.learn.sink import queue_sink

    return UnknownFeed(queue_sink(open_queue("memory:")), flush_seconds=0)


HELPER_CASES = (
    *(HelperCase(m, c) for m, c in product(MODES, CHANNELS)),
    HelperCase(HelperMode.REDIRECT, None, learning=True),
    HelperCase(HelperMode.ACL, True, learning=True),
)


def _takes_bytes(helper: SquidHelper) -> bool:
    hints = typing.get_type_hints(helper.handle)
    return next(iter(hints.values())) is bytes


def ask(helper: SquidHelper, line: bytes) -> bytes:
    """One request line through ``helper.handle`` → the reply line, as Squid would read it.

    ``handle`` takes bytes once the helper answers bytes (issue 9); until then it takes
    the line decoded as ``serve`` decodes it, and its reply is encoded as ``serve`` does.
    """
    if _takes_bytes(helper):
        reply: bytes | str = helper.handle(line)  # type: ignore[arg-type]
    else:
        reply = helper.handle(line.decode("utf-8", "surrogateescape"))
    return reply if isinstance(reply, bytes) else reply.encode("utf-8", "surrogateescape")


def serve_stream(helper: SquidHelper, data: bytes, chunk: int = 4096) -> bytes:
    """``data`` written into ``serve`` over a pipe in ``chunk``-byte writes → all it wrote."""
    in_r, in_w = os.pipe()
    out_r, out_w = os.pipe()
    collected = bytearray()

    def feed() -> None:
        try:
            with os.fdopen(in_w, "wb") as fh:
                for start in range(0, len(data), chunk):
                    fh.write(data[start : start + chunk])
                    fh.flush()
        except BrokenPipeError:  # serve stopped reading (it raised): the test reports that
            pass

    def drain() -> None:
        while block := os.read(out_r, 1 << 16):
            collected.extend(block)

    writer = threading.Thread(target=feed)
    reader = threading.Thread(target=drain)
    writer.start()
    reader.start()
    try:
        serve(helper, in_r, out_w)
    finally:
        os.close(out_w)
        os.close(in_r)  # a serve that stopped early must not leave the writer blocked
        writer.join()
        reader.join()
        os.close(out_r)
    return bytes(collected)


def request_channel(line: bytes) -> bytes | None:
    """The channel ID Squid put on a line (``concurrency`` > 0): the first token of digits."""
    first = line.split(b" ", 1)[0]
    return first if first.isdigit() and first.isascii() else None


def reply_result(reply: bytes, channel: bytes | None) -> bytes:
    """``OK``, ``ERR`` or ``BH`` from a reply line (after the echoed channel ID)."""
    tokens = reply.split(b" ")
    if channel is not None and tokens[:1] == [channel]:
        tokens = tokens[1:]
    return tokens[0].rstrip(b"\n") if tokens else b""


# -- the streaming commands --------------------------------------------------------------


@dataclass(frozen=True)
class CliRun:
    status: int
    out: bytes
    err: bytes


def run_cli(argv: Sequence[str], data: bytes) -> CliRun:
    """``urlsieve.cli.main(argv)`` with ``data`` on standard input; everything captured.

    Standard output and error are strict UTF-8 text over byte buffers, as in a terminal
    of a UTF-8 locale: a command that writes undecodable input back must encode it itself.
    """
    from urlsieve.cli import main

    stdin = io.TextIOWrapper(io.BytesIO(data), encoding="utf-8", errors="strict")
    stdout = io.TextIOWrapper(io.BytesIO(), encoding="utf-8", errors="strict", newline="\n")
    stderr = io.TextIOWrapper(io.BytesIO(), encoding="utf-8", errors="strict", newline="\n")
    saved = sys.stdin, sys.stdout, sys.stderr
    sys.stdin, sys.stdout, sys.stderr = stdin, stdout, stderr
    try:
        status = main(list(argv))
    except SystemExit as exc:  # argparse: a usage error
        status = exc.code if isinstance(exc.code, int) else 2
    finally:
        sys.stdin, sys.stdout, sys.stderr = saved
        stdout.flush()
        stderr.flush()
    out = typing.cast(io.BytesIO, stdout.buffer).getvalue()
    err = typing.cast(io.BytesIO, stderr.buffer).getvalue()
    return CliRun(status, out, err)


def input_lines(data: bytes) -> list[bytes]:
    """The lines a command must answer: ``data`` split at ``\\n`` (the last one ended)."""
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    return lines


def output_lines(out: bytes) -> list[bytes]:
    return input_lines(out)


def stream(lines: Sequence[bytes]) -> bytes:
    return b"".join(line + b"\n" for line in lines)
