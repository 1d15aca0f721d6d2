"""The shared proxy store's settings: it needs REDIS_URL (no Redis; the store itself is
tests/integration/test_proxy_shared.py)."""

from __future__ import annotations

import pytest
from scrapy import Spider
from scrapy.utils.misc import build_from_crawler
from scrapy.utils.test import get_crawler

from crawler.config.readers import SettingError
from crawler.politeness.proxystore import RedisProxyStore


class ProxySpider(Spider):
    name = "proxies"


def test_the_store_needs_redis_url(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("REDIS_URL", raising=False)
    crawler = get_crawler(ProxySpider, {"PROXY_STORE": "crawler.politeness.RedisProxyStore"})
    with pytest.raises(SettingError, match="REDIS_URL"):
        build_from_crawler(RedisProxyStore, crawler)
