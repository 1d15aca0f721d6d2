"""RateLimitMiddleware without Redis: the single-node (in-memory) limiter, its settings and
their bounds (the shared bucket in Redis is tests/integration/test_ratelimit_redis.py)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import pytest
import redis.asyncio as aioredis
from scrapy import Request, Spider
from scrapy.exceptions import NotConfigured
from scrapy.settings import Settings
from scrapy.utils.misc import build_from_crawler
from scrapy.utils.test import get_crawler

from crawler.config.readers import SettingError
from crawler.middlewares.ratelimit import RateLimitMiddleware
from crawler.politeness.ratelimiter import RateLimitConfig, RedisLimiter
from crawler.politeness.tokenbucket import Limit

HOST = "shop.example"


class RateSpider(Spider):
    name = "rate"


@pytest.fixture(autouse=True)
def _no_services_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """A REDIS_URL in the environment would share the limiter in Redis: not here."""
    for name in ("REDIS_URL", "CRAWL_ID"):
        monkeypatch.delenv(name, raising=False)


async def cleanup(client: aioredis.Redis, crawl_id: str) -> None:
    keys = [k async for k in client.scan_iter(match=f"{{{crawl_id}}}:*")]
    if keys:
        await client.delete(*keys)


def run(body: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(body())  # type: ignore[arg-type]


_CLOCK = 0.002  # seconds: Redis TIME, time.time() and the event loop's clock may differ by this


@asynccontextmanager
async def opened(settings: dict[str, Any]) -> AsyncIterator[RateLimitMiddleware]:
    crawler = get_crawler(RateSpider, settings)
    middleware = build_from_crawler(RateLimitMiddleware, crawler)
    await middleware.spider_opened()
    try:
        yield middleware
    finally:
        if isinstance(middleware.limiter, RedisLimiter):
            await cleanup(middleware.limiter.client, middleware.cfg.crawl_id)
        await middleware.spider_closed()


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
    ("RATELIMIT_RATE", 0), ("RATELIMIT_RATE", "fast"), ("RATELIMIT_RATE", float("inf")),
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
    assert cfg.limit("www.shop.example") == cfg.default == Limit(1.0, 2.0)
