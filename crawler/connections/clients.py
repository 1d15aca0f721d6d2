"""The one place that builds clients for Redis, Kafka and MongoDB.

Builders never touch the network; ``check_*`` helpers do, with short timeouts,
and raise :class:`ServiceUnavailable` naming the setting and the address.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from typing import Any

import redis
import redis.asyncio as aioredis
from pymongo import AsyncMongoClient
from pymongo.errors import OperationFailure
from redis.exceptions import RedisError

from crawler.config.readers import SettingError
from crawler.connections.kafka_clients import (
    DELIVERY_TIMEOUT,
    PRODUCER_BATCH_SIZE,
    Kafka,
    check_kafka,
    committed_offsets,
    ensure_topics,
    kafka_admin,
    kafka_common,
    kafka_config,
    kafka_consumer,
    kafka_options,
    kafka_producer,
    kafka_security,
    request_timeout_ms,
)
from crawler.connections.options import MongoOptions, RedisOptions
from crawler.connections.unavailable import ServiceUnavailable, scrub

logger = logging.getLogger(__name__)

# The Kafka builders live in crawler.connections.kafka_clients; this module is their one face.
__all__ = [
    "CLIENT_LOGGERS", "DELIVERY_TIMEOUT", "PRODUCER_BATCH_SIZE", "REDIS_MAX_CONNECTIONS", "Kafka",
    "ServiceUnavailable", "check_kafka", "committed_offsets", "ensure_topics", "kafka_admin",
    "kafka_common", "kafka_config", "kafka_consumer", "kafka_options", "kafka_producer",
    "kafka_security", "mongo_client", "mongo_error", "mongo_hint", "quiet_client_logs",
    "redis_client", "redis_from", "redis_options", "redis_sync_client", "request_timeout_ms",
    "scrub",
]


#: connections one Redis client opens at most (``REDIS_MAX_CONNECTIONS``)
REDIS_MAX_CONNECTIONS = 50


def redis_options(
    params: dict[str, Any] | None = None, *, connect_timeout: float = 5.0,
    max_connections: int = REDIS_MAX_CONNECTIONS,
) -> dict[str, Any]:
    """The pool's keyword arguments: the crawler's timeouts, then ``REDIS_PARAMS`` over them.

    ``REDIS_PARAMS`` holds redis-py's connection options as they are: ``username`` and
    ``password`` (if not in the URL), ``ssl_ca_certs``, ``ssl_certfile``, ``ssl_keyfile``,
    ``ssl_cert_reqs`` ("required", "optional", "none"), ``ssl_check_hostname``... A
    ``rediss://`` URL turns TLS on.
    """
    options: dict[str, Any] = {
        "socket_connect_timeout": connect_timeout,
        "socket_timeout": max(connect_timeout, 10.0),
        "health_check_interval": 30,
        "max_connections": max_connections,
    }
    options.update(params or {})
    options.setdefault("timeout", options["socket_timeout"])  # waiting for a free connection
    return options


def redis_client(
    url: str, params: dict[str, Any] | None = None, *, connect_timeout: float = 5.0,
    max_connections: int = REDIS_MAX_CONNECTIONS,
) -> aioredis.Redis:
    """An asyncio Redis client for *url* (``REDIS_URL``) with ``REDIS_PARAMS``.

    Its pool blocks: a call that finds all *max_connections* connections busy waits
    for one to come back instead of failing with ``MaxConnectionsError`` ("Too many
    connections"), which callers would take for a Redis outage. It waits at most the
    socket timeout, so a connection that never comes back still ends in an error.
    """
    options = redis_options(params, connect_timeout=connect_timeout,
                            max_connections=max_connections)
    pool = _pool(aioredis.BlockingConnectionPool, url, options)
    return aioredis.Redis.from_pool(pool)  # the client owns the pool: aclose() closes it


def redis_from(options: RedisOptions) -> aioredis.Redis:
    """:func:`redis_client` for the settings read into *options*."""
    return redis_client(options.url, options.params, connect_timeout=options.connect_timeout,
                        max_connections=options.max_connections)


def redis_sync_client(
    url: str, params: dict[str, Any] | None = None, *, connect_timeout: float = 5.0,
    max_connections: int = REDIS_MAX_CONNECTIONS,
) -> redis.Redis:
    """A blocking client, with the same options as :func:`redis_client` (scripts, tools)."""
    options = redis_options(params, connect_timeout=connect_timeout,
                            max_connections=max_connections)
    return redis.Redis.from_pool(_pool(redis.BlockingConnectionPool, url, options))


def _pool(pool_class: Any, url: str, options: dict[str, Any]) -> Any:
    """*pool_class* for *url*; one connection object is built (no I/O), so that an option of
    ``REDIS_PARAMS`` redis-py does not know, or a bad ``ssl_cert_reqs``, fails here."""
    try:
        pool = pool_class.from_url(url, **options)
    except ValueError as exc:
        raise SettingError("REDIS_URL", f"not a usable Redis URL ({scrub(str(exc), url)})"
                           ) from None
    try:
        pool.connection_class(**pool.connection_kwargs)
        return pool
    except (TypeError, ValueError, RedisError) as exc:
        raise SettingError("REDIS_PARAMS", f"not usable with this REDIS_URL ({exc})") from None


async def check_redis(client: aioredis.Redis, url: str) -> None:
    try:
        await client.ping()
    except Exception as exc:
        raise ServiceUnavailable("REDIS_URL", url, exc) from exc


def mongo_client(
    uri: str, *, params: dict[str, Any] | None = None, connect_timeout: float = 5.0,
    write_concern: str | int = "majority", journal: bool = True, timeout: float | None = None,
    write_timeout: float | None = None,
) -> AsyncMongoClient[dict[str, Any]]:
    """An asyncio MongoDB client for *uri* (``MONGO_URI``) with *params* (``MONGO_PARAMS``).

    *uri* goes to pymongo untouched: several hosts, ``replicaSet``, ``mongodb+srv://`` (its
    DNS lookup happens on the first operation), ``authSource``, ``tls``... The options of
    the crawler's own settings win over *params*
    (:func:`~crawler.connections.options.mongo_params` refuses them there).

    *timeout* (seconds, ``MONGO_TIMEOUT``) bounds the wait for any reply of the server
    (``socketTimeoutMS``), *write_timeout* (``MONGO_WRITE_TIMEOUT``) the server's wait for
    the write concern (``wtimeoutMS``); ``None`` leaves them unbounded.
    """
    options: dict[str, Any] = dict(params or {})
    if timeout is not None:
        options["socketTimeoutMS"] = int(timeout * 1000)
    if write_timeout is not None:
        options["wtimeoutMS"] = int(write_timeout * 1000)
    options.update(serverSelectionTimeoutMS=int(connect_timeout * 1000),
                   connectTimeoutMS=int(connect_timeout * 1000), w=write_concern,
                   journal=journal, connect=False)
    return AsyncMongoClient(uri, **options)


def mongo_client_from(options: MongoOptions) -> AsyncMongoClient[dict[str, Any]]:
    """:func:`mongo_client` with every option of *options*: its timeouts included, so that
    no call (the start-up ping among them) waits on a silent server for ever."""
    return mongo_client(options.uri, params=options.params,
                        connect_timeout=options.connect_timeout,
                        write_concern=options.write_concern, journal=options.journal,
                        timeout=options.timeout, write_timeout=options.write_timeout)


async def check_mongo(client: AsyncMongoClient[dict[str, Any]], uri: str) -> None:
    try:
        await client.admin.command("ping")
    except Exception as exc:
        raise ServiceUnavailable("MONGO_URI", uri, mongo_error(exc), mongo_hint(exc)) from exc


def mongo_hint(exc: BaseException) -> str | None:
    """What to check when the server refused the crawler (a wrong password, a TLS failure)."""
    if isinstance(exc, OperationFailure) and exc.code == 18:
        return "check the user, password and authSource of MONGO_URI (or MONGO_PARAMS)"
    if "SSL" in str(exc) or "TLS" in str(exc):
        return "check the TLS options (tls, tlsCAFile...) of MONGO_URI or MONGO_PARAMS"
    return None


def mongo_error(exc: BaseException) -> str:
    """*exc* of pymongo in a few words: the server's message and code (a wrong password:
    ``Authentication failed. (code 18 AuthenticationFailed)``), or the first part of a server
    selection error (pymongo appends its whole topology description)."""
    if isinstance(exc, OperationFailure):
        details = exc.details or {}
        name = details.get("codeName")
        return f"{details.get('errmsg', exc)} (code {exc.code}{' ' + name if name else ''})"
    return str(exc).split(", Topology Description:")[0]


#: the loggers of the client libraries, which log every failed connection attempt
CLIENT_LOGGERS = ("kafka", "pymongo", "redis")


@contextlib.contextmanager
def quiet_client_logs() -> Iterator[None]:
    """Silence the client libraries' connection chatter while a start-up check runs.

    A check that fails says so in one :class:`ServiceUnavailable`; kafka-python alone
    would log an ERROR line per reconnect attempt. The levels are restored afterwards,
    so that a real error later in the crawl still shows.
    """
    loggers = [logging.getLogger(name) for name in CLIENT_LOGGERS]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        for lg, level in zip(loggers, levels, strict=True):
            lg.setLevel(level)
