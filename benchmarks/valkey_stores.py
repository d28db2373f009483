"""Valkey seen stores vs scrapy-redis' SADD of hex SHA-1 and a per-URL SETBIT Bloom filter.

    python -m benchmarks.valkey_stores [--urls 200000] [--single 20000]

One private valkey-server on loopback (no persistence, so the numbers are
the data structures', not the disk's). Every method gets the same URLs and
the same canonicalisation (urlsieve's), so the comparison is about the
storage protocol only. Reported: URLs/s adding from one client and from two
client processes (disjoint halves, started together), and server memory per
URL (``INFO memory`` used_memory delta after FLUSHALL). Methods that make one
round trip per URL run on a ``--single`` subset to keep the run bounded.
"""

from __future__ import annotations

import argparse
import hashlib
import multiprocessing
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any

import valkey
from tests.seen.valkey_fixtures import start_server

from benchmarks._common import generated_urls, machine, table, verdict, write_section
from urlsieve.fingerprint import canonical_bytes
from urlsieve.seen import open_seen
from urlsieve.seen.valkey.bloom import bloom_size, hash_pairs, positions
from urlsieve.url import FILTER

CALL = 10_000  # URLs per add_many call of our stores

Adder = Callable[[str, list[Any]], int]  # (server url, urls) -> number reported new
SHIPPED_OURS = "urlsieve kind=exact, from Scrapy requests"
SHIPPED_PIPELINED = "scrapy-redis as shipped (Scrapy fingerprint), pipelined ×1000"
SHIPPED_SINGLE = "scrapy-redis as shipped (Scrapy fingerprint), one per request"


def ours(kind: str, capacity: int, url: str, urls: list[str]) -> int:
    query = f"kind={kind}&prefix=bench&capacity={capacity}"
    with open_seen(f"{url}?{query}") as store:
        return sum(sum(store.add_many(urls[i : i + CALL])) for i in range(0, len(urls), CALL))


def sha1_of_canonical(url: str) -> str:
    """scrapy-redis' hex SHA-1, of urlsieve's canonical URL (storage protocol only)."""
    return hashlib.sha1(canonical_bytes(url)).hexdigest()


def scrapy_fingerprint(request: Any) -> str:
    """scrapy-redis' hex SHA-1 as a crawl makes it: Scrapy's request fingerprint
    (w3lib's canonicalize_url, method and body, SHA-1)."""
    from scrapy.utils.request import fingerprint

    return fingerprint(request).hex()


def scrapy_requests(urls: list[str]) -> list[Any]:
    """Scrapy Request objects (a crawl has them anyway: built before the clock starts)."""
    from scrapy import Request

    return [Request(u) for u in urls]


def sadd_pipelined(fingerprint: Callable[[Any], str], url: str, items: list[Any]) -> int:
    """scrapy-redis' method, pipelined ×1000 (which scrapy-redis itself does not do)."""
    client = valkey.Valkey.from_url(url)
    new = 0
    for i in range(0, len(items), 1000):
        pipe = client.pipeline(transaction=False)
        for item in items[i : i + 1000]:
            pipe.sadd("dupefilter", fingerprint(item))
        new += sum(pipe.execute())
    return new


def sadd_per_request(fingerprint: Callable[[Any], str], url: str, items: list[Any]) -> int:
    """scrapy-redis' RFPDupeFilter.request_seen: one SADD round trip per request."""
    client = valkey.Valkey.from_url(url)
    return sum(int(client.sadd("dupefilter", fingerprint(item))) for item in items)


def ours_from_requests(kind: str, capacity: int, url: str, requests: list[Any]) -> int:
    """Our store in the same place: request.url of the same Request objects."""
    return ours(kind, capacity, url, [r.url for r in requests])


def setbit_bloom(capacity: int, url: str, urls: list[str]) -> int:
    """The common Python Redis Bloom: one key, k SETBITs per URL in one round trip."""
    m, k = bloom_size(capacity, 0.001)
    client = valkey.Valkey.from_url(url)
    h1, h2 = hash_pairs(urls, FILTER)
    new = 0
    for row in positions(h1, h2, k, m).tolist():
        pipe = client.pipeline(transaction=False)
        for off in row:
            pipe.setbit("bloom", off, 1)
        new += int(0 in pipe.execute())
    return new


def _child(method: tuple[Adder, Any], url: str, urls: list[str], go: Any, out: Any) -> None:
    adder, prepare = method
    items = prepare(urls) if prepare else urls
    go.wait(60)
    start = time.perf_counter()
    adder(url, items)
    out.put(time.perf_counter() - start)


