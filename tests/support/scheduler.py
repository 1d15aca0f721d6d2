"""A KafkaScheduler built from settings (not started: no broker is reached)."""

from __future__ import annotations

from typing import Any

from scrapy import Spider
from scrapy.utils.test import get_crawler

from crawler.frontier.scheduler import KafkaScheduler


class WiringSpider(Spider):
    name = "wiring"


def scheduler_for(redis_url: str, crawl_id: str, **settings: Any) -> KafkaScheduler:
    """The scheduler of a crawler on *redis_url* and a broker address nothing listens on."""
    crawler = get_crawler(WiringSpider, {"KAFKA_BOOTSTRAP_SERVERS": "127.0.0.1:1",
                                         "REDIS_URL": redis_url, "CRAWL_ID": crawl_id,
                                         **settings})
    return KafkaScheduler.from_crawler(crawler)
