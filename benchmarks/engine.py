"""The compiled engine (issue 10): the Squid helper and ``urlsieve filter`` against squidGuard by
category count, lookups against rule count, and compiling.

Run: ``python benchmarks/engine.py [--repeats 3] [--write] [--quick]`` (Debian's
``squidguard`` for the squidGuard rows; matplotlib, from the ``bench`` extra, for the plots).

1. Helper throughput, bulk-piped Squid redirector protocol (the lines are written
   while the replies are read, as a busy Squid with ``concurrency`` does), squidGuard
   1.6 (``-C all`` Berkeley DB) against ``urlsieve squid-helper`` on the compiled
   snapshot, the same request lines and lists: one generated category of 200k domains
   and 100k URLs, then the largest 1, 3 and 10 UT1 black categories and all of them.
   Every row states how many categories squidGuard checks (one ``!category`` each in
   its ``pass`` line) and urlsieve enforces (one compiled image for all of them).
2. ``urlsieve filter`` on the one-category workload, the text lists parsed by the run.
3. ``Filter.check_many`` / ``match_many`` per URL against the rule count, canonical and
   raw requests (generated rules in the seed patent's class ratios); ``Filter.check`` one
   URL a call.
4. ``urlsieve compile`` of 1M and 5M rules from a text list: seconds, peak memory
   (the child's max RSS), bytes a rule on disk; start-up (``Filter.load``).
"""

from __future__ import annotations

import argparse
import random
import re
import shutil
import statistics
import string
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import benchmarks._common as common
from benchmarks._common import machine, table, verdict, write_section
from benchmarks.filter import (
    SG_CLIENT,
    SQUIDGUARD,
    SquidGuard,
    black_categories,
    patent_requests,
    patent_rules,
    requests,
)
from benchmarks.gateway import helper_cmd, run_helper
from urlsieve import Filter, InvalidURL, canonicalize
from urlsieve.rules import load_lists

BLOCK_PAGE = "http://blocked.invalid/?url=%u&category=%c"
TIME = shutil.which("time", path="/usr/bin:/bin")  # GNU time (Debian package ``time``)
LINES = 300_000


def _word(rnd: random.Random) -> str:
    return "".join(rnd.choices(string.ascii_lowercase + string.digits, k=rnd.randint(4, 12)))


def one_category(root: Path, domains: int, urls: int, seed: int = 3) -> Path:
    """A squidGuard category of made-up entries: ``domains`` domains, ``urls`` URL prefixes."""
    rnd = random.Random(seed)
    d = root / "onecat"
    d.mkdir(parents=True, exist_ok=True)
    (d / "usage").write_text("black\n")
    tlds = ["com", "net", "org", "info", "test"]
    (d / "domains").write_text(
        "".join(f"{_word(rnd)}.{rnd.choice(tlds)}\n" for _ in range(domains))
    )
    (d / "urls").write_text(
        "".join(f"{_word(rnd)}.{rnd.choice(tlds)}/{_word(rnd)}/\n" for _ in range(urls))
    )
    return d


