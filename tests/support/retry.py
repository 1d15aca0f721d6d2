"""BackoffRetryMiddleware built from settings, for its unit and integration tests."""

from __future__ import annotations

from typing import Any

from scrapy import Spider
from scrapy.utils.misc import build_from_crawler
from scrapy.utils.test import get_crawler

from crawler.middlewares.retry import BackoffRetryMiddleware

STOCK = "scrapy.downloadermiddlewares.retry.RetryMiddleware"
OURS = "crawler.middlewares.retry.BackoffRetryMiddleware"
ENABLED = {"RETRY_BACKOFF_ENABLED": True, "DOWNLOADER_MIDDLEWARES": {STOCK: None, OURS: 550}}
KAFKA = {"SCHEDULER": "crawler.frontier.scheduler.KafkaScheduler"}


class RetrySpider(Spider):
    name = "retry"


def make(**settings: Any) -> BackoffRetryMiddleware:
    """The middleware, enabled in place of Scrapy's, with *settings* on top."""
    crawler = get_crawler(RetrySpider, {**ENABLED, **settings})
    crawler.spider = RetrySpider.from_crawler(crawler)
    middleware: BackoffRetryMiddleware = build_from_crawler(BackoffRetryMiddleware, crawler)
    return middleware


def stats(middleware: BackoffRetryMiddleware) -> dict[str, Any]:
    return middleware.stats.get_stats()
