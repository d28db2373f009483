"""At the gateway: the Squid helper against squidGuard, snapshots, memory, the lookup service.

Run: ``python benchmarks/gateway.py [--repeats 3] [--write] [--quick]`` (Debian's
``squidguard`` for the squidGuard rows and ``wrk`` for the service load test).

1. Helper throughput through the Squid helper protocol on stdin/stdout: the
   UT1 blacklist categories from ../shared/data (or a generated tree of the
   same size), the same request lines (real traffic plus requests derived
   from list entries, half in evasion spellings) to ``urlsieve squid-helper``
   (compiled snapshot) and to squidGuard 1.6 (``-C all`` database); seconds
   from the first line written to the last reply read, after a warm-up line.
2. Snapshots at 1M rules (generated in the seed patent's class ratios):
   compile time, file size, load time (``Filter.load``, with and without the
   checksum pass) against parsing the same rules from a text list, and the
   reload time of a running process.
3. Memory: 8 helper children on the 1M-rule snapshot, each having answered
   requests; RSS, PSS and private memory per child from /proc/PID/smaps_rollup.
4. The lookup service on uvicorn (one worker), loaded by ``wrk`` for a fixed
   time: single checks (``GET /v1/check``) and batches of 100 (``POST``).
"""

from __future__ import annotations

import argparse
import json
import random
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from urllib.parse import quote

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import benchmarks._common as common
from benchmarks._common import exchange, machine, table, verdict, write_section
from benchmarks.filter import (
    SG_CLIENT,
    SQUIDGUARD,
    SquidGuard,
    black_categories,
    generated_tree,
    patent_requests,
    patent_rules,
    requests,
)
from urlsieve import Filter
from urlsieve.gateway.live import LiveRules
from urlsieve.match.snapshot import compile_snapshot
from urlsieve.rules import load_lists

WRK = shutil.which("wrk")
BLOCK_PAGE = "http://block.lan/?url=%u&category=%c&client=%a"


def mb(n: float) -> str:
    return f"{n / 1e6:,.1f} MB"


def helper_cmd(snapshot: Path, *extra: str, block_page: str = BLOCK_PAGE) -> list[str]:
    return [
        sys.executable,
        "-m",
        "urlsieve",
        "squid-helper",
        "--snapshot",
        str(snapshot),
        "--redirect-url",
        block_page,
        *extra,
    ]


def run_helper(cmd: Sequence[str], lines: Sequence[str]) -> tuple[list[bytes], float]:
    """Replies and seconds from the first request written to the last reply read."""
    proc = subprocess.Popen(
        list(cmd), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
    )
    out, seconds = exchange(proc, f"http://warm.up.invalid/ {SG_CLIENT}", lines)
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.close()
    proc.wait()
    proc.stdout.close()
    return out, seconds


def first_answer_seconds(cmd: Sequence[str]) -> float:
    """Process start to the first reply: what a restart or a new helper child costs."""
    start = time.perf_counter()
    proc = subprocess.run(
        list(cmd),
        input=f"http://a.example/ {SG_CLIENT}\n".encode(),
        capture_output=True,
        check=True,
    )
    if not proc.stdout:
        raise RuntimeError(f"no answer from {cmd[0]}")
    return time.perf_counter() - start


# --------------------------------------------------------------------------- 1. helper


