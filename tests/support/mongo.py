"""MongoPipeline built from settings, for its unit and integration tests."""

from __future__ import annotations

from typing import Any

from scrapy import Spider
from scrapy.utils.misc import build_from_crawler
from scrapy.utils.test import get_crawler

from crawler.pipelines.mongo import MongoPipeline


class ItemsSpider(Spider):
    name = "items"


def make_pipeline(uri: str, crawl_id: str, **settings: Any) -> MongoPipeline:
    """A pipeline writing to *uri* for *crawl_id* (not opened); ``pipeline.crawler`` is set."""
    crawler = get_crawler(ItemsSpider, {"MONGO_URI": uri, "CRAWL_ID": crawl_id, **settings})
    pipeline: MongoPipeline = build_from_crawler(MongoPipeline, crawler)
    pipeline.crawler = crawler  # type: ignore[attr-defined]  # for the tests' stats
    return pipeline
