"""A crawl with every component that talks to Redis or MongoDB switched on; run by
test_shared_connections.py in its own process (support.connections.run_crawl).

Usage: ``PYTHONPATH=tests python shared_crawl.py REDIS_URL MONGO_URI CRAWL_ID CLIENT_NAME
APP_NAME``. It serves a few pages (one of them always 500, whose failure is recorded in
MongoDB), counts the Redis connections named CLIENT_NAME while the crawl runs, and prints one
JSON line: those counts, the shared registry's view and the connections left once the crawl ended.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from typing import Any

import pymongo
from scrapy import Request, Spider
from scrapy.crawler import CrawlerProcess
from scrapy.http import Response
from support.connections import Pages, redis_connections, serve

from crawler.connections.shared import shared

PAGES = 6


class SharedPages(Pages):
    def page(self, path: str) -> tuple[int, bytes]:
        return 500 if path == "/broken" else 200, b"<html><body>page</body></html>"


def mongo_connections(uri: str, app: str) -> int:
    with pymongo.MongoClient(uri, appname="probe", serverSelectionTimeoutMS=5000) as admin:
        ops = admin.admin.aggregate([{"$currentOp": {"allUsers": True, "idleConnections": True}},
                                     {"$match": {"appName": app}}])
        return len(list(ops))


class SharedSpider(Spider):
    name = "shared"

    def __init__(self, base: str, redis_url: str, client_name: str, mongo_uri: str, app: str,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.base, self.redis_url, self.client_name = base, redis_url, client_name
        self.mongo_uri, self.app = mongo_uri, app
        self.during: list[int] = []
        self.mongo_during: list[int] = []

    async def start(self) -> Any:
        for number in range(PAGES):
            yield Request(f"{self.base}/page/{number}")
        yield Request(f"{self.base}/broken")

    def parse(self, response: Response) -> Iterator[dict[str, Any]]:
        self.during.append(redis_connections(self.redis_url, self.client_name))
        self.mongo_during.append(mongo_connections(self.mongo_uri, self.app))
        yield {"url": response.url, "n": len(self.during)}


def main(redis_url: str, mongo_uri: str, crawl_id: str, client_name: str, app: str) -> None:
    server = serve(SharedPages)
    settings = {
        "TWISTED_REACTOR": "twisted.internet.asyncioreactor.AsyncioSelectorReactor",
        "ADDONS": {}, "LOG_LEVEL": "INFO", "TELNETCONSOLE_ENABLED": False,
        "CONCURRENT_REQUESTS": 4, "CRAWL_ID": crawl_id,
        "REDIS_URL": redis_url, "REDIS_PARAMS": {"client_name": client_name},
        "REDIS_MAX_CONNECTIONS": 2, "MONGO_URI": mongo_uri,
        "ITEM_PIPELINES": {"crawler.pipelines.mongo.MongoPipeline": 300},
        "RATELIMIT_ENABLED": True, "RATELIMIT_RATE": 100, "RATELIMIT_BURST": 100,
        "PROXY_ENABLED": True, "PROXY_WHEN_NONE": "direct", "PROXY_REFRESH_INTERVAL": 0.1,
        "RETRY_BACKOFF_ENABLED": True, "RETRY_TIMES": 1, "RETRY_BACKOFF_BASE": 0.01,
        "RETRY_BACKOFF_MAX": 0.02,
        "ALERTS_ENABLED": True, "ALERT_INTERVAL": 0.1,
        "EXTENSIONS": {"crawler.extensions.alerts.AlertsExtension": 510},
        "DOWNLOADER_MIDDLEWARES": {
            "scrapy.downloadermiddlewares.retry.RetryMiddleware": None,
            "crawler.middlewares.retry.BackoffRetryMiddleware": 550,
            "crawler.middlewares.ratelimit.RateLimitMiddleware": 560,
            "crawler.middlewares.proxies.ProxyPoolMiddleware": 610,
        },
    }
    process = CrawlerProcess(settings, install_root_handler=True)
    crawler = process.create_crawler(SharedSpider)
    process.crawl(crawler, base=f"http://127.0.0.1:{server.server_port}",
                  redis_url=redis_url, client_name=client_name, mongo_uri=mongo_uri, app=app)
    process.start()
    registry = shared(crawler)
    assert crawler.spider is not None and crawler.stats is not None
    stats = crawler.stats.get_stats()
    print(json.dumps({
        "during": crawler.spider.during,  # type: ignore[attr-defined]
        "mongo_during": crawler.spider.mongo_during,  # type: ignore[attr-defined]
        "redis_built": registry.redis_built, "mongo_built": registry.mongo_built,
        "open": registry.open,
        "redis_after": redis_connections(redis_url, client_name),
        "mongo_after": mongo_connections(mongo_uri, app),
        "items": stats.get("item_scraped_count", 0),
        "failures_stored": stats.get("retry/failures_stored", 0),
        "ratelimit_granted": stats.get("ratelimit/granted", 0),
        "proxy_direct": stats.get("proxy/direct", 0),
    }))
    server.shutdown()


if __name__ == "__main__":
    main(*sys.argv[1:6])
