"""Seen stores: urlsieve's backends against the sets and Bloom filters a crawler would use instead.

Run: ``python benchmarks/seen.py [--urls 1000000] [--write]`` (peers from the ``bench`` extra:
rbloom, pybloomfiltermmap3; each is left out with a note when missing).

Data: the real traffic URLs repeated with variations (a query parameter per
round) up to ``--urls`` distinct URLs to add, plus 200,000 others never
added, for lookup misses and the measured false-positive rate.

Two tables:

1. *From canonical URLs*: every contender starts from the same canonical URL
   bytes (canonicalisation is done once, up front, and timed on its own): ours
   hash them (xxh3) and call the fingerprint batch API or ``add``; the peers
   hash them their own way. This is the store's own cost.
2. *End to end*: every registered urlsieve backend from raw URL strings, with
   canonicalisation, as an application calls it (``add_many``/``add``).

Adds are timed once (they change the store); lookups are the median of 3.

``--one-at-a-time`` runs issue 34's table instead (``benchmarks/one_at_a_time.py``: Scrapy's
duplicate filter, single ``add``/``in`` against rbloom, ``exact:`` growth, ``Filter.check``).

``--writers`` runs the seed-004 writer table instead: 1, 2 and 4 writer
processes adding the same URLs to one ``exact:`` file (one lock for all) and to
a ``partitioned:`` directory where each writer owns its domains' partitions.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np
import xxhash

from benchmarks import _common
from benchmarks._common import (
    load_note,
    machine,
    median_seconds,
    table,
    traffic_urls,
    verdict,
    write_section,
)
from urlsieve import InvalidURL, canonicalize
from urlsieve.seen import BACKENDS, open_seen
from urlsieve.seen.bloom import BloomStore
from urlsieve.seen.exact import ExactStore

MISSES = 200_000
BATCH = 10_000
ERROR = 0.001


def dataset(n: int) -> tuple[list[str], list[str], str]:
    """``n`` URLs to add and MISSES others, all distinct after canonicalisation."""
    base, source = traffic_urls()
    out: list[str] = []
    canonical: set[str] = set()
    rnd = 0
    while len(out) < n + MISSES:
        for u in base:
            url = u if rnd == 0 else f"{u}{'&' if '?' in u else '?'}_r={rnd}"
            try:
                form = canonicalize(url)
            except InvalidURL:
                continue
            if form not in canonical:
                canonical.add(form)
                out.append(url)
        rnd += 1
    return out[:n], out[n : n + MISSES], source


def chunks(items: list[Any], size: int = BATCH) -> Iterable[list[Any]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


def fresh(strings: list[str]) -> list[str]:
    """New str objects of the same text. Python caches a str's hash in the object, and
    rbloom uses that hash: given the same objects again, it would skip hashing on every
    run after the first. A crawler's URLs are new strings, so every timed run gets new
    ones (made before the clock starts), for every contender."""
    return [(s + ".")[:-1] for s in strings]


def timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def ns(seconds: float, n: int) -> str:
    return f"{seconds / n * 1e9:,.0f}"


class Row:
    def __init__(self, name: str, persistent: str, shared: str) -> None:
        self.name, self.persistent, self.shared = name, persistent, shared
        self.add = self.hit = self.miss = float("nan")
        self.n = self.n_hit = self.n_miss = 1
        self.bytes = 0
        self.fp = 0.0

    def cells(self) -> list[str]:
        return [
            self.name,
            ns(self.add, self.n),
            ns(self.hit, self.n_hit),
            ns(self.miss, self.n_miss),
            f"{self.bytes / self.n:.1f}" if self.bytes else "–",
            f"{self.fp:.4%}",
            self.persistent,
            self.shared,
        ]


def measure(
    row: Row,
    *,
    add: Callable[[], object],
    lookup_hit: Callable[[], object],
    lookup_miss: Callable[[], Iterable[bool]],
    n: int,
    n_lookup: int,
    size: Callable[[], int],
) -> Row:
    row.n, row.n_hit, row.n_miss = n, n_lookup, MISSES
    row.add = timed(add)
    row.hit = median_seconds(lookup_hit, repeats=3)
    row.miss = median_seconds(lambda: list(lookup_miss()), repeats=3)
    row.fp = sum(lookup_miss()) / MISSES
    row.bytes = size()
    print(" | ".join(row.cells()), file=sys.stderr)
    return row


def digests128(canon: list[bytes]) -> np.ndarray:
    joined = b"".join(map(xxhash.xxh3_128_digest, canon))
    return np.frombuffer(joined, dtype=">u8").astype(np.uint64).reshape(-1, 2)


def digests64(canon: list[bytes]) -> np.ndarray:
    return np.fromiter(map(xxhash.xxh3_64_intdigest, canon), dtype=np.uint64, count=len(canon))


def core_rows(adds: list[str], misses: list[str], tmp: str, single: int) -> list[Row]:
    canon_add = [canonicalize(u).encode("ascii") for u in adds]
    canon_miss = [canonicalize(u).encode("ascii") for u in misses]
    n = len(canon_add)
    rows = []

    # --- ours, batch: hash + fingerprint API, in batches of BATCH
    def batch_row(kind: str, store: Any, digests: Callable[[list[bytes]], np.ndarray]) -> Row:
        row = Row(f"urlsieve {kind}, batches of {BATCH:,}", "yes", "yes")
        measure(
            row,
            add=lambda: [store.add_fingerprints(digests(c)) for c in chunks(canon_add)],
            lookup_hit=lambda: [store.contains_fingerprints(digests(c)) for c in chunks(canon_add)],
            lookup_miss=lambda: np.concatenate(
                [store.contains_fingerprints(digests(c)) for c in chunks(canon_miss)]
            ).tolist(),
            n=n,
            n_lookup=n,
            size=lambda: os.path.getsize(store.path),
        )
        store.close()
        return row

    rows.append(
        batch_row("bloom", BloomStore(f"{tmp}/core.bloom", capacity=n, error=ERROR), digests128)
    )
    rows.append(batch_row("exact", ExactStore(f"{tmp}/core.exact"), digests64))

    # --- ours, one URL at a time (the canonical URL string: canonicalisation's fast path)
    for kind, spec in (
        ("bloom", f"bloom:{tmp}/single.bloom?capacity={n}&error={ERROR}"),
        ("exact", f"exact:{tmp}/single.exact"),
    ):
        store = open_seen(spec)
        strings = [c.decode() for c in canon_add[:single]]
        miss_strings = [c.decode() for c in canon_miss]
        row = Row(f"urlsieve {kind}, one at a time (incl. canonical fast path)", "yes", "yes")
        measure(
            row,
            add=lambda s=store, u=strings: [s.add(x) for x in u],
            lookup_hit=lambda s=store, u=strings: [x in s for x in u],
            lookup_miss=lambda s=store, u=miss_strings: [x in s for x in u],
            n=single,
            n_lookup=single,
            size=lambda: 0,  # a partial fill says nothing about bytes per URL
        )
        store.close()
        rows.append(row)

    # --- peers
    try:
        import rbloom

        bf = rbloom.Bloom(n, ERROR)
        strings = [c.decode() for c in canon_add]
        miss_strings = [c.decode() for c in canon_miss]
        # new strings for each lookup run (see fresh): 3 timed, and the miss count
        hit_runs = iter([fresh(strings) for _ in range(3)])
        miss_runs = iter([fresh(miss_strings) for _ in range(4)])
        rows.append(
            measure(
                Row("rbloom (update / `in`)", "no (salted hash)", "no"),
                add=lambda: bf.update(strings),
                lookup_hit=lambda: [x in bf for x in next(hit_runs)],
                lookup_miss=lambda: [x in bf for x in next(miss_runs)],
                n=n,
                n_lookup=n,
                size=lambda: bf.size_in_bits // 8,
            )
        )
    except ImportError:
        print("rbloom not installed: left out", file=sys.stderr)
    try:
        import pybloomfilter

        pbf = pybloomfilter.BloomFilter(n, ERROR, f"{tmp}/pybloom.bf")
        rows.append(
            measure(
                Row("pybloomfiltermmap3 (update / `in`)", "yes", "no (lost bits)"),
                add=lambda: pbf.update(canon_add),
                lookup_hit=lambda: [x in pbf for x in canon_add],
                lookup_miss=lambda: [x in pbf for x in canon_miss],
                n=n,
                n_lookup=n,
                size=lambda: pbf.num_bits // 8,
            )
        )
    except ImportError:
        print("pybloomfiltermmap3 not installed: left out", file=sys.stderr)

    def sha1hex(c: bytes) -> str:
        return hashlib.sha1(c, usedforsecurity=False).hexdigest()

    scrapy: set[str] = set()
    rows.append(
        measure(
            Row("Scrapy's way: set of hex SHA-1", "no", "no"),
            add=lambda: [scrapy.add(sha1hex(c)) for c in canon_add],
            lookup_hit=lambda: [sha1hex(c) in scrapy for c in canon_add],
            lookup_miss=lambda: [sha1hex(c) in scrapy for c in canon_miss],
            n=n,
            n_lookup=n,
            size=lambda: sys.getsizeof(scrapy) + sum(sys.getsizeof(x) for x in scrapy),
        )
    )
    raw: set[bytes] = set()
    digest = xxhash.xxh3_64_digest
    rows.append(
        measure(
            Row("set of raw 8-byte fingerprints", "no", "no"),
            add=lambda: [raw.add(digest(c)) for c in canon_add],
            lookup_hit=lambda: [digest(c) in raw for c in canon_add],
            lookup_miss=lambda: [digest(c) in raw for c in canon_miss],
            n=n,
            n_lookup=n,
            size=lambda: sys.getsizeof(raw) + sum(sys.getsizeof(x) for x in raw),
        )
    )
    return rows


def end_to_end_rows(adds: list[str], misses: list[str], tmp: str, single: int) -> list[Row]:
    n = len(adds)
    specs = {
        "memory": "memory:",
        "exact": f"exact:{tmp}/e2e.exact",
        "bloom": f"bloom:{tmp}/e2e.bloom?capacity={n}&error={ERROR}",
    }
    for name in sorted(BACKENDS):  # whatever else is registered (seed stores …)
        servers = "valkey" in name or "redis" in name or name == "unix"  # benchmarks/valkey_stores
        if name not in specs and not servers:
            specs[name] = f"{name}:{tmp}/e2e.{name}"
    rows = []
    for name, spec in specs.items():
        for mode in ("batch", "single"):
            try:
                store = open_seen(spec.replace("e2e.", f"e2e-{mode}."))
            except Exception as exc:  # a backend that needs parameters we do not know
                print(f"{name}: not benchmarked ({exc})", file=sys.stderr)
                break
            stats0 = store.stats()
            if mode == "batch":
                row = Row(f"{name} add_many / contains_many ({BATCH:,})", "", "")
                measure(
                    row,
                    add=lambda s=store: [s.add_many(c) for c in chunks(adds)],
                    lookup_hit=lambda s=store: [s.contains_many(c) for c in chunks(adds)],
                    lookup_miss=lambda s=store: [
                        f for c in chunks(misses) for f in s.contains_many(c)
                    ],
                    n=n,
                    n_lookup=n,
                    size=lambda s=store: s.stats().bytes_used,
                )
            else:
                part = adds[:single]
                row = Row(f"{name} add / `in`", "", "")
                measure(
                    row,
                    add=lambda s=store, p=part: [s.add(u) for u in p],
                    lookup_hit=lambda s=store, p=part: [u in s for u in p],
                    lookup_miss=lambda s=store: [u in s for u in misses],
                    n=single,
                    n_lookup=single,
                    size=lambda: 0,  # a partial fill says nothing about bytes per URL
                )
            row.persistent = "yes" if stats0.backend != "memory" else "no"
            row.shared = "yes" if stats0.backend in ("exact", "bloom") else "see its docs"
            rows.append(row)
            store.close()
    return rows


def strings_section(adds: list[str], tmp: str, repeats: int = 3) -> str:
    """Issue 10's comparison: ``add_many`` of a list of str (ours: canonicalised, persistent,
    shared) against ``rbloom.Bloom.update`` of the same list, on canonical URLs and on the
    raw ones; ``exact:`` ``add_many`` too. Each store is new per run (adds change it), the
    runs interleaved; the best of ``repeats`` (the machine is shared: noise only adds)."""
    try:
        import rbloom
    except ImportError:
        return "(rbloom not installed: `pip install -e '.[bench]'`)"
    n = len(adds)
    canonical = [canonicalize(u) for u in adds]
    rows = []
    ratios: dict[str, float] = {}
    exact_ns = (float("nan"), float("nan"))
    for label, urls in (("canonical", canonical), ("raw", adds)):
        ours, theirs, exact, presized = [], [], [], []
        for run in range(repeats):
            store = open_seen(f"bloom:{tmp}/s-{label}-{run}.bloom?capacity={n}&error={ERROR}")
            batch = fresh(urls)
            ours.append(timed(lambda s=store, u=batch: [s.add_many(c) for c in chunks(u)]))
            store.close()
            bf = rbloom.Bloom(n, ERROR)
            batch = fresh(urls)
            theirs.append(timed(lambda b=bf, u=batch: [b.update(c) for c in chunks(u)]))
            for spec, times in (("", exact), (f"?capacity={n}", presized)):
                store = open_seen(f"exact:{tmp}/s-{label}-{run}-{len(spec)}.exact{spec}")
                batch = fresh(urls)
                times.append(timed(lambda s=store, u=batch: [s.add_many(c) for c in chunks(u)]))
                store.close()
            del batch
        best = [min(t) / n * 1e9 for t in (ours, theirs, exact, presized)]
        ratios[label] = best[0] / best[1]
        if label == "canonical":
            exact_ns = best[2], best[3]
        rows.append(
            [
                label,
                f"{best[0]:,.0f}",
                f"{best[1]:,.0f}",
                f"**{ratios[label]:.2f}×**",
                f"{best[2]:,.0f}",
                f"{best[3]:,.0f}",
            ]
        )
    header = [
        "URLs (list of str, batches of 10,000)",
        "bloom add_many ns/URL",
        "rbloom update ns/URL",
        "ratio",
        "exact add_many ns/URL (growing from 65,536)",
        f"exact add_many ns/URL (capacity={n:,})",
    ]
    goals = (
        f"Goals: canonical no slower than rbloom ({ratios['canonical']:.2f}×: "
        f"{verdict(ratios['canonical'] <= 1)}); raw ≤ 1.5× rbloom ({ratios['raw']:.2f}×: "
        f"{verdict(ratios['raw'] <= 1.5)}); exact add ≤ 150 ns on canonical URLs "
        f"({exact_ns[0]:,.0f} growing, {exact_ns[1]:,.0f} presized: "
        f"{verdict(min(exact_ns) <= 150)})."
    )
    return table(header, rows) + "\n\n" + goals


def verdicts(core: list[Row]) -> str:
    """The issue's goals, checked against this run's table 1."""
    by = {
        row.name.split(",")[0].split(" (")[0]: row
        for row in core
        if "one at a time" not in row.name
    }
    bloom, exact = by.get("urlsieve bloom"), by.get("urlsieve exact")
    rb, pb, scrapy = (
        by.get("rbloom"),
        by.get("pybloomfiltermmap3"),
        by.get("Scrapy's way: set of hex SHA-1"),
    )
    lines = []

    def ratio(a: float, b: float) -> str:
        return f"{a / b:.2f}×"

    def per(row: Row) -> tuple[float, float, float]:
        return row.add / row.n, row.hit / row.n_hit, row.miss / row.n_miss

    if bloom and rb:
        ours, theirs = per(bloom), per(rb)
        ok = all(o <= 2 * t for o, t in zip(ours, theirs, strict=True))
        lines.append(
            f"- bloom batch within 2× of rbloom (add, hit, miss): "
            f"{', '.join(ratio(o, t) for o, t in zip(ours, theirs, strict=True))} — " + verdict(ok)
        )
    if bloom and pb:
        ours, theirs = per(bloom), per(pb)
        ok = all(o < t for o, t in zip(ours, theirs, strict=True))
        lines.append(
            f"- bloom batch faster than pybloomfiltermmap3 (add, hit, miss): "
            f"{', '.join(ratio(o, t) for o, t in zip(ours, theirs, strict=True))} — " + verdict(ok)
        )
    if exact:
        size = exact.bytes / exact.n
        lines.append(f"- exact ≤ 16 bytes/URL: {size:.1f} — " + verdict(size <= 16))
    if exact and scrapy:
        ours, theirs = per(exact), per(scrapy)
        ok = all(o < t for o, t in zip(ours, theirs, strict=True))
        lines.append(
            f"- exact batch faster than Scrapy's set (add, hit, miss): "
            f"{', '.join(ratio(o, t) for o, t in zip(ours, theirs, strict=True))} — " + verdict(ok)
        )
    return "\n".join(lines)


def _writer(
    spec: str, urls: list[str], batch: int, barrier: Any, out: Any
) -> None:  # a writer process: add its URLs in batches once every writer is ready
    with open_seen(spec) as store:
        barrier.wait()
        start = time.perf_counter()
        new = 0
        for part in chunks(urls, batch):
            new += sum(store.add_many(part))
        store.flush()
        out.put((start, time.perf_counter(), new))


def _run_writers(spec: str, shares: list[list[str]], batch: int) -> tuple[float, int]:
    import multiprocessing

    ctx = multiprocessing.get_context("fork")
    barrier = ctx.Barrier(len(shares))
    queue = ctx.Queue()
    procs = [
        ctx.Process(target=_writer, args=(spec, share, batch, barrier, queue)) for share in shares
    ]
    for proc in procs:
        proc.start()
    results = [queue.get(timeout=3600) for _ in procs]
    for proc in procs:
        proc.join()
    wall = max(r[1] for r in results) - min(r[0] for r in results)
    return wall, sum(r[2] for r in results)


def writers_section(urls: list[str], source: str, batches: list[int]) -> str:
    """Seed 004's writers: one lock for all (exact:) against a lock per partition."""
    from urlsieve.seen.partitioned import PartitionedStore

    rows = []
    for batch in batches:
        base: dict[str, float] = {}
        for writers in (1, 2, 4):
            for kind in ("exact", "partitioned"):
                with tempfile.TemporaryDirectory(prefix="urlsieve-writers-") as tmp:
                    if kind == "exact":
                        spec = f"exact:{tmp}/seen.exact?capacity={len(urls)}"
                        shares = [urls[i::writers] for i in range(writers)]
                        note = "URLs dealt round-robin; every writer takes the one lock"
                    else:
                        spec = f"partitioned:{tmp}/seen.d?partitions=16&capacity={len(urls)}"
                        with PartitionedStore(f"{tmp}/seen.d", partitions=16) as store:
                            owners = [store.owner(u, writers) for u in urls]
                        shares = [
                            [u for u, o in zip(urls, owners, strict=True) if o == i]
                            for i in range(writers)
                        ]
                        note = "each writer adds the URLs of the domains it owns"
                    wall, new = _run_writers(spec, shares, batch)
                assert new == len(urls), f"{kind} x{writers}: {new} new of {len(urls)}"
                rate = len(urls) / wall
                base.setdefault(kind, rate)
                rows.append(
                    [
                        kind,
                        writers,
                        f"{batch:,}",
                        f"{rate:,.0f}",
                        f"{rate / base[kind]:.2f}x",
                        f"{min(len(s) for s in shares):,}–{max(len(s) for s in shares):,}",
                        note,
                    ]
                )
    header = [
        "store",
        "writers",
        "batch",
        "URLs/s (all writers)",
        "vs 1 writer",
        "URLs per writer",
        "how the URLs are shared",
    ]
    return f"""### Writers that own their domains (seed 004 §3.3)

Command: `python benchmarks/seen.py --writers {" ".join(sys.argv[2:])}`

{len(urls):,} distinct URLs from {source}, added by 1, 2 and 4 writer processes (each
starts at a barrier; time = first start to last finish, canonicalisation included), into
one `exact:` file (one `flock` for every write) and into `partitioned:` with 16
partitions, where writer *i* adds the URLs whose registrable domain it owns
(`store.owner(url, writers)`). Every run checks that each URL was reported new exactly
once. Machine: {machine()} — with 2 cores, 4 writers cannot run faster than 2.

{table(header, rows)}

Reading it: with one lock, a second writer helps only while the other is outside the
lock (hashing, canonicalising); with small batches (a crawler adding the links of one
page) the writers mostly wait for each other and the total falls below one writer's.
With a lock per partition the writers of disjoint domains never wait, and the total
grows with the cores. One partitioned writer is slower per URL than one `exact:` writer
with large batches: each new host costs a Public Suffix List lookup (cached per host),
and a batch is split into one table update per partition.
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--urls", type=int, default=1_000_000)
    parser.add_argument("--single", type=int, default=200_000, help="URLs for one-at-a-time runs")
    parser.add_argument("--write", action="store_true", help="update benchmarks/RESULTS.md")
    parser.add_argument(
        "--data", type=Path, help="the shared data directory (default: ../shared/data)"
    )
    parser.add_argument("--writers", action="store_true", help="the seed-004 writer table only")
    parser.add_argument(
        "--batches", default="1000,100", help="--writers: batch sizes of add_many, comma-separated"
    )
    parser.add_argument(
        "--one-at-a-time",
        action="store_true",
        help="issue 34's single-call table only (benchmarks/one_at_a_time.py)",
    )
    parser.add_argument("--repeats", type=int, default=5, help="--one-at-a-time: runs a row")
    args = parser.parse_args()
    if args.data:
        _common.SHARED_DATA = args.data
    if args.one_at_a_time:
        from benchmarks import one_at_a_time

        section = one_at_a_time.run(args)
        print(section)
        if args.write:
            write_section("seen-one-at-a-time", section)
        return
    if args.writers:
        urls, _, source = dataset(args.urls)
        section = writers_section(urls, source, [int(b) for b in args.batches.split(",")])
        print(section)
        if args.write:
            write_section("seen-writers", section)
        return
    adds, misses, source = dataset(args.urls)
    canon_time = timed(lambda: [canonicalize(u) for u in adds[:200_000]]) / 200_000
    header = [
        "store",
        "add ns/URL",
        "lookup hit ns/URL",
        "lookup miss ns/URL",
        "bytes/URL",
        "measured FP",
        "persistent",
        "shared by processes",
    ]
    with tempfile.TemporaryDirectory(prefix="urlsieve-bench-") as tmp:
        strings = strings_section(adds, tmp)
        core = core_rows(adds, misses, tmp, args.single)
        e2e = end_to_end_rows(adds, misses, tmp, args.single)
    e2e_header = [h if h != "shared by processes" else "multi-process safe" for h in header]
    body = f"""## Seen stores

