"""The crawl's scope: its spiders' allowed domains, plus the hosts ``scrapy seed`` added.

Both live in one Redis set (:attr:`~crawler.config.keys.CrawlKeys.scope`): a worker adds its
spider's ``allowed_domains`` when it opens, so that ``scrapy seed`` knows the crawl's scope,
and extends ``spider.allowed_domains`` with the set's members, so that Scrapy's offsite
filter (which reads that list at every request) lets the added hosts through. A seed whose
host is outside the scope even after a fresh read is refused with its reason, never
dropped in silence (:mod:`crawler.frontier.seeding`). A spider without ``allowed_domains``
allows everything, and so does its scope.
"""

from __future__ import annotations

import logging
from typing import Any
from urllib.parse import urlsplit

import redis.asyncio as aioredis

from crawler.config.keys import CrawlKeys
from crawler.connections.retry import RedisRetry, retry

logger = logging.getLogger(__name__)
REFRESH_INTERVAL = 5.0  # seconds between reads of the scope set


def in_domains(host: str, domains: Any) -> bool:
    """Whether *host* is one of *domains* or below one (Scrapy's offsite rule)."""
    host = host.lower()
    return any(host == d or host.endswith("." + d) for d in domains)


def host_of(url: str) -> str:
    try:
        return (urlsplit(url).hostname or "").lower()
    except ValueError:
        return ""


class CrawlScope:
    """The allowed domains of *spider*, shared through Redis (*client* None: not shared)."""

    def __init__(self, spider: Any, client: aioredis.Redis | None, crawl_id: str) -> None:
        self.spider, self.client = spider, client
        self.key = CrawlKeys(crawl_id).scope
        self.retry = RedisRetry("crawl scope")

    @property
    def limited(self) -> bool:
        return bool(getattr(self.spider, "allowed_domains", None))

    async def open(self) -> None:
        if self.client is None or not self.limited:
            return
        domains = [str(d).lower() for d in self.spider.allowed_domains if d]
        await retry(lambda: self.client.sadd(self.key, *domains),  # type: ignore[union-attr]
                    on_retry=self.retry.on_retry)
        await self.refresh()

    async def refresh(self) -> None:
        """Extend the spider's ``allowed_domains`` with the set's new members."""
        if self.client is None or not self.limited:
            return
        client = self.client
        members = await retry(lambda: client.smembers(self.key), on_retry=self.retry.on_retry)
        self.retry.succeeded()
        names = sorted(m.decode() if isinstance(m, bytes) else str(m) for m in members)
        allowed = list(self.spider.allowed_domains)
        new = [n for n in names if n not in allowed]
        if new:
            self.spider.allowed_domains = allowed + new
            logger.info("Crawl scope: %d hosts added by seeds (%s)", len(new),
                        ", ".join(new[:5]) + (" ..." if len(new) > 5 else ""))

    def admits(self, url: str) -> bool:
        return not self.limited or in_domains(host_of(url), self.spider.allowed_domains)

    async def admits_seed(self, url: str) -> bool:
        """Whether seed *url* is in scope, after a fresh read of the set if it seems not."""
        if self.admits(url):
            return True
        await self.refresh()
        return self.admits(url)
