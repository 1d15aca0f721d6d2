"""The one place that builds clients for Redis, Kafka and MongoDB.

Builders never touch the network; ``check_*`` helpers do, with short timeouts,
and raise :class:`ServiceUnavailable` naming the setting and the address.
"""

from __future__ import annotations

import logging
from typing import Any

import redis.asyncio as aioredis
from pymongo import AsyncMongoClient

from crawler.config import mask_url

logger = logging.getLogger(__name__)


class ServiceUnavailable(RuntimeError):
    """A service could not be reached at start-up."""

    def __init__(self, setting: str, address: str, error: BaseException | str) -> None:
        super().__init__(
            f"Cannot reach the service of {setting} at {mask_url(address)}: {error}"
        )
        self.setting = setting


def redis_client(
    url: str, params: dict[str, Any] | None = None, *, connect_timeout: float = 5.0
) -> aioredis.Redis:
    """An asyncio Redis client for *url* (``REDIS_URL``) with ``REDIS_PARAMS``."""
    options: dict[str, Any] = {
        "socket_connect_timeout": connect_timeout,
        "socket_timeout": max(connect_timeout, 10.0),
        "health_check_interval": 30,
    }
    options.update(params or {})
    return aioredis.Redis.from_url(url, **options)


async def check_redis(client: aioredis.Redis, url: str) -> None:
    try:
        await client.ping()
    except Exception as exc:
        raise ServiceUnavailable("REDIS_URL", url, exc) from exc


def mongo_client(
    uri: str, *, connect_timeout: float = 5.0, write_concern: str | int = "majority",
    journal: bool = True,
) -> AsyncMongoClient[dict[str, Any]]:
    """An asyncio MongoDB client for *uri* (``MONGO_URI``)."""
    return AsyncMongoClient(
        uri,
        serverSelectionTimeoutMS=int(connect_timeout * 1000),
        connectTimeoutMS=int(connect_timeout * 1000),
        w=write_concern,
        journal=journal,
        connect=False,
    )


async def check_mongo(client: AsyncMongoClient[dict[str, Any]], uri: str) -> None:
    try:
        await client.admin.command("ping")
    except Exception as exc:
        raise ServiceUnavailable("MONGO_URI", uri, exc) from exc


def kafka_common(bootstrap: str, connect_timeout: float) -> dict[str, Any]:
    """Options every kafka-python client of the crawler shares."""
    return {
        "bootstrap_servers": [s.strip() for s in bootstrap.split(",") if s.strip()],
        "request_timeout_ms": max(int(connect_timeout * 1000), 10000),
        "api_version_auto_timeout_ms": int(connect_timeout * 1000),
        "reconnect_backoff_max_ms": 2000,
    }