def helper_throughput(args: argparse.Namespace, workdir: Path) -> str:
    ut1 = common.SHARED_DATA / "ut1-blacklists"
    if ut1.exists():
        categories = black_categories(ut1)
        data = (
            f"UT1 blacklists from ../shared/data, {len(categories)} categories with usage 'black'"
        )
    else:
        categories = generated_tree(workdir / "generated", 560_000, 24_000)
        data = "generated squidGuard tree (../shared/data absent)"
    if args.quick:
        categories = categories[:12]
    start = time.perf_counter()
    flt = Filter.from_lists(categories)
    parse_s = time.perf_counter() - start
    snapshot = workdir / "ut1.snap"
    start = time.perf_counter()
    info = compile_snapshot(flt.rules, snapshot)
    compile_s = time.perf_counter() - start
    rules = load_lists(categories).rules
    urls, source = requests(rules, 6_000 if args.quick else 30_000)
    lines = [f"{u} {SG_CLIENT}" for u in urls]
    channel_lines = [f"{i % 16} {u} {SG_CLIENT}" for i, u in enumerate(urls)]

    rows = []
    ours_s = []
    ours_replies: list[bytes] = []
    for _ in range(args.repeats):
        ours_replies, seconds = run_helper(helper_cmd(snapshot), lines)
        ours_s.append(seconds)
    ours = statistics.median(ours_s)
    ours_blocked = [r.startswith(b"OK status=") for r in ours_replies]
    chan_s = statistics.median(
        run_helper(helper_cmd(snapshot, "--channels", "yes"), channel_lines)[1]
        for _ in range(args.repeats)
    )
    start_ours = statistics.median(
        first_answer_seconds(helper_cmd(snapshot)) for _ in range(args.repeats)
    )
    rows.append(
        [
            "urlsieve squid-helper (snapshot)",
            f"{len(urls) / ours:,.0f}",
            f"{start_ours * 1000:,.0f} ms",
            f"{sum(ours_blocked):,}",
            "-",
        ]
    )
    rows.append(
        [
            "urlsieve squid-helper, channel IDs (concurrency)",
            f"{len(urls) / chan_s:,.0f}",
            "-",
            "-",
            "-",
        ]
    )
    summary = "squidGuard not installed (apt-get install squidguard): no comparison"
    if SQUIDGUARD:
        sg = SquidGuard(categories, workdir / "squidguard")
        sg_build = sg.build()
        sg_s = []
        sg_blocked: list[bool] = []
        for _ in range(args.repeats):
            sg_blocked, seconds, _hwm = sg.run(urls)
            sg_s.append(seconds)
        sg_med = statistics.median(sg_s)
        start_sg = statistics.median(
            first_answer_seconds([SQUIDGUARD, "-c", str(sg.conf)]) for _ in range(args.repeats)
        )
        agree = sum(a == b for a, b in zip(ours_blocked, sg_blocked, strict=True))
        only_ours = sum(a and not b for a, b in zip(ours_blocked, sg_blocked, strict=True))
        only_sg = sum(b and not a for a, b in zip(ours_blocked, sg_blocked, strict=True))
        rows.append(
            [
                "squidGuard 1.6 (`-C all` db)",
                f"{len(urls) / sg_med:,.0f}",
                f"{start_sg * 1000:,.0f} ms",
                f"{sum(sg_blocked):,}",
                f"{agree / len(urls):.2%} (only urlsieve blocks {only_ours:,}, "
                f"only squidGuard {only_sg:,})",
            ]
        )
        ratio = sg_med / ours
        goal = verdict(ratio >= 2)
        summary = (
            f"urlsieve helper vs squidGuard with **{len(categories)} categories** (squidGuard "
            "checks each in turn; urlsieve one compiled image; by category count: *The "
            f"compiled engine* below): **{ratio:.2f}×** its throughput on the same "
            f"request lines (goal ≥ 2×: {goal}). squidGuard's database build: {sg_build:.1f} s. "
            "Where the two disagree, benchmarks/filter.py classifies why (squidGuard's "
            "canonicalisation misses on evasion spellings, and its raw-prefix matches)."
        )
    header = ["helper", "lines/s (median)", "start to first answer", "blocked", "agreement"]
    return (
        f"Data: {data}: {len(flt):,} rules ({info.size / len(flt):,.0f} B/rule in a "
        f"{mb(info.size)} snapshot; text lists parsed in {parse_s:.1f} s, compiled in "
        f"{compile_s:.1f} s).  \nRequests: {len(urls):,} lines ({source}), Squid's default "
        f"extras `{SG_CLIENT}`; median of {args.repeats} runs.\n\n"
        + table(header, rows)
        + f"\n\n{summary}"
    )


# --------------------------------------------------------------------------- 2. snapshot


def snapshot_at_scale(args: argparse.Namespace, workdir: Path) -> tuple[str, Path, list[str]]:
    n = 100_000 if args.quick else args.rules
    rules = patent_rules(n)
    text = workdir / "million.txt"
    text.write_text("".join(f"{r.pattern}\n" for r in rules), encoding="utf-8")
    snapshot = workdir / "million.snap"
    start = time.perf_counter()
    info = compile_snapshot(rules, snapshot)
    compile_s = time.perf_counter() - start

    def timed(fn: object) -> float:
        times = []
        for _ in range(args.repeats):
            start = time.perf_counter()
            fn()  # type: ignore[operator]
            times.append(time.perf_counter() - start)
        return statistics.median(times)

    load_verify = timed(lambda: Filter.load(snapshot).check("http://a.example/"))
    load_fast = timed(lambda: Filter.load(snapshot, verify=False).check("http://a.example/"))
    parse = timed(lambda: Filter.from_lists([text]).check("http://a.example/"))
    live = LiveRules(lambda: Filter.load(snapshot))
    reload_s = timed(live.reload)
    live_lists = LiveRules(lambda: Filter.from_lists([text]))
    reload_lists = timed(live_lists.reload)
    rows = [
        ["compile (`urlsieve compile`)", f"{compile_s:.2f} s", f"file {mb(info.size)}"],
        ["`Filter.load` (mmap + checksum pass)", f"{load_verify * 1000:.1f} ms", ""],
        ["`Filter.load(verify=False)` (mmap + header)", f"{load_fast * 1000:.2f} ms", ""],
        [
            "`Filter.from_lists` on the same rules as text",
            f"{parse:.2f} s",
            f"{parse / load_verify:,.0f}× the snapshot load",
        ],
        ["reload of a running process (snapshot)", f"{reload_s * 1000:.1f} ms", "LiveRules.reload"],
        ["reload of a running process (text lists)", f"{reload_lists:.2f} s", ""],
    ]
    body = (
        f"{n:,} generated rules (the seed patent's class ratios ½ host, ¼ host/a, "
        f"¼ host/a/b[/c]); median of {args.repeats}.\n\n" + table(["step", "time", "note"], rows)
    )
    return body, snapshot, patent_requests(rules, 5_000)


