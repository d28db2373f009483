"""A real Scrapy crawl of several host names with seed 004's alias and near-duplicate handling.

Run as a subprocess by test_scrapy_mirrors.py. Usage::

    python crawl_mirrors.py RESOLVER_SPEC SETTINGS_JSON START_URL...

Prints one JSON object: the crawl stats and the URLs fetched (``fetched``).
"""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator, Iterator
from typing import Any

import scrapy
from scrapy.crawler import CrawlerProcess
from scrapy.http import Response

FETCHED: list[str] = []


class MirrorSpider(scrapy.Spider):
    name = "mirrors"

    def __init__(self, starts: list[str], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.starts = starts

    async def start(self) -> AsyncIterator[Any]:
        for url in self.starts:
            yield scrapy.Request(url)

    def parse(self, response: Response) -> Iterator[Any]:
        FETCHED.append(response.url)
        for href in response.css("a::attr(href)").getall():
            yield response.follow(href, callback=self.parse)


def main(argv: list[str]) -> int:
    resolver, extra, starts = argv[0], json.loads(argv[1]), argv[2:]
    settings: dict[str, Any] = {
        "DUPEFILTER_CLASS": "urlsieve.integrations.scrapy_mirrors.AliasDupeFilter",
        "DOWNLOADER_MIDDLEWARES": {"urlsieve.integrations.scrapy_mirrors.MirrorMiddleware": 60},
        "DNS_RESOLVER": "urlsieve.integrations.scrapy_mirrors.UrlsieveResolver",
        "URLSIEVE_RESOLVER": resolver,
        "ROBOTSTXT_OBEY": False,
        "TELNETCONSOLE_ENABLED": False,
        "LOG_LEVEL": "INFO",
        "CONCURRENT_REQUESTS": 1,
        "DEPTH_PRIORITY": 1,  # breadth first: every site's first pages before anyone's deep ones
        "SCHEDULER_DISK_QUEUE": "scrapy.squeues.PickleFifoDiskQueue",
        "SCHEDULER_MEMORY_QUEUE": "scrapy.squeues.FifoMemoryQueue",
        **extra,
    }
    process = CrawlerProcess(settings=settings)
    crawler = process.create_crawler(MirrorSpider)
    process.crawl(crawler, starts=starts)
    process.start()
    assert crawler.stats is not None
    stats = {k: v for k, v in crawler.stats.get_stats().items() if isinstance(v, int | float)}
    stats["fetched"] = FETCHED
    print(json.dumps(stats))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
