"""Shared helpers of the benchmarks: data loading, timing, memory, writing RESULTS.md."""

from __future__ import annotations

import csv
import gc
import os
import platform
import random
import re
import statistics
import string
import subprocess
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: ../shared/data beside the checkout; URLSIEVE_SHARED_DATA overrides (e.g. from a worktree).
SHARED_DATA = Path(os.environ.get("URLSIEVE_SHARED_DATA", ROOT.parent / "shared" / "data"))
RESULTS = ROOT / "benchmarks" / "RESULTS.md"


def traffic_urls() -> tuple[list[str], str]:
    """Real request URLs from ../shared/data/traffic when present; generated ones otherwise."""
    kasztp = SHARED_DATA / "traffic" / "kasztp.txt"
    phish = SHARED_DATA / "traffic" / "malicious_phish_first41980.csv"
    if kasztp.exists() and phish.exists():
        urls = [ln.strip().lstrip("\ufeff") for ln in kasztp.read_text("utf-8").splitlines()]
        with phish.open(encoding="utf-8", newline="") as fh:
            rows = csv.reader(fh)
            next(rows)
            # ~30 URLs contain unquoted commas: the label is the last field.
            urls += [",".join(row[:-1]) for row in rows if len(row) >= 2]
        return [u for u in urls if u], "../shared/data/traffic (kasztp + malicious_phish)"
    return generated_urls(90_000), "generated (../shared/data absent)"


def generated_urls(n: int, seed: int = 1) -> list[str]:
    rnd = random.Random(seed)
    words = ["".join(rnd.choices(string.ascii_lowercase, k=rnd.randint(3, 9))) for _ in range(5000)]
    tlds = ["com", "org", "net", "de", "co.uk", "io", "fr"]
    out = []
    for _ in range(n):
        host = ".".join(rnd.choices(words, k=rnd.randint(1, 3))) + "." + rnd.choice(tlds)
        path = "/".join(rnd.choices(words, k=rnd.randint(0, 4)))
        url = f"{rnd.choice(['http', 'https'])}://{host}/{path}"
        if rnd.random() < 0.3:
            url += f"?{rnd.choice(words)}={rnd.randint(0, 999)}&q={rnd.choice(words)}%20x"
        out.append(url)
    return out


def median_seconds(fn: Callable[[], object], repeats: int = 5) -> float:
    """Median wall time of ``fn()`` over ``repeats`` runs (garbage collector off while timing)."""
    times = []
    for _ in range(repeats):
        gc.collect()
        gc.disable()
        try:
            start = time.perf_counter()
            fn()
            times.append(time.perf_counter() - start)
        finally:
            gc.enable()
    return statistics.median(times)


def rss_bytes(pid: int | None = None) -> int:
    """Resident set size of a process (this one by default), from /proc."""
    status = Path(f"/proc/{pid or os.getpid()}/status").read_text()
    match = re.search(r"VmRSS:\s+(\d+) kB", status)
    return int(match.group(1)) * 1024 if match else 0


def exchange(
    proc: subprocess.Popen[bytes], warmup: str, lines: Sequence[str]
) -> tuple[list[bytes], float]:
    """Time a line-protocol child (a redirector or Squid helper) answering ``lines``.

    One ``warmup`` line is answered first (the child opens its rules), then the
    lines are written from a thread while one reply per line is read; the
    seconds run from the first line written to the last reply read.
    """
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(f"{warmup}\n".encode())
    proc.stdin.flush()
    proc.stdout.readline()
    payload = "".join(f"{line}\n" for line in lines).encode()

    def feed() -> None:
        assert proc.stdin is not None
        proc.stdin.write(payload)
        proc.stdin.flush()

    start = time.perf_counter()
    writer = threading.Thread(target=feed)
    writer.start()
    out = [proc.stdout.readline() for _ in lines]
    seconds = time.perf_counter() - start
    writer.join()
    return out, seconds


#: The 1-minute load average when the benchmark started (before its own work counts).
LOAD_AT_START = os.getloadavg()[0]


def load_note() -> str:
    """What the machine's load was, measured: whether other work shared the cores."""
    if LOAD_AT_START < 1.5:
        return f"the machine to itself (1-minute load {LOAD_AT_START:.1f} at the start)"
    return (
        f"a shared machine (1-minute load {LOAD_AT_START:.1f} at the start, other work "
        "running): absolute figures move between runs, the ratios of one run less"
    )


def machine() -> str:
    """The machine and the build of urlsieve a table ran on (every table names both)."""
    python = f"{platform.python_implementation()} {platform.python_version()}"
    return f"{python}, {os.cpu_count()} cores; build: {build()}"


def build() -> str:
    """Which urlsieve the run imported: the commit, how it was installed, its engine."""
    import urlsieve
    from urlsieve._accel import report

    where = Path(urlsieve.__file__).resolve().parent
    installed = "site-packages" in where.parts
    if installed:  # the commit it was built from is not in the package: the runner says it
        commit = os.environ.get("URLSIEVE_BUILD_COMMIT", "an unnamed commit")
        how = f"installed (`pip install .` or a wheel) from {commit}"
    else:
        try:
            commit = subprocess.run(
                ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                capture_output=True,
                text=True,
                check=True,
            ).stdout.strip()
        except (OSError, subprocess.CalledProcessError):
            commit = "an unknown commit"
        how = f"editable, from the work tree at {commit}"
    engine = report().summary()
    return f"urlsieve {urlsieve.__version__}, {how}, {engine}"


def table(header: Iterable[str], rows: Iterable[Iterable[object]]) -> str:
    header = list(header)
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def verdict(met: bool) -> str:
    """How a goal line in RESULTS.md ends: ``met``, or a bold ``missed`` that stands out."""
    return "met" if met else "**missed**"


def write_section(name: str, body: str) -> None:
    """Replace the ``<!-- name:start -->`` … ``<!-- name:end -->`` section of RESULTS.md."""
    start, end = f"<!-- {name}:start -->", f"<!-- {name}:end -->"
    text = RESULTS.read_text("utf-8") if RESULTS.exists() else "# Benchmark results\n"
    block = f"{start}\n{body.strip()}\n{end}"
    if start in text and end in text:
        text = text[: text.index(start)] + block + text[text.index(end) + len(end) :]
    else:
        text = text.rstrip() + "\n\n" + block + "\n"
    RESULTS.write_text(text, "utf-8")