# --------------------------------------------------------------------------- 3. memory


def _rollup(pid: int) -> dict[str, int]:
    out = {}
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()[1:]:
        key, value = line.split(":", 1)
        out[key] = int(value.split()[0]) * 1024
    return out


def memory(args: argparse.Namespace, snapshot: Path, urls: list[str]) -> str:
    size = snapshot.stat().st_size
    procs = [
        subprocess.Popen(
            helper_cmd(snapshot),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        for _ in range(args.children)
    ]
    payload = "".join(f"{u} {SG_CLIENT}\n" for u in urls).encode()

    def feed(proc: subprocess.Popen[bytes]) -> None:
        assert proc.stdin is not None
        proc.stdin.write(payload)
        proc.stdin.flush()

    writers = [threading.Thread(target=feed, args=(p,)) for p in procs]
    for writer in writers:
        writer.start()
    for proc in procs:  # read every reply while the writers feed (pipes are small)
        assert proc.stdout is not None
        for _ in urls:
            proc.stdout.readline()
    for writer in writers:
        writer.join()
    stats = [_rollup(p.pid) for p in procs]
    for proc in procs:
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.close()
        proc.wait()
        proc.stdout.close()
    rss = sum(s["Rss"] for s in stats)
    pss = sum(s["Pss"] for s in stats)
    private = [s["Private_Clean"] + s["Private_Dirty"] for s in stats]
    shared = [s["Shared_Clean"] + s["Shared_Dirty"] for s in stats]
    rows = [
        [f"child {i + 1}", mb(s["Rss"]), mb(s["Pss"]), mb(p), mb(sh)]
        for i, (s, p, sh) in enumerate(zip(stats, private, shared, strict=True))
    ]
    rows.append(["**total**", mb(rss), mb(pss), mb(sum(private)), "-"])
    per_child = statistics.median(private)
    return (
        f"{args.children} `urlsieve squid-helper` children on the {mb(size)} snapshot of "
        f"section 2, each after answering {len(urls):,} requests (from /proc/PID/smaps_rollup)."
        "\n\n"
        + table(["process", "RSS", "PSS", "private", "shared"], rows)
        + f"\n\nPrivate memory per child: {mb(per_child)} = **{per_child / size:.1%} of the "
        f"snapshot size** (the Python interpreter and urlsieve's modules; the snapshot pages are "
        f"shared). The {args.children} children hold {mb(pss)} in total (PSS) where "
        f"{args.children} private copies of the rules would need at least "
        f"{mb(args.children * size)}."
    )


# --------------------------------------------------------------------------- 4. service


def _wrk(url: str, script: Path, seconds: int) -> tuple[float, float, float]:
    """Requests/s, p50 and p99 latency (ms) from ``wrk --latency``."""
    proc = subprocess.run(
        [WRK or "wrk", "-t2", "-c16", f"-d{seconds}s", "--latency", "-s", str(script), url],
        capture_output=True,
        text=True,
        check=True,
    )
    out = proc.stdout
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))  # type: ignore[union-attr]

    def pct(p: str) -> float:
        m = re.search(rf"^\s+{p}%\s+([\d.]+)(us|ms|s)\s*$", out, re.MULTILINE)
        if m is None:
            raise RuntimeError(f"no {p}% line in wrk output:\n{out}")
        scale = {"us": 0.001, "ms": 1.0, "s": 1000.0}[m.group(2)]
        return float(m.group(1)) * scale

    if "Non-2xx" in out or "Socket errors" in out:
        raise RuntimeError(f"wrk saw errors:\n{out}")
    return rps, pct("50"), pct("99")


