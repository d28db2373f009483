"""What each install gets (issue 28): the same workloads run on several builds of urlsieve
in one run, each an installed package in its own venv, beside squidGuard.

Run: ``python benchmarks/install.py --build LABEL=PYTHON [--build ...] [--repeats 3]
[--write]``, each PYTHON the interpreter of a venv where urlsieve was installed (``pip
install .`` or a wheel; the work tree's ``src`` is never on its path). Debian's
``squidguard`` for the squidGuard rows.

1. The Squid helper against squidGuard 1.6, steady state: one generated category of 200k
   domains and 100k URLs (squidGuard checks that one category), 300,000 request lines.
2. ``urlsieve filter --lists onecat`` end to end against squidGuard's steady state.
3. ``urlsieve compile`` of 500k and 1M generated rules from a text list.
4. ``Filter.check_many`` at 1M rules (the compiled snapshot loaded), canonical requests.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import benchmarks._common as common
from benchmarks._common import machine, table, verdict, write_section
from benchmarks.engine import BLOCK_PAGE, filter_rate, one_category, request_lines
from benchmarks.filter import SG_CLIENT, SQUIDGUARD, SquidGuard, patent_requests, patent_rules
from benchmarks.gateway import run_helper
from urlsieve import InvalidURL, canonicalize

LINES = 300_000

#: Run by each build's interpreter: its engine report, and check_many's µs a URL.
_CHECK = r"""
import json, statistics, sys, time
from urlsieve import Filter
from urlsieve.url import parse
try:
    from urlsieve._accel import report
    state = report()
    engine = "full" if state.full else ("partial: lacks " + ", ".join(state.missing))
except ImportError:  # builds before urlsieve doctor
    import urlsieve._accel as a
    s = a.speedups
    engine = "none" if s is None else (
        "full" if hasattr(s, "snapshot_match") else "partial: no hashing batches")
urls = open(sys.argv[2], encoding="utf-8").read().split("\n")
repeats = int(sys.argv[3])
def per_url(flt):
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        flt.check_many(urls)
        times.append(time.perf_counter() - start)
    return statistics.median(times) / len(urls) * 1e6
loaded = per_url(Filter.load(sys.argv[1]))
sys.path.insert(0, sys.argv[4])  # the benchmarks' rule generator, as engine.py builds it
from benchmarks.filter import patent_rules
in_memory = per_url(Filter(patent_rules(1_000_000)))
import urlsieve
print(json.dumps({"engine": engine, "file": urlsieve.__file__,
                  "check_us": in_memory, "check_loaded_us": loaded}))
