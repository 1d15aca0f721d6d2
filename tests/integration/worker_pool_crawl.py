"""A distributed worker (the Kafka frontier, the Redis dupefilter, the rate limiter, the proxy
store, the alerts, the MongoDB pipeline) crawling a few pages; run by
test_worker_one_pool.py in its own process (support.connections.run_crawl).

Usage: ``PYTHONPATH=tests python worker_pool_crawl.py KAFKA REDIS_URL MONGO_URI CRAWL_ID
CLIENT_NAME``. While it crawls it counts the Redis connections named CLIENT_NAME and checks
that the scheduler's client is the crawler's shared one; it prints one JSON line: those, the
shared registry's view and the connections left once the crawl ended.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from typing import Any

from scrapy import Request, Spider
from scrapy.crawler import CrawlerProcess
from scrapy.http import Response
from support.connections import Pages, redis_connections, serve

from crawler.connections.shared import shared
from crawler.frontier.scheduler import KafkaScheduler

PAGES = 6
MAX_CONNECTIONS = 2


class LinkedPages(Pages):
    def page(self, path: str) -> tuple[int, bytes]:
        if not path.startswith("/page/"):  # robots.txt: distributed mode obeys it
            return 404, b"no such page"
        number = int(path.rsplit("/", 1)[-1])
        links = "".join(f'<a href="/page/{n}">{n}</a>' for n in (number + 1, 0)
                        if n < PAGES)
        return 200, f"<html><body>{links}</body></html>".encode()


class PoolSpider(Spider):
    name = "pool"

    def __init__(self, base: str, redis_url: str, client_name: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.base, self.redis_url, self.client_name = base, redis_url, client_name
        self.during: list[int] = []
        self.shared_client: list[bool] = []

    async def start(self) -> Any:
        yield Request(f"{self.base}/page/0")

    def parse(self, response: Response) -> Iterator[Any]:
        self.during.append(redis_connections(self.redis_url, self.client_name))
        scheduler = self.crawler.engine._slot.scheduler  # type: ignore[union-attr]
        assert isinstance(scheduler, KafkaScheduler)
        self.shared_client.append(scheduler.redis is shared(self.crawler)._redis)
        yield {"url": response.url}
        yield from response.follow_all(css="a::attr(href)")


def main(bootstrap: str, redis_url: str, mongo_uri: str, crawl_id: str, client_name: str) -> None:
    server = serve(LinkedPages)
    settings = {
        "TWISTED_REACTOR": "twisted.internet.asyncioreactor.AsyncioSelectorReactor",
        "ADDONS": {"crawler.addon.DistributedAddon": 0}, "LOG_LEVEL": "INFO",
        "TELNETCONSOLE_ENABLED": False, "CONCURRENT_REQUESTS": 4, "CRAWL_ID": crawl_id,
        "KAFKA_BOOTSTRAP_SERVERS": bootstrap, "KAFKA_PARTITIONS": 2,
        "REDIS_URL": redis_url, "MONGO_URI": mongo_uri,
        "REDIS_PARAMS": {"client_name": client_name},
        "REDIS_MAX_CONNECTIONS": MAX_CONNECTIONS, "KAFKA_SEED_CLAIMS": 1,
        "CRAWL_HEARTBEAT_INTERVAL": 0.5, "CRAWL_IDLE_TIMEOUT": 2,
        "METRICS_ENABLED": False,
        "RATELIMIT_RATE": 100, "RATELIMIT_BURST": 100,
        "PROXY_ENABLED": True, "PROXY_WHEN_NONE": "direct", "PROXY_REFRESH_INTERVAL": 0.1,
        "ALERT_INTERVAL": 0.1,
    }
    process = CrawlerProcess(settings, install_root_handler=True)
    crawler = process.create_crawler(PoolSpider)
    process.crawl(crawler, base=f"http://127.0.0.1:{server.server_port}",
                  redis_url=redis_url, client_name=client_name)
    process.start()
    registry = shared(crawler)
    assert crawler.spider is not None and crawler.stats is not None
    stats = crawler.stats.get_stats()
    spider: Any = crawler.spider
    print(json.dumps({
        "during": spider.during, "shared_client": spider.shared_client,
        "redis_built": registry.redis_built, "open": registry.open,
        "redis_after": redis_connections(redis_url, client_name),
        "items": stats.get("item_scraped_count", 0),
        "seeds_taken": stats.get("frontier/seeds_taken", 0),
        "filtered": stats.get("bloom/filtered", 0),
        "ratelimit_granted": stats.get("ratelimit/granted", 0),
        "proxy_direct": stats.get("proxy/direct", 0),
        "reason": stats.get("finish_reason"),
        "max_connections": MAX_CONNECTIONS,
    }))
    server.shutdown()


if __name__ == "__main__":
    main(*sys.argv[1:6])
