"""RateLimitMiddleware without Redis: the single-node (in-memory) limiter, its settings and
their bounds (the shared bucket in Redis is tests/integration/test_ratelimit_redis.py)."""

from __future__ import annotations

import time
from typing import Any

import pytest
from scrapy import Request
from scrapy.exceptions import NotConfigured
from scrapy.settings import Settings
from scrapy.utils.misc import build_from_crawler
from scrapy.utils.test import get_crawler
from support.ratelimit import CLOCK as _CLOCK
from support.ratelimit import HOST, RateSpider, opened, run

from crawler.config.readers import SettingError
from crawler.middlewares.ratelimit import RateLimitMiddleware
from crawler.politeness.ratelimiter import RateLimitConfig
from crawler.politeness.tokenbucket import Limit


def test_single_node_middleware_sleeps_then_proceeds() -> None:
    settings = {"RATELIMIT_ENABLED": True, "RATELIMIT_RATE": 10, "RATELIMIT_BURST": 1}

    async def scenario() -> None:
        async with opened(settings) as mw:
            assert mw.limiter is not None and not mw.delays
            start = time.monotonic()
            assert await mw.process_request(Request(f"https://{HOST}/1")) is None
            assert await mw.process_request(Request(f"https://{HOST}/2")) is None
            # the second one slept until its slot, 0.1 s after the first token (a lower
            # bound: a slow machine only makes it later); the ceiling catches a wrong unit
            assert 0.1 - _CLOCK <= time.monotonic() - start < 5
            assert await mw.process_request(Request("https://other.example/")) is None
            stats = mw.stats.get_stats()
            assert (stats["ratelimit/granted"], stats["ratelimit/waits"]) == (3, 1)

    run(scenario)


def test_switched_off_by_default() -> None:
    with pytest.raises(NotConfigured):
        build_from_crawler(RateLimitMiddleware, get_crawler(RateSpider, {}))


@pytest.mark.parametrize(("name", "value"), [
    ("RATELIMIT_RATE", -1), ("RATELIMIT_RATE", "fast"), ("RATELIMIT_RATE", float("inf")),
    ("RATELIMIT_BURST", 0.5), ("RATELIMIT_MAX_WAIT", 0), ("RATELIMIT_DECREASE_FACTOR", 1.5),
    ("RATELIMIT_RECOVER_STEP", 0), ("RATELIMIT_RECOVER_AFTER", 0), ("RATELIMIT_MIN_RATE", -1),
    ("RATELIMIT_DECREASE_ON", "429,abc"), ("RATELIMIT_DECREASE_ON", [42]),
    ("RATELIMIT_DOMAINS", {"a.example": {"rate": 0}}),
    ("RATELIMIT_DOMAINS", {"a.example": {"speed": 2}}),
    ("RATELIMIT_STATE_TTL", -1), ("RATELIMIT_ADAPTIVE", "maybe"),
])
def test_bad_settings_are_named_at_start_up(name: str, value: Any) -> None:
    crawler = get_crawler(RateSpider, {"RATELIMIT_ENABLED": True, name: value})
    with pytest.raises(SettingError, match=name):
        build_from_crawler(RateLimitMiddleware, crawler)


def test_domain_settings_are_per_host() -> None:
    settings = Settings({"RATELIMIT_DOMAINS": {"Shop.Example.": {"rate": 2}}})
    cfg = RateLimitConfig.from_settings(settings, "rate")
    assert cfg.limit("shop.example") == Limit(2.0, 2.0)
    assert cfg.limit("www.shop.example") is cfg.default is None  # no RATELIMIT_RATE: none
    with pytest.raises(SettingError, match="RATELIMIT_DOMAINS"):
        RateLimitConfig.from_settings(Settings({"RATELIMIT_DOMAINS": {"a.example": {}}}), "r")
    cfg = RateLimitConfig.from_settings(Settings({"RATELIMIT_RATE": 1.0, "RATELIMIT_DOMAINS": {
        "a.example": {"burst": 3}}}), "rate")
    assert cfg.limit("a.example") == Limit(1.0, 3.0)
    assert cfg.limit("b.example") == cfg.default == Limit(1.0, 2.0)
