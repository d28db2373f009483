"""The self-learning gateway, measured (issue 11): time to enforcement, learner throughput,
and seed 001's Bloom pre-filter.

``enforce``
    A gateway (the Squid helper object, fed its request lines in-process, as Squid feeds
    them) in front of a loopback origin, with UT1 compiled as its base snapshot, ``unknown
    = "allow-first"``, an SQLite queue, and a real ``urlsieve learn run`` process. Unknown
    URLs arrive at ``--rate`` per second; the helper is asked for every pending URL every
    50 ms until its answer comes from a learned rule. The time from the first request to
    that answer is the enforcement latency. ``--scale 10`` repeats it with a base ten
    times UT1 (UT1 plus nine renamed copies of its domains).
``throughput``
    ``urlsieve learn`` (crawler + spool + classifier, the ukenglish lists and a Chinese
    lexicon, ~6k phrases) on N distinct pages from an aiohttp origin in another process:
    pages/s from a full queue to the last verdict.
``prefilter``
    Seed 001's pre-filter: the MD5 digest of every lookup expression of the black and white
    lists in a Bloom filter, asked before the full match so that most unknown URLs skip it.
    Lookups/s on real traffic with and without it.

    .venv/bin/python -m benchmarks.learn [--only enforce|throughput|prefilter] [--write]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import math
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks._common import SHARED_DATA, traffic_urls

ROOT = Path(__file__).resolve().parent.parent
PHRASES = ROOT / "tests" / "learn" / "data" / "phrases"
UT1 = SHARED_DATA / "ut1-blacklists"
CACHE = Path(tempfile.gettempdir()) / "urlsieve-bench-learn"

DIRTY = (
    "<h1>Best online casino</h1><p>Win the jackpot at our online casino! Poker, roulette and "
    "sports betting with a casino welcome bonus.</p>"
)
CLEAN = "<h1>Gardening</h1><p>Tomatoes need sun, water and patience; compost helps the soil.</p>"


# -- the origin (another process) -------------------------------------------------------


def serve(port_file: str, size: int) -> None:
    """Pages ``/d…`` carry gambling phrases, ``/c…`` do not; ``size`` bytes of filler."""
    import aiohttp.web

    sys.path.insert(0, str(ROOT))
    from benchmarks.classify import _page

    rng = random.Random(5)
    fillers = [_page(rng, size) for _ in range(16)]
    # Encoded once: the origin is not what is measured, and it shares the two cores.
    bodies = {
        kind: [f.replace("<body>", f"<body>{text}", 1).encode() for f in fillers]
        for kind, text in (("d", DIRTY), ("c", CLEAN))
    }

    async def page(request: aiohttp.web.Request) -> aiohttp.web.Response:
        path = request.path
        if path == "/robots.txt":
            return aiohttp.web.Response(text="User-agent: *\nDisallow: /private/\n")
        if path.startswith("/s/"):  # a page's subresources (pageload)
            kinds = {"png": "image/png", "css": "text/css", "js": "application/javascript"}
            ctype = kinds.get(path.rsplit(".", 1)[-1], "application/octet-stream")
            return aiohttp.web.Response(body=b"\x89PNG...." * 50, content_type=ctype)
        if path == "/" or path.startswith("/p-"):  # pageload: a clean page, no filler
            return aiohttp.web.Response(text=f"<html><body>{CLEAN}</body></html>",
                                        content_type="text/html")  # fmt: skip
        kind = "d" if path.startswith("/d") else "c"
        body = bodies[kind][hash(path) % len(fillers)]
        return aiohttp.web.Response(body=body, content_type="text/html", charset="utf-8")

    async def main() -> None:
        app = aiohttp.web.Application()
        app.router.add_get("/{tail:.*}", page)
        runner = aiohttp.web.AppRunner(app, access_log=None)
        await runner.setup()
        site = aiohttp.web.TCPSite(runner, "127.0.0.1", 0, backlog=1024)
        await site.start()
        Path(port_file).write_text(str(runner.addresses[0][1]))
        await asyncio.Event().wait()

    asyncio.run(main())


@contextlib.contextmanager
def origin(size: int) -> Iterator[int]:
    port_file = Path(tempfile.mkstemp(prefix="origin-port-")[1])
    port_file.unlink()
    proc = subprocess.Popen(
        [sys.executable, "-m", "benchmarks.learn", "--serve", str(port_file), "--size", str(size)],
        cwd=ROOT,
    )
    try:
        for _ in range(200):
            if port_file.exists() and port_file.read_text():
                break
            time.sleep(0.05)
        yield int(port_file.read_text())
    finally:
        proc.terminate()
        proc.wait()
        port_file.unlink(missing_ok=True)


# -- bases ------------------------------------------------------------------------------


def base_snapshot(scale: int) -> tuple[Path, int]:
    """UT1 compiled (``scale`` > 1: plus renamed copies of its domains), cached."""
    from urlsieve.filter import Filter

    CACHE.mkdir(exist_ok=True)
    snap = CACHE / f"ut1x{scale}.snap"
    if snap.exists():
        loaded = Filter.load(snap)
        return snap, len(loaded)
    lists = [UT1]
    if scale > 1:
        extra = CACHE / f"ut1x{scale}-extra" / "copies"
        extra.mkdir(parents=True, exist_ok=True)
        domains = [
            ln.strip()
            for p in sorted(UT1.glob("*/domains"))
            for ln in p.read_text("utf-8", "replace").splitlines()
            if ln.strip() and not ln.startswith("#")
        ]
        with open(extra / "domains", "w", encoding="utf-8") as fh:
            for copy in range(1, scale):
                for d in domains:
                    fh.write(f"c{copy}.{d}\n")
        lists.append(extra.parent)
    source = Filter.from_lists(lists)
    source.save(snap)
    return snap, len(source)


# -- enforce ----------------------------------------------------------------------------


#: The rows of ``enforce``: the README's example configuration (the defaults), and the
#: settings measured before (labelled: not what an administrator gets without tuning).
SETTINGS: dict[str, dict[str, float]] = {
    "defaults": {},  # change notice on, overlay stat every 1 s, spool segments 0.1 s
    "tuned": {"reload_check_seconds": 0.05},  # no change notice, stat every 0.05 s
    "previous": {"reload_check_seconds": 1.0, "segment_seconds": 0.5},  # no notice either
}


def _config(
    state: Path, snapshot: Path, port: int, hosts: int, tuned: dict[str, float] | None = None
) -> Path:
    """The README's example ``[learn]`` settings (defaults elsewhere), with what a loopback
    origin needs (private targets allowed, the bench's host names); ``tuned`` overrides."""
    tuned = tuned or {}
    names = {f"h{i}.bench": "127.0.0.1" for i in range(hosts)}
    squid = (
        f"reload_check_seconds = {tuned['reload_check_seconds']}\n"
        if "reload_check_seconds" in tuned
        else ""
    )
    spool = (
        f"[learn.spool]\nsegment_seconds = {tuned['segment_seconds']}\n"
        if "segment_seconds" in tuned
        else ""
    )
    config = state / "gateway.toml"
    config.write_text(
        f"""
[rules]
snapshot = "{snapshot}"

[squid]
mode = "redirect"
redirect_url = "http://block.lan/?url=%u&category=%c"
{squid}
[learn]
queue = "sqlite:{state / "queue.db"}"
unknown = "allow-first"
overlay = "{state / "learned.snap"}"
directory = "{state}"
phrases = ["{PHRASES / "weightedphraselist"}"]
limit = 50
promote_after = 3
unclassifiable = "block"

[learn.crawl]
allow_networks = ["127.0.0.0/8"]
hosts = {json.dumps(names).replace('":', '" =')}
{spool}""",
        encoding="utf-8",
    )
    return config


@contextlib.contextmanager
def gateway(config_path: Path, *, notify: bool = True) -> Iterator[tuple[Any, Any, Any]]:
    """The Squid helper object as ``urlsieve squid-helper`` builds it from the config
    (rules, change notice, unknown feed, burst cap), and a ``learn run`` process."""
    from urlsieve.config import (
        burst_gate,
        filter_loader,
        load_config,
        rules_notify,
        rules_watch,
        unknown_feed,
    )
    from urlsieve.gateway.live import LiveRules
    from urlsieve.gateway.squid import HelperSettings, SquidHelper

    config = load_config(str(config_path), env={})
    live = LiveRules(
        filter_loader(config),
        watch=rules_watch(config),
        check_seconds=config.reload_check_seconds,
        notify=rules_notify(config) if notify else (),
    )
    feed = unknown_feed(config, lambda m: None)
    helper = SquidHelper(
        live,
        HelperSettings(redirect_url=config.redirect_url),
        unknown=feed,
        burst=burst_gate(config, lambda m: None),
        pending=config.pending,
        pending_url=config.pending_url,
    )
    learner = subprocess.Popen(
        [sys.executable, "-m", "urlsieve", "learn", "--config", str(config_path), "run"],
        stderr=subprocess.DEVNULL,
    )
    try:
        # Started untimed: the learner has loaded its lists (and the base rules, for its
        # redirect check) once it has written its first overlay.
        overlay = Path(config.overlay or "")
        for _ in range(1200):
            if overlay.exists():
                break
            time.sleep(0.05)
        time.sleep(0.2)
        yield live, helper, feed
    finally:
        learner.terminate()
        learner.wait()
        if feed is not None:
            feed.close()


def enforce(scale: int, count: int, rate: float, label: str = "defaults") -> dict[str, Any]:
    from urlsieve.layered import OVERLAY_IDS

    tuned = SETTINGS[label]
    snapshot, rules = base_snapshot(scale)
    state = Path(tempfile.mkdtemp(prefix="urlsieve-enforce-"))
    hosts = 50
    with origin(2000) as port:
        config_path = _config(state, snapshot, port, hosts, tuned)
        with gateway(config_path, notify=label == "defaults") as (live, helper, _feed):
            urls = [
                f"http://h{i % hosts}.bench:{port}/{'d' if i % 2 else 'c'}{i}.html"
                for i in range(count)
            ]
            first: dict[str, float] = {}
            latency: dict[str, float] = {}
            started = time.monotonic()
            nxt = 0
            deadline = started + count / rate + 60
            while len(latency) < count and time.monotonic() < deadline:
                now = time.monotonic()
                while nxt < count and now - started >= nxt / rate:
                    first[urls[nxt]] = time.monotonic()
                    nxt += 1
                pending = [u for u in first if u not in latency]
                live.poll()
                rules_now = live.get()
                ids = rules_now.decide_ids(pending) if pending else []
                helper.handle_batch([f"{u} 10.0.0.1/- - GET".encode() for u in pending])
                for url, rule_id in zip(pending, ids, strict=True):
                    if isinstance(rule_id, int) and rule_id >= OVERLAY_IDS:
                        latency[url] = time.monotonic() - first[url]
                time.sleep(0.05)
    shutil.rmtree(state, ignore_errors=True)
    values = sorted(latency.values())
    missing = count - len(values)

    def pct(p: float) -> float:
        return values[min(len(values) - 1, math.ceil(p / 100 * len(values)) - 1)]

    return {
        "settings": label,
        "scale": scale,
        "base_rules": rules,
        "urls": count,
        "rate": rate,
        "decided": len(values),
        "missing": missing,
        "p50": pct(50),
        "p90": pct(90),
        "p99": pct(99),
        "max": values[-1],
        "latencies": values,
    }


# -- a new site's first page load -------------------------------------------------------


def pageload(subresources: int = 20, pending: str = "check", sites: int = 5) -> dict[str, Any]:
    """A browser loads a page of a site the gateway has never seen: the HTML, then
    ``subresources`` of its own domain (images, style sheets, scripts) asked together, as
    a browser asks them; ``sites`` new sites one after the other. Counted per site: how
    many requests pass on that first load, what answering them cost the gateway, and how
    long until every one has a learned verdict (asked every 0.1 s without counting as
    requests), with the verdicts (the first, and what each ends as 1 s later). The last
    site's page is dirty, the others' clean (no random filler), and so are the sites'
    root pages (``/``, which the learner queues for a site's first resource).
    ``pending = "pass"`` is the cap turned off."""
    from urlsieve.layered import OVERLAY_IDS

    snapshot, _rules = base_snapshot(1)
    state = Path(tempfile.mkdtemp(prefix="urlsieve-pageload-"))
    kinds = ("png", "css", "js", "png")
    passed: list[int] = []
    answer_ms: list[float] = []
    decided_s: list[float] = []
    outcomes: dict[str, int] = {}
    finals: dict[str, int] = {}
    with origin(2000) as port:
        config_path = _config(state, snapshot, port, sites)
        if pending != "check":
            text = config_path.read_text("utf-8")
            config_path.write_text(
                text.replace("unknown = ", f'pending = "{pending}"\nunknown = '),
                encoding="utf-8",
            )
        with gateway(config_path) as (live, helper, _feed):
            for site in range(sites):
                # The last site's page is dirty: its subresources must end blocked.
                page = "d-page" if site == sites - 1 and sites > 1 else "p-page"
                urls = [f"http://h{site}.bench:{port}/{page}.html"] + [
                    f"http://h{site}.bench:{port}/s/{n}.{kinds[n % 4]}" for n in range(subresources)
                ]
                lines = [f"{u} 10.0.0.1/- - GET".encode() for u in urls]
                started = time.perf_counter()
                first = helper.handle_batch(lines[:1]) + helper.handle_batch(lines[1:])
                answer_ms.append((time.perf_counter() - started) * 1000)
                passed.append(sum(reply.endswith("ERR\n") for reply in first))
                begun = time.monotonic()
                decided: dict[str, str] = {}
                while len(decided) < len(urls) and time.monotonic() - begun < 60:
                    live.poll()
                    rules = live.get()
                    for url, rule_id in zip(urls, rules.decide_ids(urls), strict=True):
                        if (
                            url not in decided
                            and isinstance(rule_id, int)
                            and rule_id >= OVERLAY_IDS
                        ):
                            action, category, _src, _line = rules.provenance(rule_id)
                            kind = "page" if url.endswith(".html") else "subresource"
                            decided[url] = f"{kind}: {action} {category}"
                    time.sleep(0.1)
                decided_s.append(time.monotonic() - begun)
                for outcome in decided.values():
                    outcomes[outcome] = outcomes.get(outcome, 0) + 1
                # A subresource's verdict follows its site's pages (issue 30): it may be
                # decided before the page, and flip when the page is learned dirty (the
                # site's root page, queued by the learner, too). What it ends as, 1 s on:
                time.sleep(1.0)
                live.poll()
                rules = live.get()
                for url, rule_id in zip(urls, rules.decide_ids(urls), strict=True):
                    kind = "page" if url.endswith(".html") else "subresource"
                    kind = f"{'dirty' if page == 'd-page' else 'clean'} site's {kind}"
                    if isinstance(rule_id, int) and rule_id >= OVERLAY_IDS:
                        action, category, _src, _line = rules.provenance(rule_id)
                        final = f"{kind}: {action} {category}"
                    else:
                        final = f"{kind}: undecided"
                    finals[final] = finals.get(final, 0) + 1
    shutil.rmtree(state, ignore_errors=True)
    return {
        "pending": pending,
        "sites": sites,
        "requests_per_site": subresources + 1,
        "passed_first_load": passed,
        "first_load_answer_ms_median": statistics.median(answer_ms),
        "first_load_answer_ms": answer_ms,
        "all_decided_s_median": statistics.median(decided_s),
        "verdicts": outcomes,
        "verdicts_final": finals,
    }


# -- throughput -------------------------------------------------------------------------


def throughput(pages: int, size: int, processes: int = 1) -> dict[str, float]:
    """``processes`` 1: one ``Learner`` runs both loops; 2: the crawl loop here and a
    ``urlsieve learn run --classify-only`` process on the same spool (seed 001's split)."""
    from benchmarks.classify import _lists
    from urlsieve.learn.classify import Classifier
    from urlsieve.learn.crawl import CrawlSettings
    from urlsieve.learn.phrases import PhraseSet
    from urlsieve.learn.queue import Sighting, open_queue
    from urlsieve.learn.runner import Learner
    from urlsieve.learn.verdicts import VerdictStore

    state = Path(tempfile.mkdtemp(prefix="urlsieve-throughput-"))
    lists = _lists(state)
    phrases = PhraseSet.load(
        weighted=lists["weighted"],  # type: ignore[arg-type]
        banned=lists["banned"],  # type: ignore[arg-type]
        exception=lists["exception"],  # type: ignore[arg-type]
        lexicons=lists["lexicons"],  # type: ignore[arg-type]
    )
    classifier = Classifier(phrases)
    hosts = 50
    names = {f"h{i}.bench": "127.0.0.1" for i in range(hosts)}
    with origin(size) as port:
        queue = open_queue(f"sqlite:{state / 'queue.db'}")
        urls = [
            f"http://h{i % hosts}.bench:{port}/{'d' if i % 2 else 'c'}{i}.html"
            for i in range(pages)
        ]
        now = time.time()
        queue.offer([Sighting(u, None, now) for u in urls])
        store = VerdictStore(state / "verdicts.db")
        learner = Learner(
            queue=queue,
            store=store,
            classifier=classifier,
            spool_dir=state / "spool",
            tree=state / "learned",
            overlay=state / "learned.snap",
            crawl=CrawlSettings(allow_networks=("127.0.0.0/8",), hosts=names, per_host=8),
            batch=128,
            promote_after=0,
            segment_seconds=0.5,
        )
        classifier_proc = None
        if processes == 2:  # started (lists loaded: it writes the empty overlay) untimed
            learner.classifier = None
            classifier_proc = subprocess.Popen(
                [sys.executable, "-m", "urlsieve", "learn", "--config",
                 str(_throughput_config(state, lists)), "run", "--classify-only"],
                stderr=subprocess.DEVNULL,
            )  # fmt: skip
            while not (state / "learned.snap").exists():
                time.sleep(0.02)
        started = time.perf_counter()
        try:
            if classifier_proc is None:
                stats = asyncio.run(learner.run(until_idle=True))
                classified = sum(stats.classified.values())
            else:
                asyncio.run(learner.run(classify=False, until_idle=True))
                while (classified := store.count()) < pages and time.perf_counter() - started < 600:
                    time.sleep(0.02)
                stats = learner.stats
        finally:
            if classifier_proc is not None:
                classifier_proc.terminate()
                classifier_proc.wait()
        elapsed = time.perf_counter() - started
        queue.close()
        store.close()
    shutil.rmtree(state, ignore_errors=True)
    return {
        "processes": processes,
        "pages": pages,
        "size": size,
        "phrases": len(phrases.phrases),
        "classified": classified,
        "seconds": elapsed,
        "pages_per_s": classified / elapsed,
        "mb_per_s": classified * size / elapsed / 1e6,
        "overlay_builds": stats.overlay_builds,
    }


def _throughput_config(state: Path, lists: dict[str, Any]) -> Path:
    def paths(key: str) -> str:
        return json.dumps([str(p) for p in lists[key]])

    lexicon, category, weight = lists["lexicons"][0]
    config = state / "learn.toml"
    config.write_text(
        f"""
[learn]
queue = "sqlite:{state / "queue.db"}"
overlay = "{state / "learned.snap"}"
directory = "{state}"
phrases = {paths("weighted")}
banned = {paths("banned")}
exceptions = {paths("exception")}
lexicons = [{{ path = "{lexicon}", category = "{category}", weight = {weight} }}]
promote_after = 0
""",
        encoding="utf-8",
    )
    return config


# -- overlay build against learned size ------------------------------------------------


def overlay_builds(sizes: tuple[int, ...] = (1_000, 10_000, 30_000)) -> dict[str, float]:
    """Seconds to render and compile the overlay from N stored verdicts (a third allow)."""
    from urlsieve.learn.overlay import build_overlay
    from urlsieve.learn.verdicts import Learned, VerdictStore, rule_key

    out: dict[str, float] = {}
    for size in sizes:
        state = Path(tempfile.mkdtemp(prefix="urlsieve-overlay-"))
        store = VerdictStore(state / "verdicts.db")
        verdicts = []
        for i in range(size):
            key, host = rule_key(f"http://h{i % 3000}.test/p{i}.html?q={i}")
            verdicts.append(
                Learned(key=key, host=host, action="block" if i % 3 else "allow",
                        category="gambling", source="learned", score=80,
                        evidence=(("<online casino>", 40, 2),), url=f"http://h{i}.test/",
                        fetched_at=1.7e9, content_hash="ab" * 32)
            )  # fmt: skip
        store.put(verdicts)
        runs = []
        for _ in range(3):
            built = build_overlay(store, state / "learned", state / "learned.snap")
            runs.append(built.seconds)
        out[str(size)] = statistics.median(runs)
        store.close()
        shutil.rmtree(state, ignore_errors=True)
    return out


# -- prefilter --------------------------------------------------------------------------


class SeedPrefilter:
    """Seed 001's pre-filter: MD5 digests of the lists' lookup keys in a Bloom filter
    (k = 7 bits from the 128-bit digest); a URL none of whose lookup expressions is in the
    filter is unknown without a full match."""

    def __init__(self, keys: list[str], error: float = 0.01) -> None:
        n = max(1, len(keys))
        self.m = int(-n * math.log(error) / math.log(2) ** 2) | 1
        self.k = 7
        self.bits = np.zeros((self.m + 7) // 8, dtype=np.uint8)
        for key in keys:
            for bit in self._bits(key):
                self.bits[bit >> 3] |= 1 << (bit & 7)

    def _bits(self, key: str) -> list[int]:
        digest = hashlib.md5(key.encode("utf-8", "surrogatepass")).digest()
        h1 = int.from_bytes(digest[:8], "little")
        h2 = int.from_bytes(digest[8:], "little") | 1
        return [(h1 + i * h2) % self.m for i in range(self.k)]

    def maybe(self, key: str) -> bool:
        bits = self.bits
        return all(bits[b >> 3] & (1 << (b & 7)) for b in self._bits(key))


def prefilter() -> dict[str, float]:
    from urlsieve.filter import Filter
    from urlsieve.url import lookup_expressions

    snapshot, _ = base_snapshot(1)
    rules = Filter.load(snapshot)
    keys = [r.location for r in rules.rules]
    traffic, where = traffic_urls()
    traffic = traffic[:50_000]
    started = time.perf_counter()
    pre = SeedPrefilter(keys)
    build = time.perf_counter() - started

    def plain() -> int:
        return sum(1 for r in rules.decide_ids(traffic) if r == -1)

    def with_prefilter() -> int:
        maybe = []
        unknown = 0
        for url in traffic:
            try:
                probes = lookup_expressions(url)
            except Exception:
                maybe.append(url)
                continue
            if any(pre.maybe(p) for p in probes):
                maybe.append(url)
            else:
                unknown += 1
        return unknown + sum(1 for r in rules.decide_ids(maybe) if r == -1)

    timings = {}
    for name, fn in (("plain", plain), ("prefilter", with_prefilter)):
        runs = []
        for _ in range(3):
            t = time.perf_counter()
            found = fn()
            runs.append(time.perf_counter() - t)
        timings[name] = (statistics.median(runs), found)
    return {
        "traffic": len(traffic),
        "traffic_source": where,  # type: ignore[dict-item]
        "keys": len(keys),
        "bloom_mb": pre.bits.nbytes / 1e6,
        "build_s": build,
        "unknown": timings["plain"][1],
        # URLs the pre-filter calls unknown that a rule decides (probe spellings differ).
        "unknown_with_prefilter": timings["prefilter"][1],
        "plain_per_s": len(traffic) / timings["plain"][0],
        "prefilter_per_s": len(traffic) / timings["prefilter"][0],
    }


def plot(figures: dict[str, Any], png: Path) -> None:
    """The enforcement latency's distribution, one curve per base size."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for key, result in sorted(figures.items()):
        if not key.startswith("enforce_x"):
            continue
        values = sorted(result["latencies"])
        share = [(i + 1) / len(values) for i in range(len(values))]
        label = (
            f"{result.get('settings', 'defaults')}, base {result['base_rules'] / 1e6:.1f}M rules "
            f"(p50 {result['p50']:.2f} s)"
        )
        ax.step(values, share, where="post", label=label)
    ax.axvline(0.5, color="grey", linestyle="--", linewidth=0.8)
    ax.text(0.5, 0.9, " goal: p50 ≤ 0.5 s", color="grey")
    ax.set_xlabel("seconds from the first request to the learned verdict at the gateway")
    ax.set_ylabel("share of unknown URLs")
    ax.set_xlim(0, 2.5)
    ax.legend(loc="center right")
    ax.set_title("Time to enforcement (allow-first, loopback origin)")
    fig.tight_layout()
    fig.savefig(png, dpi=110)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--serve", help=argparse.SUPPRESS)
    parser.add_argument("--size", type=int, default=20_000, help="bytes of HTML per page")
    parser.add_argument(
        "--only", choices=["enforce", "throughput", "prefilter", "overlay", "pageload"]
    )
    parser.add_argument(
        "--settings", default=",".join(SETTINGS), help="enforce rows (labels of SETTINGS)"
    )
    parser.add_argument("--scales", default="1,10", help="base sizes for enforce (× UT1)")
    parser.add_argument("--count", type=int, default=300, help="unknown URLs for enforce")
    parser.add_argument("--rate", type=float, default=20.0, help="new unknown URLs per second")
    parser.add_argument("--pages", type=int, default=3000, help="pages for throughput")
    parser.add_argument("--repeats", type=int, default=5, help="throughput runs per mode")
    parser.add_argument("--json", help="write the figures here")
    parser.add_argument("--plot", metavar="JSON", help="only plot the enforce curves of JSON")
    args = parser.parse_args(argv)
    if args.serve:
        serve(args.serve, args.size)
        return 0
    if args.plot:
        plot(json.loads(Path(args.plot).read_text()), ROOT / "benchmarks" / "learn-enforcement.png")
        return 0
    out: dict[str, object] = {}
    result: dict[str, Any]
    if args.only in (None, "prefilter"):
        out["prefilter"] = result = prefilter()
        print("prefilter", json.dumps(result), flush=True)
    if args.only in (None, "overlay"):
        out["overlay"] = result = overlay_builds()
        print("overlay", json.dumps(result), flush=True)
    if args.only in (None, "throughput"):
        for processes in (1, 2):
            runs = [throughput(args.pages, args.size, processes) for _ in range(args.repeats)]
            rates = sorted(r["pages_per_s"] for r in runs)
            result = {
                **runs[0],
                "runs": rates,
                "pages_per_s": statistics.median(rates),
                "mb_per_s": statistics.median(rates) * args.size / 1e6,
            }
            out[f"throughput_{processes}p"] = result
            print("throughput", json.dumps(result), flush=True)
    if args.only in (None, "pageload"):
        for pending in ("check", "pass"):
            out[f"pageload_{pending}"] = loaded = pageload(pending=pending)
            print("pageload", json.dumps(loaded), flush=True)
    if args.only in (None, "enforce"):
        for scale in (int(s) for s in args.scales.split(",")):
            for label in args.settings.split(","):
                if scale > 1 and label != "defaults":
                    continue
                enforced = enforce(scale, args.count, args.rate, label)
                out[f"enforce_x{scale}_{label}"] = enforced
                shown = {k: v for k, v in enforced.items() if k != "latencies"}
                print(f"enforce x{scale}", json.dumps(shown), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
