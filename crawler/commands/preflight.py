"""A user's mistake at start-up, told in one line (``scrapy crawl``, scrapyd jobs).

The mistakes are a missing or partial configuration and a malformed setting
(:class:`~crawler.config.readers.SettingError`), a missing spider argument
(:class:`~crawler.config.readers.SpiderArgumentError`) and a service that cannot be reached
(:class:`~crawler.connections.clients.ServiceUnavailable`).

:func:`preflight` checks the settings and the services *before* Scrapy opens the
engine. Scrapy 2.13+ does not close an engine cleanly whose scheduler failed to build
or open: ``RuntimeError: Engine slot not assigned`` (the scheduler's ``from_crawler``
raised), ``Scraper slot not assigned`` and an ``AssertionError`` of ``CoreStats``
(its ``open`` raised) would follow, and hide, the real error. A mistake found by the
preflight ends the command before any of that starts.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
from collections.abc import Coroutine
from typing import Any

from pymongo import AsyncMongoClient
from pymongo.errors import PyMongoError
from scrapy.settings import BaseSettings

from crawler.addon import distributed
from crawler.config import readers as config
from crawler.config.readers import SettingError, SpiderArgumentError
from crawler.connections import clients as connection
from crawler.connections.clients import ServiceUnavailable
from crawler.connections.kafka_logs import CLIENT_LEVELS
from crawler.connections.options import MongoOptions
from crawler.dedup.backend import load_backend
from crawler.frontier import crawllife
from crawler.frontier.clients import ensure_crawl_topics
from crawler.frontier.config import FrontierConfig

logger = logging.getLogger(__name__)


#: the errors that are a user's mistake: one line, no traceback
MISTAKES: tuple[type[Exception], ...] = (SettingError, SpiderArgumentError, ServiceUnavailable)

def mistake_in(exc: BaseException) -> Exception | None:
    """The user's mistake that *exc* is, or that it was raised while handling, else None.

    Scrapy may raise a second error while cleaning up after the first: the first
    one is the mistake to tell.
    """
    seen: set[int] = set()
    found: Exception | None = None
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, MISTAKES):
            found = current
        current = current.__context__
    return found


def one_line(mistake: Exception) -> str:
    """The line that tells *mistake*: what is wrong, naming the setting or argument."""
    text = " ".join(str(mistake).split())
    if isinstance(mistake, ServiceUnavailable):
        text = f"{text.rstrip('.')}; {mistake.hint}"
    return f"Cannot start the crawl: {text}"


def preflight(settings: BaseSettings, spider_name: str) -> None:
    """Check the settings and reach every service of distributed mode.

    Blocking (a few seconds at most, ``CONNECT_TIMEOUT``): call it before the reactor
    runs. Raises one of :data:`MISTAKES`; does nothing in single-node mode.
    """
    if not distributed(settings):
        return
    cfg = FrontierConfig.from_settings(settings, spider_name)  # what the scheduler reads
    load_backend(settings)  # and its dedup backend (FRONTIER_DEDUP_CLASS, BLOOM_*)
    crawllife.state_ttl(settings)
    config.get_int(settings, "MALLOC_ARENA_MAX", minimum=0)  # the add-on reads it later
    config.get_choice(settings, "CLIENT_LOG_LEVEL", CLIENT_LEVELS)  # and this one
    mongo = MongoOptions.from_settings(settings)
    with connection.quiet_client_logs():
        _run_in_thread(_reach_services(cfg, mongo))


async def _reach_services(cfg: FrontierConfig, mongo: MongoOptions) -> None:
    """Reach Redis, MongoDB and Kafka at once; raise the first failure in settings order."""
    results = await asyncio.gather(
        asyncio.to_thread(_reach_kafka, cfg), _reach_redis(cfg), _reach_mongo(mongo),
        return_exceptions=True)
    for result in results:
        if isinstance(result, BaseException):
            raise result


def _reach_kafka(cfg: FrontierConfig) -> None:
    """Reach the brokers and create the crawl's topics (the scheduler's open takes the
    answer): a user whose ACLs refuse them (or a wrong login) is told here, in the one
    start-up line, not in the scheduler's open and the engine's failures that follow it."""
    ensure_crawl_topics(cfg)


async def _reach_redis(cfg: FrontierConfig) -> None:
    client = connection.redis_from(cfg.redis)  # SettingError: a bad REDIS_URL or REDIS_PARAMS
    try:
        await connection.check_redis(client, cfg.redis.url)
    finally:
        await client.aclose()


async def _reach_mongo(mongo: MongoOptions) -> None:
    client = await _mongo_client(mongo)
    try:
        await connection.check_mongo(client, mongo.uri)
    finally:
        await client.close()


async def _mongo_client(mongo: MongoOptions) -> AsyncMongoClient[dict[str, Any]]:
    """The client of *mongo*; a URI or an option pymongo refuses is the setting's mistake
    (building touches no network: a client built to find the culprit is closed at once)."""
    try:
        return connection.mongo_client_from(mongo)  # MONGO_TIMEOUT bounds the ping
    except (PyMongoError, TypeError, ValueError, OSError) as exc:  # InvalidURI, no CA file
        error = exc
    try:
        await connection.mongo_client(mongo.uri, connect_timeout=mongo.connect_timeout).close()
    except (PyMongoError, TypeError, ValueError, OSError):
        raise SettingError("MONGO_URI", f"not a usable MongoDB URI ({error})") from error
    raise SettingError("MONGO_PARAMS", f"not usable MongoClient options ({error})") from error


def _run_in_thread(coro: Coroutine[Any, Any, None]) -> None:
    """Run *coro* on an event loop of its own, in a thread: the reactor's loop is not
    running yet, and must not be run or replaced here."""
    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="preflight") as pool:
        pool.submit(asyncio.run, coro).result()