def service(args: argparse.Namespace, snapshot: Path, urls: list[str], workdir: Path) -> str:
    if WRK is None:
        return "wrk not installed (apt-get install wrk): service load test not run."
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "urlsieve",
            "serve",
            "--snapshot",
            str(snapshot),
            "--bind",
            f"127.0.0.1:{port}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(300):
            try:
                with urllib.request.urlopen(base + "/healthz", timeout=5) as resp:
                    if resp.status == 200:
                        break
            except OSError:
                time.sleep(0.05)
        sample = random.Random(3).sample(urls, min(1000, len(urls)))
        encoded = ",".join(json.dumps("/v1/check?url=" + quote(u, safe="")) for u in sample)
        single = workdir / "single.lua"
        single.write_text(
            f"local paths = {{{encoded}}}\nlocal i = 0\n"
            "request = function()\n  i = i % #paths + 1\n"
            '  return wrk.format("GET", paths[i])\nend\n'
        )
        batch = workdir / "batch.lua"
        body = json.dumps({"urls": sample[:100]})
        batch.write_text(
            'wrk.method = "POST"\nwrk.headers["Content-Type"] = "application/json"\n'
            f"wrk.body = {json.dumps(body)}\n"
        )
        seconds = 3 if args.quick else args.wrk_seconds
        rps1, p50_1, p99_1 = _wrk(base, single, seconds)
        rps100, p50_100, p99_100 = _wrk(base + "/v1/check", batch, seconds)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    rows = [
        [
            "`GET /v1/check?url=` (1 URL)",
            f"{rps1:,.0f}",
            f"{rps1:,.0f}",
            f"{p50_1:.2f}",
            f"{p99_1:.2f}",
        ],
        [
            "`POST /v1/check` (100 URLs)",
            f"{rps100:,.0f}",
            f"{rps100 * 100:,.0f}",
            f"{p50_100:.2f}",
            f"{p99_100:.2f}",
        ],
    ]
    return (
        f"`urlsieve serve` (uvicorn, 1 worker) on the section-2 snapshot, `wrk -t2 -c16 "
        f"-d{seconds}s --latency` on the same 2-core machine (wrk takes CPU from the server), "
        "requests cycling through 1,000 generated URLs (half hits).\n\n"
        + table(["request", "requests/s", "URLs/s", "p50 ms", "p99 ms"], rows)
    )


# --------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--rules", type=int, default=1_000_000)
    parser.add_argument("--children", type=int, default=8)
    parser.add_argument("--wrk-seconds", type=int, default=8)
    parser.add_argument("--quick", action="store_true", help="small data, for a smoke run")
    parser.add_argument("--write", action="store_true", help="write benchmarks/RESULTS.md")
    parser.add_argument(
        "--data",
        type=Path,
        default=common.SHARED_DATA,
        help=f"the shared data directory (default {common.SHARED_DATA}; from a git worktree "
        "point it at the main checkout's ../shared/data)",
    )
    args = parser.parse_args(argv)
    common.SHARED_DATA = args.data  # traffic_urls() and the UT1 lists are read from here
    workdir = Path(tempfile.mkdtemp(prefix="urlsieve-gateway-bench-"))
    try:
        print("1. helper throughput …", file=sys.stderr)
        helper = helper_throughput(args, workdir)
        print(helper, file=sys.stderr)
        print("2. snapshot at scale …", file=sys.stderr)
        snap_text, snapshot, urls = snapshot_at_scale(args, workdir)
        print(snap_text, file=sys.stderr)
        print("3. memory …", file=sys.stderr)
        mem = memory(args, snapshot, urls)
        print(mem, file=sys.stderr)
        print("4. service …", file=sys.stderr)
        svc = service(args, snapshot, urls, workdir)
        print(svc, file=sys.stderr)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    command = "python benchmarks/gateway.py " + " ".join(argv if argv is not None else sys.argv[1:])
    body = (
        "## At the gateway: Squid helper, snapshots, memory, lookup service\n\n"
        f"Command: `{command.strip()}`  \nMachine: {machine()}, shared with other jobs.\n\n"
        "### Helper throughput: urlsieve vs squidGuard, Squid helper protocol on stdin/stdout\n\n"
        f"{helper}\n\n### Compiled snapshot at scale\n\n{snap_text}\n\n"
        f"### Memory of {args.children} helper children (shared snapshot)\n\n{mem}\n\n"
        f"### Lookup service load test\n\n{svc}\n"
    )
    if args.write:
        write_section("gateway", body)
    print(body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