Command: `python benchmarks/seen.py {" ".join(sys.argv[1:])}`

Data: {len(adds):,} distinct URLs to add and {len(misses):,} never added (lookup misses and
the measured false-positive rate), from {source}, repeated with a `_r=N` query parameter per
round, all distinct after canonicalisation. Bloom filters sized for {len(adds):,} URLs at
error {ERROR}.

Machine: {machine()}; {load_note()}.
Adds are timed once, lookups are the median of 3. Canonicalising a raw URL costs
{canon_time * 1e9:,.0f} ns on this data (not included in table 1).

### From canonical URLs: the stores' own cost

Every contender gets the canonical URL bytes; ours hash them with xxh3 (included) and use
the fingerprint batch API, or `add`/`in` with the canonical string (which includes the
canonicaliser's fast path for already-canonical URLs). One-at-a-time rows use the first
{args.single:,} URLs (bytes/URL for the filter sized for all of them).

{table(header, [r.cells() for r in core])}

Goals (ratios are ours / theirs, from this table):

{verdicts(core)}

### End to end: raw URLs through `urlsieve.open_seen(spec)`

Includes canonicalisation. One-at-a-time rows use the first {args.single:,} URLs.

{table(e2e_header, [r.cells() for r in e2e])}

### `add_many` of a list of str against `rbloom.Bloom.update` (issue 10)

The same {len(adds):,} URLs as Python strings, canonical or raw, in batches of {BATCH:,}: ours
canonicalise each (the compiled fast path, Python for the rest), fingerprint it and set the
bits in the shared file; rbloom hashes the string with Python's salted hash into memory.
Best of 3 interleaved runs, a new store and new str objects each: Python caches a str's
hash in the object and rbloom uses it, so the same objects again would let it skip hashing
(earlier versions of this table did that: rbloom's time was 118–134 ns with cached hashes).
rbloom's lookup rows in the first table get new strings per run too.

{strings}
"""
    print(body)
    if args.write:
        write_section("seen", body)


if __name__ == "__main__":
    main()
