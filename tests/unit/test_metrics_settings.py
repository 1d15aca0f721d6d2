"""The Prometheus exporter's settings, checked before it serves anything (its server and a real
Prometheus: tests/integration/test_metrics.py)."""

from __future__ import annotations

from typing import Any

import pytest
from scrapy.exceptions import NotConfigured
from scrapy.utils.misc import build_from_crawler
from scrapy.utils.test import get_crawler
from support.metrics import MetricsSpider, build

from crawler.config.readers import SettingError
from crawler.extensions.metrics import MetricsExporter


def test_not_configured_unless_enabled() -> None:
    crawler = get_crawler(MetricsSpider, {})
    with pytest.raises(NotConfigured):
        build_from_crawler(MetricsExporter, crawler)


@pytest.mark.parametrize("port", ["abc", -1, 70000])
def test_a_bad_port_is_named(port: Any) -> None:
    with pytest.raises(SettingError, match="METRICS_PORT"):
        build(METRICS_PORT=port)