"""


def _seconds(cmd: list[str], **kw: object) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, check=True, capture_output=True, **kw)  # type: ignore[call-overload]
    return time.perf_counter() - start


@dataclass
class Workload:
    onecat: Path
    lines: list[str]
    urls: list[str]
    texts: dict[int, Path]
    canonical: Path
    repeats: int


def measure(python: str, work: Path, load: Workload) -> dict[str, object]:
    onecat, lines, urls, texts, canonical, repeats = (
        load.onecat,
        load.lines,
        load.urls,
        load.texts,
        load.canonical,
        load.repeats,
    )
    out: dict[str, object] = {}
    snap = work / "onecat.snap"
    subprocess.run(
        [python, "-m", "urlsieve", "compile", "--lists", str(onecat), "-o", str(snap)],
        check=True,
        capture_output=True,
    )
    helper = [
        python,
        "-m",
        "urlsieve",
        "squid-helper",
        "--snapshot",
        str(snap),
        "--redirect-url",
        BLOCK_PAGE,
    ]
    out["helper"] = len(lines) / statistics.median(
        run_helper(helper, lines)[1] for _ in range(repeats)
    )
    out["filter"] = filter_rate(python, onecat, urls, repeats)
    for n, text in texts.items():
        target = work / f"rules-{n}.snap"
        cmd = [python, "-m", "urlsieve", "compile", "--lists", str(text), "-o", str(target)]
        out[f"compile_{n}"] = statistics.median(_seconds(cmd) for _ in range(repeats))
    big = work / f"rules-{max(texts)}.snap"
    done = subprocess.run(
        [python, "-c", _CHECK, str(big), str(canonical), str(repeats), str(common.ROOT)],
        check=True,
        capture_output=True,
        text=True,
    )
    out.update(json.loads(done.stdout))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", action="append", required=True, metavar="LABEL=PYTHON")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--write", action="store_true", help="write benchmarks/RESULTS.md")
    args = ap.parse_args(argv)
    builds = [b.split("=", 1) for b in args.build]
    with tempfile.TemporaryDirectory(prefix="urlsieve-install-") as tmp:
        work = Path(tmp)
        onecat = one_category(work / "generated", 200_000, 100_000)
        urls, _source = request_lines([onecat], LINES)
        lines = [f"{u} {SG_CLIENT}" for u in urls]
        texts = {}
        for n in (500_000, 1_000_000):
            texts[n] = work / f"rules-{n}.txt"
            with texts[n].open("w") as fh:
                for rule in patent_rules(n, lazy=True):
                    fh.write(f"{rule.pattern}\n")
        rules = patent_rules(1_000_000)
        raw = patent_requests(rules, 100_000) + common.traffic_urls()[0][:50_000]  # type: ignore[arg-type]
        del rules
        canonical_urls = []
        for u in raw:
            with contextlib.suppress(InvalidURL):
                canonical_urls.append(canonicalize(u))
        canonical = work / "canonical.txt"
        canonical.write_text("\n".join(canonical_urls), encoding="utf-8")
        sg_helper = sg_filter = float("nan")
        if SQUIDGUARD:
            sg = SquidGuard([onecat], work / "sg")
            sg.build()
            sg_helper = len(lines) / statistics.median(sg.run(urls)[1] for _ in range(args.repeats))
            sg_filter = sg_helper  # the same steady-state run serves both comparisons
        results = []
        for label, python in builds:
            print(f"measuring {label} ({python})", file=sys.stderr)
            place = work / f"build-{len(results)}"
            place.mkdir()
            load = Workload(onecat, lines, urls, texts, canonical, args.repeats)
            results.append((label, measure(python, place, load)))
    rows = [
        ["compiled engine (`urlsieve doctor`)", *[r["engine"] for _, r in results]],
        [
            "Squid helper vs squidGuard 1.6, steady state (1 category)",
            *[f"{r['helper'] / sg_helper:.2f}× ({r['helper']:,.0f} lines/s)" for _, r in results],
        ],
        [
            "`urlsieve filter` vs squidGuard",
            *[f"{r['filter'] / sg_filter:.2f}× ({r['filter']:,.0f} URLs/s)" for _, r in results],
        ],
        ["compile 500k rules", *[f"{r['compile_500000']:.1f} s" for _, r in results]],
        ["compile 1M rules", *[f"{r['compile_1000000']:.1f} s" for _, r in results]],
        [
            "`check_many`, 1M rules, canonical (`Filter(rules)`, as engine.py)",
            *[f"{r['check_us']:.2f} µs/URL" for _, r in results],
        ],
        [
            "`check_many`, 1M rules, canonical (`Filter.load` of the compiled file)",
            *[f"{r['check_loaded_us']:.2f} µs/URL" for _, r in results],
        ],
    ]
    header = ["", *[label for label, _ in results]]
    last = results[-1][1]
    goals = (
        f"Goals for the README's install ({results[-1][0]}): helper ≥ 3× squidGuard "
        f"({float(last['helper']) / sg_helper:.2f}×: "
        f"{verdict(float(last['helper']) / sg_helper >= 3)}), compile of 500k rules ≤ 3 s "
        f"({float(last['compile_500000']):.1f} s: {verdict(float(last['compile_500000']) <= 3)}), "
        f"check_many at 1M rules ≤ 0.6 µs a URL ({float(last['check_us']):.2f}: "
        f"{verdict(float(last['check_us']) <= 0.6)})."
    )
    where = "; ".join(f"{label}: `{r['file']}`" for label, r in results)
    body = (
        f"Machine: {machine()}. Command: `python benchmarks/install.py "
        + " ".join(f"--build '{label}=PYTHON'" for label, _ in results)
        + f" --repeats {args.repeats} --write`; medians of {args.repeats} runs, every build in "
        f"the same run on the same data (squidGuard: {sg_helper:,.0f} lines/s steady state on "
        f"{len(lines):,} request lines, one category of 200k domains and 100k URLs; "
        f"check_many: {len(canonical_urls):,} canonical URLs, half of the generated ones hits).\n\n"
        + table(header, rows)
        + "\n\n"
        + goals
        + f"\n\nWhere each build's urlsieve was imported from: {where}."
    )
    print(body)
    if args.write:
        write_section(
            "install", "## Every install is the fast install (`benchmarks/install.py`)\n\n" + body
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
