"""One Redis pool and one MongoDB client per crawler (one per worker process), shared by
every component.

A component asks for a client when it opens (:func:`redis_for`, :func:`mongo_for`): the
first request builds it from the settings (:mod:`crawler.connections.options`; no I/O, it
connects on its first command), every later one returns the same client and counts one
more user. Each user gives it back once when it closes (:func:`release_redis`,
:func:`release_mongo`); the last one closes it, so the pool outlives every user, whatever
order Scrapy closes them in. Whatever is still open when the engine stops is closed then.

The Redis pool blocks (:func:`~crawler.connections.clients.redis_client`, with
``REDIS_PARAMS``: TLS and ACL options reach every component): a call that finds
all ``REDIS_MAX_CONNECTIONS`` connections busy waits for one to come back.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any
from weakref import WeakKeyDictionary

from scrapy import signals

from crawler.config.readers import SettingError, mask_url
from crawler.connections.clients import mongo_client_from, redis_from
from crawler.connections.options import MongoOptions, RedisOptions

if TYPE_CHECKING:
    import redis.asyncio as aioredis
    from pymongo import AsyncMongoClient
    from scrapy.crawler import Crawler
    from scrapy.settings import BaseSettings

    MongoClient = AsyncMongoClient[dict[str, Any]]

logger = logging.getLogger(__name__)


class SharedConnections:
    """The shared clients of one crawler and how many components use each."""

    def __init__(self, settings: BaseSettings) -> None:
        self._settings = settings
        self._redis_options: RedisOptions | None = None
        self._mongo_options: MongoOptions | None = None
        self._redis: aioredis.Redis | None = None
        self._mongo: MongoClient | None = None
        self.redis_users = self.mongo_users = 0
        self.redis_built = self.mongo_built = 0  # clients built in this crawler's life

    @property
    def redis_options(self) -> RedisOptions:
        if self._redis_options is None:
            self._redis_options = RedisOptions.from_settings(self._settings)
        return self._redis_options

    @property
    def mongo_options(self) -> MongoOptions:
        if self._mongo_options is None:
            self._mongo_options = MongoOptions.from_settings(self._settings)
        return self._mongo_options

    def redis(self) -> aioredis.Redis:
        """The crawler's Redis client (built on the first call); one more user."""
        if self._redis is None:
            o = self.redis_options
            if not o.url:
                raise SettingError("REDIS_URL", "a component that shares state needs a Redis URL")
            self._redis = redis_from(o)
            self.redis_built += 1
            logger.debug("Shared Redis pool for %s (at most %d connections)", mask_url(o.url),
                         o.max_connections)
        self.redis_users += 1
        return self._redis

    def mongo(self) -> MongoClient:
        """The crawler's MongoDB client (built on the first call); one more user."""
        if self._mongo is None:
            o = self.mongo_options
            if not o.uri:
                raise SettingError("MONGO_URI", "a component that stores documents needs it")
            self._mongo = mongo_client_from(o)
            self.mongo_built += 1
            logger.debug("Shared MongoDB client for %s", mask_url(o.uri))
        self.mongo_users += 1
        return self._mongo

    async def release_redis(self, client: aioredis.Redis) -> None:
        """One user of *client* is done; the last one closes it."""
        if client is not self._redis or self.redis_users <= 0:
            return
        self.redis_users -= 1
        if not self.redis_users:
            self._redis = None
            await client.aclose()

    async def release_mongo(self, client: MongoClient) -> None:
        """One user of *client* is done; the last one closes it."""
        if client is not self._mongo or self.mongo_users <= 0:
            return
        self.mongo_users -= 1
        if not self.mongo_users:
            self._mongo = None
            await client.close()

    @property
    def open(self) -> bool:
        """Whether a shared client is open (some user has not given it back)."""
        return self._redis is not None or self._mongo is not None

    async def close(self) -> None:
        """Close both clients, whoever still holds them (the engine stopped)."""
        redis, self._redis = self._redis, None
        mongo, self._mongo = self._mongo, None
        self.redis_users = self.mongo_users = 0
        if redis is not None:
            await redis.aclose()
        if mongo is not None:
            await mongo.close()


_REGISTRY: WeakKeyDictionary[Crawler, SharedConnections] = WeakKeyDictionary()


def shared(crawler: Crawler) -> SharedConnections:
    """The shared clients of *crawler* (closed when its engine stops)."""
    connections = _REGISTRY.get(crawler)
    if connections is None:
        connections = _REGISTRY[crawler] = SharedConnections(crawler.settings)
        crawler.signals.connect(connections.close, signal=signals.engine_stopped)
    return connections


def redis_for(crawler: Crawler) -> aioredis.Redis:
    """*crawler*'s Redis client; give it back with :func:`release_redis`."""
    return shared(crawler).redis()


async def release_redis(crawler: Crawler, client: aioredis.Redis) -> None:
    await shared(crawler).release_redis(client)


def mongo_for(crawler: Crawler) -> MongoClient:
    """*crawler*'s MongoDB client; give it back with :func:`release_mongo`."""
    return shared(crawler).mongo()


async def release_mongo(crawler: Crawler, client: MongoClient) -> None:
    await shared(crawler).release_mongo(client)