def run(adder: Adder, url: str, urls: list[str], processes: int, prepare: Any = None) -> float:
    """Seconds to add ``urls`` (split over ``processes`` clients started together)."""
    if processes == 1:
        items = prepare(urls) if prepare else urls
        start = time.perf_counter()
        adder(url, items)
        return time.perf_counter() - start
    ctx = multiprocessing.get_context("spawn")
    go, out = ctx.Event(), ctx.Queue()
    parts = [urls[p::processes] for p in range(processes)]
    procs = [
        ctx.Process(target=_child, args=((adder, prepare), url, part, go, out)) for part in parts
    ]
    for proc in procs:
        proc.start()
    time.sleep(2.0)  # let the children import and connect before the clock starts
    go.set()
    seconds = max(out.get(timeout=600) for _ in procs)
    for proc in procs:
        proc.join(60)
    return seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--urls", type=int, default=200_000)
    parser.add_argument("--single", type=int, default=20_000)
    args = parser.parse_args(argv)
    urls = list(dict.fromkeys(generated_urls(args.urls)))
    n = len(urls)
    methods: list[tuple[str, Adder, int]] = [
        ("urlsieve kind=exact", partial(ours, "exact", n), n),
        ("urlsieve kind=bloom (ε=0.001)", partial(ours, "bloom", n), n),
        ("urlsieve kind=dsbf (f_max=0.001)", partial(ours, "dsbf", n), n),
        (
            "scrapy-redis SADD sha1 hex, pipelined ×1000",
            partial(sadd_pipelined, sha1_of_canonical),
            n,
        ),
        (
            "scrapy-redis SADD sha1 hex, one per request",
            partial(sadd_per_request, sha1_of_canonical),
            args.single,
        ),
        (
            "per-URL SETBIT Bloom (k SETBIT, 1 round trip/URL)",
            partial(setbit_bloom, n),
            args.single,
        ),
        (SHIPPED_OURS, partial(ours_from_requests, "exact", n), n),
        (SHIPPED_PIPELINED, partial(sadd_pipelined, scrapy_fingerprint), n),
        (SHIPPED_SINGLE, partial(sadd_per_request, scrapy_fingerprint), args.single),
    ]
    prepare = dict.fromkeys((SHIPPED_OURS, SHIPPED_PIPELINED, SHIPPED_SINGLE), scrapy_requests)
    rows = []
    rates: dict[str, tuple[float, float, float]] = {}
    with TemporaryDirectory() as tmp:
        server = start_server(Path(tmp), "--appendonly", "no")
        try:
            client = server.client()
            for name, adder, count in methods:
                subset = urls[:count]
                client.execute_command("FLUSHALL", "SYNC")
                before = int(client.info("memory")["used_memory"])
                one = count / run(adder, server.url, subset, 1, prepare.get(name))
                per_url = (int(client.info("memory")["used_memory"]) - before) / count
                client.execute_command("FLUSHALL", "SYNC")
                two = count / run(adder, server.url, subset, 2, prepare.get(name))
                rates[name] = (one, two, per_url)
                rows.append([name, f"{count:,}", f"{one:,.0f}", f"{two:,.0f}", f"{per_url:.1f}"])
                print(rows[-1], file=sys.stderr)
        finally:
            server.stop()

    exact, bloom = rates["urlsieve kind=exact"], rates["urlsieve kind=bloom (ε=0.001)"]
    scrapy = rates["scrapy-redis SADD sha1 hex, pipelined ×1000"]
    speedup, memory = exact[0] / scrapy[0], scrapy[2] / exact[2]
    shipped = rates[SHIPPED_OURS][0] / rates[SHIPPED_PIPELINED][0]
    verdicts = [
        f"- kind=bloom from one client: {bloom[0]:,.0f} URLs/s — goal ≥ 200,000: "
        + verdict(bloom[0] >= 200_000),
        f"- kind=exact vs scrapy-redis pipelined, as a crawl runs them (each with its own"
        f" fingerprinting from the request): {shipped:.1f}× the speed — goal ≥ 5×: "
        + verdict(shipped >= 5),
        f"- kind=exact vs SADD pipelined with the same canonicaliser (storage protocol only):"
        f" {speedup:.1f}× the speed",
        f"- kind=exact memory: {exact[2]:.1f} B/URL vs {scrapy[2]:.1f} B/URL, 1/{memory:.1f}"
        " — goal ≤ 1/5: " + verdict(memory >= 5),
    ]
    body = "\n".join(
        [
            "## Valkey/Redis seen stores (`benchmarks/valkey_stores.py`)",
            "",
            f"`python -m benchmarks.valkey_stores --urls {args.urls} --single {args.single}` — "
            f"{machine()}, one valkey-server on loopback, AOF off; {n:,} distinct generated URLs."
            " Our stores get calls of 10,000 URLs (pipelined in chunks of 1,000).",
            "",
            "Rows 1–6 canonicalise with urlsieve for every method, so only the storage"
            " protocol differs. The last three are what a Scrapy crawl runs: the same Scrapy"
            " `Request` objects (built before the clock starts) given to our store"
            " (`request.url`) and to scrapy-redis' method, Scrapy's request fingerprint"
            " (w3lib's `canonicalize_url`, SHA-1) as hex and `SADD`.",
            "",
            table(
                ["method", "URLs", "URLs/s, 1 client", "URLs/s, 2 processes", "server B/URL"],
                rows,
            ),
            "",
            *verdicts,
            "",
            "Bloom and DSBF memory is fixed by capacity (here = the URL count). Throughput on"
            " this 2-core machine is shared by the client(s) and the server: treat the ratios"
            " as the result, not the absolute rates.",
        ]
    )
    write_section("valkey", body)
    print(body)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
