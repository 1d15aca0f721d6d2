"""The crawl's scope: its spiders' allowed domains, plus the hosts ``scrapy seed`` added.

Both live in one Redis set (:attr:`~crawler.config.keys.CrawlKeys.scope`): a worker adds its
spider's ``allowed_domains`` when it opens, so that ``scrapy seed`` knows the crawl's scope,
and reads the set's members every ``REFRESH_INTERVAL`` seconds (writing back the hosts it knew
that a Redis which lost its state forgot); the offsite filter of
distributed mode (:class:`crawler.middlewares.scope.ScopeOffsiteMiddleware`) lets their
hosts through as well as the spider's own. A host is looked up by its suffixes in a set, so
a scope of a million hosts costs what one of ten does. A seed whose host is outside the
scope even after a fresh read is refused with its reason, never dropped in silence
(:mod:`crawler.frontier.seeding`). A spider without ``allowed_domains`` allows everything,
and so does its scope.
"""

from __future__ import annotations

import logging
from collections.abc import Collection
from typing import Any
from urllib.parse import urlsplit
from weakref import WeakKeyDictionary

import redis.asyncio as aioredis

from crawler.config.keys import CrawlKeys
from crawler.connections.retry import RedisRetry, retry

logger = logging.getLogger(__name__)
REFRESH_INTERVAL = 5.0  # seconds between reads of the scope set


def in_domains(host: str, domains: Collection[str]) -> bool:
    """Whether *host* is one of *domains* or below one (Scrapy's offsite rule)."""
    host = host.lower()
    while host:
        if host in domains:
            return True
        host = host.partition(".")[2]
    return False


_SCOPES: WeakKeyDictionary[Any, CrawlScope] = WeakKeyDictionary()


def scope_of(crawler: Any) -> CrawlScope | None:
    """The scope of *crawler*'s crawl, once its frontier has opened."""
    return _SCOPES.get(crawler)


def host_of(url: str) -> str:
    try:
        return (urlsplit(url).hostname or "").lower()
    except ValueError:
        return ""


class CrawlScope:
    """The allowed domains of *spider*, shared through Redis (*client* None: not shared)."""

    def __init__(self, spider: Any, client: aioredis.Redis | None, crawl_id: str, *,
                 crawler: Any = None) -> None:
        self.spider, self.client = spider, client
        self.key = CrawlKeys(crawl_id).scope
        self.retry = RedisRetry("crawl scope")
        self.added: set[str] = set()  # the set's members (seeds' hosts and every spider's)
        if crawler is not None:
            _SCOPES[crawler] = self

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
        names = {m.decode() if isinstance(m, bytes) else str(m) for m in members}
        lost = self.added - names  # nothing removes a host: Redis lost the set (issue 33)
        if lost:
            await retry(lambda: client.sadd(self.key, *lost), on_retry=self.retry.on_retry)
            logger.warning("Crawl scope: %d hosts were missing from Redis (its state lost?): "
                           "written back", len(lost))
            names |= lost
        new = names - self.added - set(self.spider.allowed_domains)
        self.added = names
        if new:
            shown = sorted(new)[:5]
            logger.info("Crawl scope: %d hosts added (%s)", len(new),
                        ", ".join(shown) + (" ..." if len(new) > 5 else ""))

    def admits_host(self, host: str) -> bool:
        return (not self.limited or in_domains(host, self.added)
                or in_domains(host, set(self.spider.allowed_domains)))

    def admits(self, url: str) -> bool:
        return self.admits_host(host_of(url))

    async def admits_seed(self, url: str) -> bool:
        """Whether seed *url* is in scope, after a fresh read of the set if it seems not."""
        if self.admits(url):
            return True
        await self.refresh()
        return self.admits(url)
