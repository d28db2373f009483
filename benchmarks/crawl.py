"""Crawler throughput: pages/s fetching distinct small HTML pages from a loopback origin.

The origin is an aiohttp server in another process (``--serve``), so the crawler has the
event loop to itself; 50 host names map to 127.0.0.1 (``allow_networks`` opens
loopback), robots.txt is on (one fetch per host, then cached). Prints the median of
three runs; does not write RESULTS.md.

    .venv/bin/python benchmarks/crawl.py [--pages 5000] [--hosts 50]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import time

PAGE = b"<!DOCTYPE html><html><head><title>t</title></head><body>" + b"<p>words</p>" * 150


def serve(port_file: str) -> None:
    import aiohttp.web

    async def page(request: aiohttp.web.Request) -> aiohttp.web.Response:
        if request.path == "/robots.txt":
            return aiohttp.web.Response(text="User-agent: *\nDisallow: /private/\n")
        return aiohttp.web.Response(body=PAGE, content_type="text/html", charset="utf-8")

    async def main() -> None:
        app = aiohttp.web.Application()
        app.router.add_get("/{tail:.*}", page)
        runner = aiohttp.web.AppRunner(app, access_log=None)
        await runner.setup()
        site = aiohttp.web.TCPSite(runner, "127.0.0.1", 0, backlog=1024)
        await site.start()
        with open(port_file, "w") as fh:
            fh.write(str(runner.addresses[0][1]))
        await asyncio.Event().wait()

    asyncio.run(main())


async def crawl(port: int, pages: int, hosts: int, run: int) -> tuple[float, dict[str, int]]:
    from urlsieve.learn.crawl import Crawler, CrawlSettings

    names = {f"h{i}.bench": "127.0.0.1" for i in range(hosts)}
    settings = CrawlSettings(
        allow_networks=("127.0.0.0/8",), hosts=names, concurrency=64, per_host=8
    )
    urls = [(f"http://h{i % hosts}.bench:{port}/r{run}/p{i}.html", None) for i in range(pages)]
    async with Crawler(settings) as crawler:
        start = time.perf_counter()
        async for _ in crawler.fetch_all(urls):
            pass
        elapsed = time.perf_counter() - start
    return pages / elapsed, crawler.stats.outcomes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pages", type=int, default=5000)
    parser.add_argument("--hosts", type=int, default=50)
    parser.add_argument("--serve", metavar="PORT_FILE", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve:
        serve(args.serve)
        return 0
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as tmp:
        port_file = Path(tmp) / "port"
        server = subprocess.Popen([sys.executable, __file__, "--serve", str(port_file)])
        try:
            while not port_file.exists() or not port_file.read_text():
                time.sleep(0.05)
            port = int(port_file.read_text())
            rates = []
            for run in range(3):
                rate, outcomes = asyncio.run(crawl(port, args.pages, args.hosts, run))
                print(f"run {run + 1}: {rate:,.0f} pages/s {outcomes}")
                rates.append(rate)
        finally:
            server.terminate()
            server.wait()
    print(
        f"crawler: median {statistics.median(rates):,.0f} pages/s over 3 runs "
        f"({args.pages} pages of {len(PAGE)} bytes, {args.hosts} hosts, robots on, "
        f"concurrency 64, per_host 8, origin in another process)"
    )
    print(
        f"command: .venv/bin/python benchmarks/crawl.py --pages {args.pages} --hosts {args.hosts}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
