"""The console and the block pages under load (issue 33).

``urlsieve serve`` (one uvicorn worker) with the console on and the decision stream on,
a snapshot of generated rules. Measured, idle and while wrk drives ``GET /v1/check`` at
the lookup service's benchmark setting (``wrk -t2 -c16``, as ``benchmarks/gateway.py``):

* console page loads, logged in: the live view (``/console/``) and explain
  (``/console/explain?url=``), whole response, p50/p99;
* the block page's time to first byte (``GET /block?url=``: request sent to status line
  and headers received);
* the decision stream's lag from a real ``urlsieve squid-helper`` process to the console:
  marker request lines are written to the helper's stdin, and a poller reads the
  console's ``/console/events`` every 50 ms; the lag of a marker is the time from writing
  its line to the poller seeing it (the poll interval included: an upper bound).

* override to enforcement: the console's override POST, then a real helper's answer.

Run: ``python benchmarks/console.py [--seconds 15] [--requests 300] [--write]``.
"""

from __future__ import annotations

import argparse
import http.client
import json
import random
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from urllib.parse import quote

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._common import generated_urls, load_note, machine, table, verdict, write_section
from benchmarks.gateway import WRK, _wrk
from urlsieve import Filter
from urlsieve.console.auth import hash_password

PASSWORD = "benchmark password 0123"
TOKEN = "benchmark-token-0123456789"
CATEGORIES = ("ads", "adult", "gambling", "malware", "social")


def setup(workdir: Path, rules: int) -> tuple[Path, list[str], list[str]]:
    rnd = random.Random(7)
    urls = generated_urls(rules * 2, seed=5)
    hosts = [u.split("/")[2] for u in urls]
    blocked, clean = hosts[:rules], hosts[rules:]
    for k, name in enumerate(CATEGORIES):
        d = workdir / "lists" / name
        d.mkdir(parents=True)
        (d / "domains").write_text("\n".join(blocked[k :: len(CATEGORIES)]) + "\n", "utf-8")
    Filter.from_lists([workdir / "lists"]).save(workdir / "rules.snap")
    conf = workdir / "urlsieve.toml"
    conf.write_text(
        f"""
[rules]
snapshot = "rules.snap"
[squid]
mode = "redirect"
redirect_url = "http://127.0.0.1/block?url=%u"
reload_check_seconds = 1.0
[service]
token = "{TOKEN}"
[console]
decision_log = "decisions.jsonl"
password_hash = "{hash_password(PASSWORD)}"
[learn]
queue = "sqlite:state/queue.db"
overlay = "state/learned.snap"
unknown = "allow"
directory = "state"
promote_after = 0
""",
        encoding="utf-8",
    )
    sample = [f"http://{h}/page?q={rnd.randint(0, 999)}" for h in rnd.sample(blocked, 500)]
    sample += [f"http://{h}/x" for h in rnd.sample(clean, 500)]
    return conf, sample, blocked