def request_lines(categories: Sequence[Path], n: int) -> tuple[list[str], str]:
    """``n`` URLs: real traffic plus requests derived from the lists' entries (half in evasion
    spellings), repeated in order up to ``n``."""
    rules = load_lists(categories).rules
    urls, source = requests(rules, n // 2)
    out = (urls * (n // max(1, len(urls)) + 1))[:n]
    return out, source


def helper_row(
    name: str, categories: Sequence[Path], args: argparse.Namespace, workdir: Path
) -> tuple[list[object], dict[str, float]]:
    slug = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")  # squidGuard: no spaces
    snapshot = workdir / f"{slug}.snap"
    start = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "urlsieve", "compile", "-o", str(snapshot), "--lists"]
        + [str(c) for c in categories],
        check=True,
        capture_output=True,
    )
    compile_s = time.perf_counter() - start
    flt = Filter.load(snapshot)
    n_rules = len(flt)
    flt.close()
    urls, _source = request_lines(categories, args.lines)
    lines = [f"{u} {SG_CLIENT}" for u in urls]
    ours = []
    replies: list[bytes] = []
    for _ in range(args.repeats):
        replies, seconds = run_helper(helper_cmd(snapshot, block_page=BLOCK_PAGE), lines)
        ours.append(seconds)
    ours_rate = len(lines) / statistics.median(ours)
    blocked = sum(r.startswith(b"OK") for r in replies)
    sg_rate = float("nan")
    sg_blocked = 0
    if SQUIDGUARD:
        sg = SquidGuard(categories, workdir / f"sg-{slug}")
        sg.build()
        sg_s = []
        for _ in range(args.repeats):
            decisions, seconds, _hwm = sg.run(urls)
            sg_s.append(seconds)
            sg_blocked = sum(decisions)
        sg_rate = len(lines) / statistics.median(sg_s)
    ratio = ours_rate / sg_rate if SQUIDGUARD else float("nan")
    row = [
        name,
        len(categories),
        f"{n_rules:,}",
        f"{len(lines):,}",
        f"{sg_rate:,.0f}",
        f"{ours_rate:,.0f}",
        f"**{ratio:.2f}×**",
        f"{sg_blocked:,} / {blocked:,}",
        f"{compile_s:.1f} s",
    ]
    return row, {"categories": len(categories), "sg": sg_rate, "ours": ours_rate}


def helpers(args: argparse.Namespace, workdir: Path) -> tuple[str, list[dict[str, float]]]:
    rows = []
    points = []
    generated = one_category(
        workdir / "generated", 20_000 if args.quick else 200_000, 10_000 if args.quick else 100_000
    )
    row, point = helper_row("generated, one category", [generated], args, workdir)
    rows.append(row)
    one_point = point
    ut1 = common.SHARED_DATA / "ut1-blacklists"
    if ut1.exists():
        black = black_categories(ut1)
        size = {
            c: sum(len((c / f).read_bytes()) for f in ("domains", "urls") if (c / f).exists())
            for c in black
        }
        black.sort(key=lambda c: -size[c])
        counts = [1, 3] if args.quick else [1, 3, 10, len(black)]
        for k in counts:
            chosen = black[:k]
            label = (
                f"UT1, {'all ' if k == len(black) else ''}{k} largest black"
                if k < len(black)
                else f"UT1, all {k} black"
            )
            row, point = helper_row(label, chosen, args, workdir)
            rows.append(row)
            points.append(point)
    header = [
        "workload",
        "categories checked",
        "rules",
        "request lines",
        "squidGuard lines/s",
        "urlsieve lines/s",
        "ratio",
        "blocked (squidGuard / urlsieve)",
        "urlsieve compile",
    ]
    plot = ""
    if points:
        plot = plot_categories(points)
    goals = [f"one category ≥ 3× ({_ratio(one_point)}: {verdict(_over(one_point, 3))})"]
    if points and not args.quick:
        every = points[-1]
        goals.append(
            f"all {every['categories']:.0f} UT1 categories ≥ 30× ({_ratio(every)}: "
            f"{verdict(_over(every, 30))})"
        )
    return table(header, rows) + plot + "\n\nGoals: " + "; ".join(goals) + ".", [
        one_point,
        *points,
    ]


def _ratio(point: dict[str, float]) -> str:
    return f"{point['ours'] / point['sg']:.2f}×"


def _over(point: dict[str, float], goal: float) -> bool:
    return point["ours"] / point["sg"] >= goal


def plot_categories(points: list[dict[str, float]]) -> str:
    xs = [p["categories"] for p in points]
    series = {
        "squidGuard 1.6": (xs, [p["sg"] for p in points]),
        "urlsieve squid-helper": (xs, [p["ours"] for p in points]),
    }
    return _log_x_plot(
        series,
        ("UT1 black categories checked", "request lines / s"),
        "engine-categories.png",
        "helper throughput against categories",
    )


def _log_x_plot(
    series: dict[str, tuple[list[float], list[float]]],
    labels: tuple[str, str],
    name: str,
    alt: str,
) -> str:
    """Lines on a log x axis, saved beside RESULTS.md; the Markdown that shows it."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "\n\n(no plot: matplotlib is not installed; `pip install -e '.[bench]'`)"
    fig, ax = plt.subplots(figsize=(6, 3.6))
    for (label, (xs, ys)), marker in zip(series.items(), "os^v", strict=False):
        ax.plot(xs, ys, f"{marker}-", label=label)
    ax.set_xscale("log")
    ax.set_xlabel(labels[0])
    ax.set_ylabel(labels[1])
    ax.set_ylim(bottom=0)
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    out = common.RESULTS.parent / name
    fig.savefig(out, dpi=110)
    return f"\n\n![{alt}]({out.name})"


def filter_rate(python: str, lists: Path, urls: Sequence[str], repeats: int) -> float:
    """URLs a second through ``urlsieve filter --lists LISTS`` end to end (median)."""
    data = "".join(f"{u}\n" for u in urls).encode()
    runs = []
    for _ in range(repeats):
        start = time.perf_counter()
        proc = subprocess.run(
            [python, "-m", "urlsieve", "filter", "--lists", str(lists)],
            input=data,
            capture_output=True,
            check=False,
        )
        runs.append(time.perf_counter() - start)
        if proc.returncode not in (0, 1):
            raise RuntimeError(proc.stderr.decode())
    return len(urls) / statistics.median(runs)


def filter_cli(args: argparse.Namespace, workdir: Path) -> str:
    generated = workdir / "generated" / "onecat"
    urls, _ = request_lines([generated], args.lines)
    rate = filter_rate(sys.executable, generated, urls, args.repeats)
    sg_rate = float("nan")
    if SQUIDGUARD:
        sg = SquidGuard([generated], workdir / "sg-filter")
        sg.build()
        sg_rate = len(urls) / statistics.median(sg.run(urls)[1] for _ in range(args.repeats))
    return (
        f"`urlsieve filter --lists onecat < {len(urls):,} URLs` end to end (process start, the "
        f"text lists parsed and compiled, every URL answered): **{rate:,.0f} URLs/s**; "
        f"squidGuard steady state on the same URLs (database built beforehand, timed after "
        f"its warm-up line): {sg_rate:,.0f} lines/s: **{rate / sg_rate:.2f}×** "
        f"(goal ≥ 2×: {verdict(rate / sg_rate >= 2)})."
    )


#: URLs checked one at a time, per rule count.
ONE_AT_A_TIME = 20_000


def lookups(args: argparse.Namespace) -> str:
    sizes = [10_000, 100_000, 1_000_000] if args.quick else [10_000, 100_000, 1_000_000, 5_000_000]
    traffic, _ = common.traffic_urls()
    rows = []
    curves: dict[str, list[float]] = {}
    at_1m: tuple[float, float] | None = None
    for n in sizes:
        rules = patent_rules(n)
        start = time.perf_counter()
        flt = Filter(rules)
        build_s = time.perf_counter() - start
        raw = patent_requests(rules, 100_000) + traffic[:50_000]  # type: ignore[arg-type]
        del rules
        canonical = [canonicalize(u) for u in raw if _valid(u)]
        cells: list[object] = [f"{n:,}", f"{build_s:.1f} s"]
        for label, batch in (("canonical", canonical), ("raw", raw)):
            ok = [u for u in batch if _valid(u)]
            for name, fn, urls in (
                ("check_many", flt.check_many, ok),
                ("match_many", flt.match_many, batch),
            ):
                per = _per_url(fn, urls, args.repeats)
                curves.setdefault(f"{name}, {label}", []).append(per)
                cells.append(f"{per:.2f}")
        one = canonical[:ONE_AT_A_TIME]  # the HTTP service and Scrapy check one URL a call
        cells.append(f"{_per_url(lambda b, f=flt: [f.check(u) for u in b], one, args.repeats):.2f}")
        rows.append(cells)
        if n == 1_000_000:
            at_1m = (float(str(cells[2])), float(str(cells[4])))
        flt.close()
    goals = ""
    if at_1m is not None:
        on_canonical, on_raw = at_1m
        goals = (
            f"\n\nGoals at 1M rules: `check_many` on canonical requests ≤ 0.6 µs a URL "
            f"({on_canonical:.2f}: {verdict(on_canonical <= 0.6)}), on raw traffic ≤ 1 µs "
            f"({on_raw:.2f}: {verdict(on_raw <= 1)})."
        )
    header = [
        "rules",
        "compiled in memory",
        "check_many, canonical (µs/URL)",
        "match_many, canonical",
        "check_many, raw",
        "match_many, raw",
        f"check, one URL a call (canonical, first {ONE_AT_A_TIME:,})",
    ]
    return table(header, rows) + plot_lookups(sizes, curves) + goals


def plot_lookups(sizes: list[int], curves: dict[str, list[float]]) -> str:
    """The batch lookup cost against the rule count (engine-lookups.png)."""
    series = {label: ([float(n) for n in sizes[: len(ys)]], ys) for label, ys in curves.items()}
    return _log_x_plot(
        series,
        ("rules", "µs a URL (median)"),
        "engine-lookups.png",
        "batch lookup cost against the rule count",
    )


def _valid(url: str) -> bool:
    try:
        canonicalize(url)
    except InvalidURL:
        return False
    return True


def _per_url(fn: Callable[[list[str]], object], batch: list[str], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn(batch)
        times.append(time.perf_counter() - start)
    return statistics.median(times) / max(1, len(batch)) * 1e6


def compile_rows(args: argparse.Namespace, workdir: Path) -> str:
    sizes = [100_000, 1_000_000] if args.quick else [1_000_000, 5_000_000]
    rows = []
    goals: list[str] = []
    per_rule: list[float] = []
    for n in sizes:
        text = workdir / f"rules-{n}.txt"
        with text.open("w") as fh:
            for rule in patent_rules(n, lazy=True):
                fh.write(f"{rule.pattern}\n")
        out = workdir / f"rules-{n}.snap"
        # GNU time reports the compiling process's own peak: a child forked from this
        # (large) process would inherit its peak in ru_maxrss.
        report = workdir / "time.txt"
        cmd = [sys.executable, "-m", "urlsieve", "compile", "--lists", str(text), "-o", str(out)]
        start = time.perf_counter()
        subprocess.run(
            [TIME, "-f", "%M", "-o", str(report), *cmd] if TIME else cmd,
            check=True,
            capture_output=True,
        )
        seconds = time.perf_counter() - start
        mb = int(report.read_text().split()[-1]) / 1024 if TIME else float("nan")
        peak = f"{mb:,.0f} MB" if TIME else "-"
        start = time.perf_counter()
        flt = Filter.load(out)
        load_ms = (time.perf_counter() - start) * 1000
        rules = len(flt)
        flt.close()
        size = out.stat().st_size
        rows.append(
            [f"{rules:,}", f"{seconds:.1f} s", peak, f"{size / rules:.0f}", f"{load_ms:.0f} ms"]
        )
        limits = {1_000_000: (3, 400), 5_000_000: (15, 2048)}.get(n)
        if limits is not None:
            goals.append(
                f"{n:,} rules ≤ {limits[0]} s and ≤ {limits[1]:,} MB ({seconds:.1f} s, "
                f"{mb:,.0f} MB: {verdict(seconds <= limits[0] and mb <= limits[1])})"
            )
        per_rule.append(size / rules)
        text.unlink()
        out.unlink()
    header = ["rules", "compile (process)", "peak RSS", "bytes/rule", "Filter.load"]
    goals.append(
        f"≤ 100 bytes a rule on disk ({max(per_rule):.0f}: {verdict(max(per_rule) <= 100)})"
    )
    return table(header, rows) + "\n\nGoals: " + "; ".join(goals) + "."


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--lines", type=int, default=LINES)
    ap.add_argument("--quick", action="store_true", help="small sizes, for a smoke run")
    ap.add_argument("--write", action="store_true", help="write benchmarks/RESULTS.md")
    ap.add_argument("--only", choices=("helpers", "filter", "lookups", "compile"), action="append")
    args = ap.parse_args(argv)
    if args.quick:
        args.lines = min(args.lines, 30_000)
    only = set(args.only or ("helpers", "filter", "lookups", "compile"))
    parts = [
        f"Machine: {machine()}. Command: `python benchmarks/engine.py"
        f"{' --quick' if args.quick else ''} --repeats {args.repeats} --write`; medians of "
        f"{args.repeats} runs. Block page `{BLOCK_PAGE}` (squidGuard's: `http://blocked.invalid/%t`)."
    ]
    with tempfile.TemporaryDirectory(prefix="urlsieve-engine-") as tmp:
        workdir = Path(tmp)
        if "helpers" in only or "filter" in only:
            text, _points = helpers(args, workdir)
            parts.append("### Squid helper against squidGuard, by categories checked\n\n" + text)
        if "filter" in only:
            parts.append("### `urlsieve filter`, one category\n\n" + filter_cli(args, workdir))
        if "lookups" in only:
            parts.append("### Lookups against the rule count (in process)\n\n" + lookups(args))
        if "compile" in only:
            parts.append("### Compiling text lists\n\n" + compile_rows(args, workdir))
    body = "\n\n".join(parts)
    print(body)
    if args.write:
        write_section("engine", "## The compiled engine (`benchmarks/engine.py`)\n\n" + body)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
