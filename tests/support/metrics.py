"""The Prometheus exporter built alone (no core extensions), for its settings and series tests."""

from __future__ import annotations

from typing import Any

from scrapy import Spider
from scrapy.utils.misc import build_from_crawler
from scrapy.utils.test import get_crawler

from crawler.extensions.metrics import MetricsExporter


class MetricsSpider(Spider):
    name = "metrics"


def build(**settings: Any) -> tuple[MetricsExporter, Spider]:
    """An enabled exporter with *settings*, and its spider."""
    # no core extensions: the signals fired in the tests reach the exporter alone
    crawler = get_crawler(MetricsSpider, {"METRICS_ENABLED": True, "EXTENSIONS_BASE": {},
                                          **settings})
    exporter = build_from_crawler(MetricsExporter, crawler)
    return exporter, MetricsSpider.from_crawler(crawler)
