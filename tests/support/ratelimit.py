"""RateLimitMiddleware opened on one asyncio loop, and the crawl's rate-limit keys removed
after it, for the single-node and the shared (Redis) tests."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import redis.asyncio as aioredis
from scrapy import Spider
from scrapy.utils.misc import build_from_crawler
from scrapy.utils.test import get_crawler

from crawler.middlewares.ratelimit import RateLimitMiddleware
from crawler.politeness.ratelimiter import RedisLimiter

HOST = "shop.example"
CLOCK = 0.002  # seconds: Redis TIME, time.time() and the event loop's clock may differ by this


class RateSpider(Spider):
    name = "rate"


async def cleanup(client: aioredis.Redis, crawl_id: str) -> None:
    """Delete every key of *crawl_id*."""
    keys = [k async for k in client.scan_iter(match=f"{{{crawl_id}}}:*")]
    if keys:
        await client.delete(*keys)


def run(body: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(body())  # type: ignore[arg-type]


@asynccontextmanager
async def opened(settings: dict[str, Any]) -> AsyncIterator[RateLimitMiddleware]:
    """The middleware of a crawler with *settings*, opened; its keys deleted and closed after."""
    crawler = get_crawler(RateSpider, settings)
    middleware = build_from_crawler(RateLimitMiddleware, crawler)
    await middleware.spider_opened()
    try:
        yield middleware
    finally:
        if isinstance(middleware.limiter, RedisLimiter):
            await cleanup(middleware.limiter.client, middleware.cfg.crawl_id)
        await middleware.spider_closed()
