"""The Prometheus exporter's settings, checked before it serves anything (its server and a real
Prometheus: tests/integration/test_metrics.py)."""

from __future__ import annotations

from typing import Any

import pytest
from scrapy import Spider
from scrapy.exceptions import NotConfigured
from scrapy.utils.misc import build_from_crawler
from scrapy.utils.test import get_crawler

from crawler.config.readers import SettingError
from crawler.extensions.metrics import MetricsExporter

SERVICE_VARS = ("KAFKA_BOOTSTRAP_SERVERS", "REDIS_URL", "MONGO_URI", "MONGO_DATABASE", "CRAWL_ID")


class MetricsSpider(Spider):
    name = "metrics"


@pytest.fixture(autouse=True)
def _no_services_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in SERVICE_VARS:
        monkeypatch.delenv(name, raising=False)


def build(**settings: Any) -> tuple[MetricsExporter, Spider]:
    # no core extensions: the signals fired below reach the exporter alone
    crawler = get_crawler(MetricsSpider, {"METRICS_ENABLED": True, "EXTENSIONS_BASE": {},
                                          **settings})
    exporter = build_from_crawler(MetricsExporter, crawler)
    return exporter, MetricsSpider.from_crawler(crawler)


def test_not_configured_unless_enabled() -> None:
    crawler = get_crawler(MetricsSpider, {})
    with pytest.raises(NotConfigured):
        build_from_crawler(MetricsExporter, crawler)


@pytest.mark.parametrize("port", ["abc", -1, 70000])
def test_a_bad_port_is_named(port: Any) -> None:
    with pytest.raises(SettingError, match="METRICS_PORT"):
        build(METRICS_PORT=port)
