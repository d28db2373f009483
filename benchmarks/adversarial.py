"""Hostile input against input size: is every path that reads a URL, a list line or a body linear?

Run: ``python -m benchmarks.adversarial [--max-kib 1024] [--step-limit 3] [--write]``.
For each path the input doubles from 1 KiB; each step runs in a forked child (2 GiB address
space, killed after ``--step-limit`` × 3 s), and a path stops doubling once one step takes
longer than ``--step-limit`` seconds. The ratio of successive times is ≈2 for a linear path
and ≈4 for a quadratic one; the table shows the median of the last three ratios and flags
paths above 2.8 as superlinear.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import multiprocessing
import os
import resource
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import itertools

from benchmarks._common import machine, table, write_section
from urlsieve import Filter, canonicalize, lookup_expressions
from urlsieve.match.snapshot import compile_snapshot
from urlsieve.rules.model import BLOCK, parse_rule

SUPERLINEAR = 2.8
MEMORY_LIMIT = 2 << 30
RULES = [parse_rule(t, BLOCK, "bench", "b.txt", n) for n, t in enumerate(["evil.com", "a.com/ads"])]
WORK = Path(tempfile.mkdtemp(prefix="urlsieve-adversarial-"))

# -- hostile inputs of about ``n`` bytes ------------------------------------------------------


def many_labels(n: int) -> str:
    return "http://" + "a." * (n // 2) + "evil.com/"


def percent_chain(n: int) -> str:
    # "%252541" → "%2541" → "%41" → "A": one round of unescaping per "25".
    return "http://a.com/%" + "25" * (n // 2) + "41"


def dot_segments(n: int) -> str:
    return "http://a.com/" + "a/../" * (n // 5) + "ads"


def long_query(n: int) -> str:
    return "http://a.com/x?" + "q" * n


def many_segments(n: int) -> str:
    return "http://evil.com/" + "x/" * (n // 2)


# -- the paths under test: (make input, consume it) --------------------------------------------


def _quiet(call: Callable[[], object]) -> None:
    """Run ``call``; an exception (InvalidURL, a cap's error) is an answer, not a failure."""
    with contextlib.suppress(Exception):
        call()


def _snapshot_filter() -> Filter:
    path = WORK / "rules.snap"
    if not path.exists():
        compile_snapshot(RULES, path)
    return Filter.load(path)


def _text_filter() -> Filter:
    path = WORK / "rules.txt"
    path.write_text("evil.com\na.com/ads\n", "utf-8")
    return Filter.from_lists([path])


def _list_file(text: str) -> Path:
    path = WORK / "list.txt"
    path.write_text(text, "utf-8")
    return path


def _helper_over_pipe(data: bytes) -> None:
    from urlsieve.gateway import HelperSettings, LiveRules, SquidHelper
    from urlsieve.gateway.squid import serve

    helper = SquidHelper(LiveRules(_text_filter), HelperSettings(redirect_url="http://b/"))
    read_in, write_in = os.pipe()
    sink = os.open(os.devnull, os.O_WRONLY)

    def feed() -> None:
        with contextlib.suppress(OSError):
            for at in range(0, len(data), 1 << 16):
                os.write(write_in, data[at : at + (1 << 16)])
        os.close(write_in)

    writer = threading.Thread(target=feed)
    writer.start()
    _quiet(lambda: serve(helper, read_in, sink))
    writer.join()
    os.close(read_in)
    os.close(sink)


def _service_post(url: str) -> None:
    from starlette.testclient import TestClient

    from urlsieve.config import load_config
    from urlsieve.service.app import create_app

    config = load_config(
        None, env={}, overrides={"snapshot": str(WORK / "rules.snap"), "seen_store": "memory:"}
    )
    _snapshot_filter()
    with TestClient(create_app(config)) as client:
        client.post("/v1/check", json={"urls": [url]})


def _dedup(text: str) -> None:
    from urlsieve.cli import main

    stdin, sys.stdin = sys.stdin, io.StringIO(text)
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            _quiet(lambda: main(["dedup", "--store", "memory:"]))
    finally:
        sys.stdin = stdin


Case = tuple[str, Callable[[int], object], Callable[[object], None]]

CASES: list[Case] = [
    ("canonicalise: many labels", many_labels, lambda u: _quiet(lambda: canonicalize(u))),
    ("canonicalise: %25 chain", percent_chain, lambda u: _quiet(lambda: canonicalize(u))),
    ("canonicalise: /../ chain", dot_segments, lambda u: _quiet(lambda: canonicalize(u))),
    ("canonicalise: long query", long_query, lambda u: _quiet(lambda: canonicalize(u))),
    (
        "Filter.check (snapshot): many labels",
        many_labels,
        lambda u: _quiet(lambda: _snapshot_filter().check(u)),
    ),
    (
        "Filter.check (snapshot): many segments",
        many_segments,
        lambda u: _quiet(lambda: _snapshot_filter().check(u)),
    ),
    (
        "Filter.check (text lists): many labels",
        many_labels,
        lambda u: _quiet(lambda: _text_filter().check(u)),
    ),
    (
        "lookup_expressions: many labels",
        many_labels,
        lambda u: _quiet(lambda: lookup_expressions(u)),
    ),
    (
        "lookup_expressions: many segments",
        many_segments,
        lambda u: _quiet(lambda: lookup_expressions(u)),
    ),
    (
        "list load: one huge line",
        lambda n: _list_file("a" * n + ".com\n"),
        lambda p: _quiet(lambda: Filter.from_lists([p])),
    ),
    (
        "list load: a:a:a… line",
        lambda n: _list_file("a:" * (n // 2) + "\n"),
        lambda p: _quiet(lambda: Filter.from_lists([p])),
    ),
    (
        "list load: many lines",
        lambda n: _list_file("".join(f"h{i}.com\n" for i in range(n // 10))),
        lambda p: _quiet(lambda: Filter.from_lists([p])),
    ),
    (
        "Squid helper (pipe): one huge line",
        lambda n: b"http://evil.com/" + b"x" * n + b"\n",
        _helper_over_pipe,  # type: ignore[arg-type]
    ),
    (
        "Squid helper (pipe): many lines",
        lambda n: b"http://evil.com/x\n" * (n // 18),
        _helper_over_pipe,  # type: ignore[arg-type]
    ),
    (
        "POST /v1/check: many labels",
        many_labels,
        lambda u: _quiet(lambda: _service_post(u)),  # type: ignore[arg-type]
    ),
    (
        "urlsieve dedup: stream",
        lambda n: "".join(f"http://a.com/{i}\n" for i in range(n // 20)),
        _dedup,  # type: ignore[arg-type]
    ),
]

# -- timing ------------------------------------------------------------------------------------


def _child(case: Case, size: int, conn: Connection) -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))
    _, make, run = case
    try:
        run(make(64))  # warm-up on another input (no cache hit): imports, rule loading
        data = make(size)
        start = time.perf_counter()
        run(data)
        conn.send(time.perf_counter() - start)
    except MemoryError:
        conn.send("out of memory (2 GiB)")
    except Exception as exc:  # a broken harness must show, not hang the parent
        conn.send(f"error: {exc!r}"[:80])


def time_step(case: Case, size: int, limit: float) -> float | str:
    """Seconds for one run of ``case`` at ``size`` bytes, or why there is no figure."""
    ctx = multiprocessing.get_context("fork")
    receive, send = ctx.Pipe(duplex=False)
    child = ctx.Process(target=_child, args=(case, size, send))
    child.start()
    if not receive.poll(3 * limit + 10):
        child.kill()
        child.join()
        return f"> {3 * limit:.0f} s (killed)"
    result: float | str = receive.recv()
    child.join()
    return result


def run_case(case: Case, sizes: list[int], limit: float) -> tuple[list[float | str], str]:
    times: list[float | str] = []
    for size in sizes:
        seconds = time_step(case, size, limit)
        times.append(seconds)
        if isinstance(seconds, str) or seconds > limit:
            break
    numbers = [t for t in times if isinstance(t, float)]
    ratios = [b / a for a, b in itertools.pairwise(numbers) if a > 1e-4]
    if len(numbers) < len(times):
        return times, "superlinear (step failed)"
    if not ratios:
        return times, "n/a"
    ratio = statistics.median(ratios[-3:])
    flag = " **superlinear**" if ratio > SUPERLINEAR else ""
    return times, f"{ratio:.2f}{flag}"


def _fmt(t: float | str) -> str:
    return t if isinstance(t, str) else f"{t * 1000:.1f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--max-kib", type=int, default=1024)
    parser.add_argument("--step-limit", type=float, default=3.0)
    parser.add_argument("--only", help="run only the paths whose name contains this")
    parser.add_argument("--write", action="store_true", help="update benchmarks/RESULTS.md")
    args = parser.parse_args()
    sizes = [1024 << i for i in range(args.max_kib.bit_length()) if 1 << i <= args.max_kib]
    rows = []
    for case in CASES:
        if args.only and args.only not in case[0]:
            continue
        times, ratio = run_case(case, sizes, args.step_limit)
        cells = [_fmt(t) for t in times] + ["—"] * (len(sizes) - len(times))
        rows.append([case[0], ratio, *cells])
        print(case[0], ratio, " ".join(cells), flush=True)
    header = ["path", "time ratio per doubling", *(f"{s // 1024} KiB (ms)" for s in sizes)]
    body = (
        "## Hostile input against input size (`benchmarks/adversarial.py`)\n\n"
        f"`python -m benchmarks.adversarial --write` on {machine()}. Each path's input doubles "
        f"from 1 KiB to {args.max_kib} KiB; a path stops doubling after a step over "
        f"{args.step_limit:g} s (`—`), a step is killed after {3 * args.step_limit:g} s and runs "
        "in 2 GiB. Ratio ≈2: linear; ≈4: quadratic; above "
        f"{SUPERLINEAR} flagged. No plot: matplotlib is not in the venv.\n\n" + table(header, rows)
    )
    if args.write:
        write_section("adversarial", body)
    else:
        print(body)


if __name__ == "__main__":
    main()
