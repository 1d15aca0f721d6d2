"""A distributed worker whose start request has a callback, cb_kwargs and JSON meta; run by
test_seed_restrictions.py in its own process (support.connections.run_crawl).

Usage: ``PYTHONPATH=tests python seed_rule_crawl.py KAFKA REDIS_URL MONGO_URI CRAWL_ID BASE
SEED_REQUEST_FIELDS``. It crawls until the crawl is drained and prints one JSON line: what
its callbacks saw and its seed stats.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from scrapy import Request, Spider
from scrapy.crawler import CrawlerProcess
from scrapy.http import Response

# first: crawler.ledger.balance (the metrics extension) imported before crawler.frontier
# fails on a circular import (crawler.ledger.sources -> crawler.frontier -> the scheduler)
import crawler.frontier  # noqa: F401

START_META = {"tag": {"deep": [1, "two"]}, "source": "start"}


class SeedRuleSpider(Spider):
    name = "seedrule"

    def __init__(self, base: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.base = base
        self.started: list[dict[str, Any]] = []
        self.parsed: list[str] = []

    async def start(self) -> Any:
        yield Request(f"{self.base}/start", callback=self.parse_start, cb_kwargs={"n": 7},
                      meta=dict(START_META))

    def parse_start(self, response: Response, n: int) -> Any:
        self.started.append({"url": response.url, "n": n,
                             "meta": {k: response.meta.get(k) for k in START_META}})
        yield {"url": response.url}

    def parse_secret(self, response: Response) -> Any:  # what a forged seed names
        self.parsed.append(f"secret:{response.url}")

    def parse(self, response: Response) -> Any:
        self.parsed.append(response.url)
        yield {"url": response.url}


def main(bootstrap: str, redis_url: str, mongo_uri: str, crawl_id: str, base: str,
         fields: str) -> None:
    settings = {
        "TWISTED_REACTOR": "twisted.internet.asyncioreactor.AsyncioSelectorReactor",
        "ADDONS": {"crawler.addon.DistributedAddon": 0}, "LOG_LEVEL": "INFO",
        "TELNETCONSOLE_ENABLED": False, "CRAWL_ID": crawl_id, "ROBOTSTXT_OBEY": False,
        "KAFKA_BOOTSTRAP_SERVERS": bootstrap, "KAFKA_PARTITIONS": 2,
        "REDIS_URL": redis_url, "MONGO_URI": mongo_uri, "METRICS_ENABLED": False,
        "CRAWL_HEARTBEAT_INTERVAL": 0.5, "CRAWL_IDLE_TIMEOUT": 3,
        "SEED_REQUEST_FIELDS": [f for f in fields.split(",") if f],
    }
    process = CrawlerProcess(settings, install_root_handler=True)
    crawler = process.create_crawler(SeedRuleSpider)
    process.crawl(crawler, base=base)
    process.start()
    assert crawler.spider is not None and crawler.stats is not None
    stats = crawler.stats.get_stats()
    spider: Any = crawler.spider
    print(json.dumps({
        "started": spider.started, "parsed": sorted(spider.parsed),
        "reason": stats.get("finish_reason"),
        **{name: stats.get(f"frontier/{name}", 0)
           for name in ("seeds_published", "seeds_taken", "seeds_restricted",
                        "seeds_bad_signature", "dead_lettered")},
    }))


if __name__ == "__main__":
    main(*sys.argv[1:7])