class Browser:
    """A logged-in console client on one keep-alive connection."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        self.cookies: dict[str, str] = {}

    def request(
        self, method: str, path: str, body: str | None = None
    ) -> tuple[int, bytes, float, float]:
        """(status, body, seconds to headers, seconds to the whole body)."""
        headers = {"cookie": "; ".join(f"{k}={v}" for k, v in self.cookies.items())}
        if body is not None:
            headers["content-type"] = "application/x-www-form-urlencoded"
        started = time.perf_counter()
        self.conn.request(method, path, body=body, headers=headers)
        resp = self.conn.getresponse()
        first = time.perf_counter() - started
        data = resp.read()
        whole = time.perf_counter() - started
        for value in resp.headers.get_all("set-cookie") or []:
            name, _, rest = value.partition("=")
            self.cookies[name] = rest.split(";", 1)[0]
        return resp.status, data, first, whole

    def login(self) -> None:
        _s, page, _f, _w = self.request("GET", "/console/login")
        csrf = re.search(rb'name="csrf" value="([^"]+)"', page)
        assert csrf is not None
        body = f"csrf={csrf.group(1).decode()}&password={quote(PASSWORD)}"
        status, _b, _f, _w = self.request("POST", "/console/login", body)
        assert status == 303, status


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))]


def page_loads(port: int, sample: list[str], n: int) -> dict[str, list[float]]:
    browser = Browser(port)
    browser.login()
    out: dict[str, list[float]] = {"live": [], "explain": [], "block_ttfb": []}
    rnd = random.Random(11)
    for k in range(n):
        status, _b, _f, whole = browser.request("GET", "/console/")
        assert status == 200, status
        out["live"].append(whole)
        url = quote(rnd.choice(sample), safe="")
        status, _b, _f, whole = browser.request("GET", f"/console/explain?url={url}")
        assert status == 200, status
        out["explain"].append(whole)
        status, _b, first, _w = browser.request(
            "GET", f"/block?url={quote(sample[k % 500], safe='')}"
        )
        assert status == 200, status
        out["block_ttfb"].append(first)
    return out


def stream_lag(
    conf: Path, port: int, blocked: list[str], seconds: float, rate: int
) -> tuple[list[float], int]:
    """Lags (s) of marker lines from a real helper to the console's events API."""
    helper = subprocess.Popen(
        [sys.executable, "-m", "urlsieve", "squid-helper", "--config", str(conf)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    assert helper.stdin is not None and helper.stdout is not None
    # Ready: the rules are loaded once it answers a probe; its answers are then drained.
    helper.stdin.write(b"http://probe.test/ 10.0.0.1/- - GET\n")
    helper.stdin.flush()
    helper.stdout.readline()
    out = helper.stdout
    threading.Thread(target=lambda: all(iter(out.readline, b"")), daemon=True).start()
    browser = Browser(port)
    browser.login()
    sent: dict[str, float] = {}
    arrived: dict[str, float] = {}
    stop = threading.Event()

    def poll() -> None:
        after = 0
        while not stop.is_set():
            _s, body, _f, _w = browser.request(
                "GET", f"/console/events?after={after}&client=10.7.7.7"
            )
            now = time.perf_counter()
            data = json.loads(body)
            after = data["after"]
            for e in data["events"]:
                arrived.setdefault(e["url"], now)
            time.sleep(0.05)

    poller = threading.Thread(target=poll, daemon=True)
    poller.start()
    k = 0
    batch = max(1, rate // 100)
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        lines = []
        for _ in range(batch):
            url = f"http://{blocked[k % len(blocked)]}/m{k}"
            lines.append(f"{url} 10.7.7.7/- - GET\n")
            sent[url] = time.perf_counter()
            k += 1
        helper.stdin.write("".join(lines).encode())
        helper.stdin.flush()
        time.sleep(0.01)
    time.sleep(2.0)
    stop.set()
    poller.join(5)
    helper.stdin.close()
    helper.wait(30)
    lags = [arrived[u] - t for u, t in sent.items() if u in arrived]
    return lags, len(sent) - len(lags)


def enforce_times(conf: Path, port: int, n: int) -> tuple[list[float], list[float]]:
    """Seconds from the console's override POST to its answer (the service enforces before
    it answers), and to a real ``urlsieve squid-helper`` (default reload check, 1 s)
    answering the URL blocked."""
    helper = subprocess.Popen(
        [sys.executable, "-m", "urlsieve", "squid-helper", "--config", str(conf)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    assert helper.stdin is not None and helper.stdout is not None
    browser = Browser(port)
    browser.login()
    answered: list[float] = []
    enforced: list[float] = []

    def ask(url: str) -> bytes:
        assert helper.stdin is not None and helper.stdout is not None
        helper.stdin.write(f"{url} 10.0.0.1/- - GET\n".encode())
        helper.stdin.flush()
        return helper.stdout.readline()

    ask("http://probe.test/")  # the helper is ready
    for k in range(n):
        url = f"http://override-{k}-{time.monotonic_ns()}.test/"
        assert ask(url).startswith(b"ERR")
        _s, page, _f, _w = browser.request("GET", "/console/review")
        csrf = re.search(rb'name="csrf" value="([^"]+)"', page)
        assert csrf is not None
        body = f"csrf={csrf.group(1).decode()}&do=override&was=allow&url={quote(url, safe='')}"
        started = time.perf_counter()
        status, _b, _f, whole = browser.request("POST", "/console/review", body)
        assert status == 303, status
        answered.append(whole)
        while not ask(url).startswith(b"OK"):
            time.sleep(0.005)
        enforced.append(time.perf_counter() - started)
        time.sleep(random.Random(k).uniform(0, 1))  # not in step with the reload check
    helper.stdin.close()
    helper.wait(30)
    return answered, enforced


def _alone(workdir: Path, conf: Path, script: Path, seconds: int) -> float:
    """The check API's requests/s with the decision stream off (a second service)."""
    off = workdir / "off.toml"
    off.write_text(
        re.sub(r'decision_log = "[^"]*"\n', "", conf.read_text("utf-8")), encoding="utf-8"
    )
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = _serve(off, port)
    try:
        return _wrk(f"http://127.0.0.1:{port}", script, seconds)[0]
    finally:
        server.terminate()
        server.wait(30)


def _serve(conf: Path, port: int) -> subprocess.Popen[bytes]:
    argv = [sys.executable, "-m", "urlsieve", "serve", "--config", str(conf)]
    server = subprocess.Popen(
        [*argv, "--bind", f"127.0.0.1:{port}"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    for _ in range(600):
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as resp:
                if resp.status == 200:
                    return server
        except OSError:
            time.sleep(0.05)
    raise RuntimeError("urlsieve serve did not start")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=int, default=15, help="wrk run per measurement")
    parser.add_argument("--requests", type=int, default=300, help="page loads per kind")
    parser.add_argument("--rules", type=int, default=50_000)
    parser.add_argument("--lag-rate", type=int, default=1000, help="helper lines/s")
    parser.add_argument("--repeats", type=int, default=3, help="stream off/on wrk rounds")
    parser.add_argument("--overrides", type=int, default=20, help="override→helper timings")
    parser.add_argument("--write", action="store_true", help="write RESULTS.md")
    args = parser.parse_args()
    if WRK is None:
        raise SystemExit("wrk is not installed (apt-get install wrk)")
    workdir = Path(tempfile.mkdtemp(prefix="urlsieve-console-bench-"))
    conf, sample, blocked = setup(workdir, args.rules)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = _serve(conf, port)
    base = f"http://127.0.0.1:{port}"
    try:
        single = workdir / "single.lua"
        encoded = ",".join(json.dumps("/v1/check?url=" + quote(u, safe="")) for u in sample)
        single.write_text(
            f"local paths = {{{encoded}}}\nlocal i = 0\n"
            "request = function()\n  i = i % #paths + 1\n"
            '  return wrk.format("GET", paths[i])\nend\n'
        )
        # The stream's cost to the check API: off and on, alternated, medians.
        rounds = [
            (_alone(workdir, conf, single, args.seconds), _wrk(base, single, args.seconds)[0])
            for _ in range(args.repeats)
        ]
        alone = (
            statistics.median(r[0] for r in rounds),
            statistics.median(r[1] for r in rounds),
        )
        idle = page_loads(port, sample, args.requests)
        answered, enforced = enforce_times(conf, port, args.overrides)
        idle_lags, idle_lost = stream_lag(conf, port, blocked, 5, args.lag_rate)

        loaded: dict[str, list[float]] = {}
        wrk_result: list[tuple[float, float, float]] = []

        def load() -> None:
            wrk_result.append(_wrk(base, single, args.seconds))

        for what in ("pages", "lag"):
            runner = threading.Thread(target=load)
            runner.start()
            time.sleep(1.0)
            if what == "pages":
                loaded = page_loads(port, sample, args.requests)
            else:
                busy_lags, busy_lost = stream_lag(
                    conf, port, blocked, max(3, args.seconds - 6), args.lag_rate
                )
            runner.join()
    finally:
        server.terminate()
        server.wait(30)

    def ms(values: list[float], p: float) -> str:
        return f"{pct(values, p) * 1000:.1f}"

    labels = {
        "live": "live view `/console/`",
        "explain": "explain `/console/explain?url=`",
        "block_ttfb": "block page `/block?url=`, time to first byte",
    }
    rows = [
        [label, ms(idle[key], 50), ms(idle[key], 99), ms(loaded[key], 50), ms(loaded[key], 99)]
        for key, label in labels.items()
    ]
    rps = statistics.median(r[0] for r in wrk_result)
    lag_rows = [
        [run, f"{len(lags):,}", lost, ms(lags, 50), ms(lags, 99), f"{max(lags) * 1000:.0f}"]
        for run, lags, lost in (
            ("idle", idle_lags, idle_lost),
            (f"check API under wrk ({rps:,.0f} req/s)", busy_lags, busy_lost),
        )
    ]
    worst = max(pct(idle_lags, 99), pct(busy_lags, 99))
    pages = table(
        ["page", "idle p50 ms", "idle p99 ms", "under load p50 ms", "under load p99 ms"], rows
    )
    lag = table(["run", "markers seen", "not seen", "p50 ms", "p99 ms", "max ms"], lag_rows)
    body = "\n\n".join(
        [
            "## The console and the block pages under load (`benchmarks/console.py`, issue 33)",
            f"Command: `python benchmarks/console.py --seconds {args.seconds} "
            f"--requests {args.requests} --repeats {args.repeats} --write`  \n"
            f"Machine: {machine()}; {load_note()}.",
            f"`urlsieve serve` (1 uvicorn worker) with the console and the decision stream on, "
            f"{args.rules:,} generated rules in 5 categories. Under load: `wrk -t2 -c16` on "
            "`GET /v1/check?url=` (the lookup service's benchmark setting; 1,000 URLs, half "
            f"blocked) at the same time on the same 2 cores; the check API ran at a median "
            f"{rps:,.0f} requests/s meanwhile, every check also written to the decision stream "
            f"(the check API alone, wrk only, medians of {args.repeats} alternated runs: "
            f"{alone[0]:,.0f} requests/s with the stream off, {alone[1]:,.0f} with it on, "
            f"{alone[1] / alone[0]:.2f}×). {args.requests} loads of each page by one logged-in "
            "client on a keep-alive connection, between the wrk requests.",
            pages,
            f"Decision stream, helper to console: a real `urlsieve squid-helper` process answers "
            f"{args.lag_rate:,} lines/s of marker URLs; a client polls `/console/events` every "
            "50 ms. Lag: the line written to the helper's stdin → the console's API returns it "
            "(the helper answers, its writer thread appends to the file, the console reads the "
            "file every 100 ms; the poll interval is included: upper bounds).",
            lag,
            f"Lag p99 {worst * 1000:.0f} ms (goal ≤ 1 s: {verdict(worst <= 1.0)}).",
            f"Override in the console to enforcement ({args.overrides} overrides of a new URL "
            "to block, idle, at random phases of the reload check): the console's POST is "
            f"answered after the service enforces it in p50 {ms(answered, 50)} ms, p99 "
            f"{ms(answered, 99)} ms; a real `urlsieve squid-helper` (its default "
            f"`reload_check_seconds = 1.0`) answers the URL blocked after p50 "
            f"{ms(enforced, 50)} ms, p99 {ms(enforced, 99)} ms, max "
            f"{max(enforced) * 1000:.0f} ms (goal: within a second: "
            f"{verdict(max(enforced) <= 1.0)}; the bound is the helpers' reload check).",
        ]
    )
    print(body)
    if args.write:
        write_section("console", body)


if __name__ == "__main__":
    main()
