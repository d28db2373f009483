"""A real Scrapy crawl with urlsieve's duplicate filter, run as a subprocess by the tests.

Usage: python crawl_site.py START_URL JOBDIR [STORE_SPEC]; prints the crawl stats as JSON.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import AsyncIterator, Iterator
from typing import Any

import scrapy
from scrapy.crawler import CrawlerProcess
from scrapy.http import Response


class SiteSpider(scrapy.Spider):
    name = "site"

    def __init__(self, start_url: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.start_url = start_url

    async def start(self) -> AsyncIterator[Any]:
        # Filtered like any other request, so that a resumed crawl can fetch nothing.
        yield scrapy.Request(self.start_url, dont_filter=False)

    def parse(self, response: Response) -> Iterator[Any]:
        for href in response.css("a::attr(href)").getall():
            yield response.follow(href, callback=self.parse)


def main(argv: list[str]) -> int:
    start_url, jobdir = argv[0], argv[1]
    settings: dict[str, Any] = {
        "DUPEFILTER_CLASS": "urlsieve.integrations.scrapy.UrlsieveDupeFilter",
        "REQUEST_FINGERPRINTER_CLASS": "urlsieve.integrations.scrapy.UrlsieveFingerprinter",
        "JOBDIR": jobdir,
        "ROBOTSTXT_OBEY": False,
        "TELNETCONSOLE_ENABLED": False,
        "LOG_LEVEL": "INFO",
        "CONCURRENT_REQUESTS": 2,
    }
    if len(argv) > 2:
        settings["URLSIEVE_SEEN_STORE"] = argv[2]
    if os.environ.get("CRAWL_RULES"):  # the filter middleware, on these rules
        middleware = "urlsieve.integrations.scrapy.UrlsieveFilterMiddleware"
        settings["DOWNLOADER_MIDDLEWARES"] = {middleware: 50}
        settings["URLSIEVE_RULES"] = os.environ["CRAWL_RULES"]
    if os.environ.get("CRAWL_POLICY"):  # the filter middleware, deciding by a policy
        middleware = "urlsieve.integrations.scrapy.UrlsieveFilterMiddleware"
        settings["DOWNLOADER_MIDDLEWARES"] = {middleware: 50}
        settings["URLSIEVE_POLICY"] = os.environ["CRAWL_POLICY"]
    process = CrawlerProcess(settings=settings)
    crawler = process.create_crawler(SiteSpider)
    process.crawl(crawler, start_url=start_url)
    process.start()
    assert crawler.stats is not None
    stats = {k: v for k, v in crawler.stats.get_stats().items() if isinstance(v, int | float)}
    print(json.dumps(stats))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
