"""The one place that builds clients for Redis, Kafka and MongoDB.

Builders never touch the network; ``check_*`` helpers do, with short timeouts,
and raise :class:`ServiceUnavailable` naming the setting and the address.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from typing import Any
from urllib.parse import unquote, urlsplit

import redis
import redis.asyncio as aioredis
from pymongo import AsyncMongoClient
from redis.exceptions import RedisError

from crawler.config.readers import SettingError, mask_url
from crawler.connections.options import RedisOptions

logger = logging.getLogger(__name__)


class ServiceUnavailable(RuntimeError):
    """A service could not be reached at start-up (one line, the address masked)."""

    def __init__(self, setting: str, address: str, error: BaseException | str) -> None:
        super().__init__(
            f"Cannot reach the service of {setting} at {mask_url(address)}: "
            f"{scrub(str(error), address)}"
        )
        self.setting = setting


def scrub(text: str, address: str) -> str:
    """*text* on one line, without the password of *address* should a library quote it."""
    try:
        password = urlsplit(address).password
    except ValueError:
        password = None
    for secret in {password, unquote(password)} if password else ():
        text = text.replace(secret, "***")
    return " ".join(text.split())


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
    uri: str, *, connect_timeout: float = 5.0, write_concern: str | int = "majority",
    journal: bool = True, timeout: float | None = None, write_timeout: float | None = None,
) -> AsyncMongoClient[dict[str, Any]]:
    """An asyncio MongoDB client for *uri* (``MONGO_URI``).

    *timeout* (seconds, ``MONGO_TIMEOUT``) bounds the wait for any reply of the server
    (``socketTimeoutMS``), *write_timeout* (``MONGO_WRITE_TIMEOUT``) the server's wait for
    the write concern (``wtimeoutMS``); ``None`` leaves them unbounded.
    """
    options: dict[str, Any] = {}
    if timeout is not None:
        options["socketTimeoutMS"] = int(timeout * 1000)
    if write_timeout is not None:
        options["wtimeoutMS"] = int(write_timeout * 1000)
    return AsyncMongoClient(
        uri,
        serverSelectionTimeoutMS=int(connect_timeout * 1000),
        connectTimeoutMS=int(connect_timeout * 1000),
        w=write_concern,
        journal=journal,
        connect=False,
        **options,
    )


async def check_mongo(client: AsyncMongoClient[dict[str, Any]], uri: str) -> None:
    try:
        await client.admin.command("ping")
    except Exception as exc:
        # pymongo appends its whole topology description: the first part says it all
        raise ServiceUnavailable("MONGO_URI", uri, str(exc).split(", Topology Description:")[0]
                                 ) from exc


def kafka_common(bootstrap: str, connect_timeout: float) -> dict[str, Any]:
    """Options every kafka-python client of the crawler shares."""
    return {
        "bootstrap_servers": [s.strip() for s in bootstrap.split(",") if s.strip()],
        "request_timeout_ms": request_timeout_ms(connect_timeout),
        "bootstrap_timeout_ms": int(connect_timeout * 1000),
        "reconnect_backoff_max_ms": 2000,
    }


def request_timeout_ms(connect_timeout: float) -> int:
    """kafka-python's ``request_timeout_ms`` for *connect_timeout* (``CONNECT_TIMEOUT``)."""
    return max(int(connect_timeout * 1000), 10000)


def _kafka_unavailable(bootstrap: str, exc: BaseException) -> ServiceUnavailable:
    return ServiceUnavailable("KAFKA_BOOTSTRAP_SERVERS", bootstrap, exc)


def check_kafka(bootstrap: str, *, connect_timeout: float) -> None:
    """Raise :class:`ServiceUnavailable` unless a broker of *bootstrap* answers.

    Blocking: call it from a thread.
    """
    from kafka import KafkaAdminClient

    try:
        admin = KafkaAdminClient(**kafka_common(bootstrap, connect_timeout))
    except Exception as exc:
        raise _kafka_unavailable(bootstrap, exc) from exc
    admin.close()


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


def ensure_topics(
    bootstrap: str, topics: dict[str, int], *, replication: int, connect_timeout: float
) -> dict[str, int]:
    """Create the missing *topics* (name -> partitions); returns their partition counts.

    Blocking: call it from a thread. Raises :class:`ServiceUnavailable` when the
    broker cannot be reached.
    """
    from kafka import KafkaAdminClient
    from kafka.admin import NewTopic
    from kafka.errors import KafkaError, TopicAlreadyExistsError

    try:
        admin = KafkaAdminClient(**kafka_common(bootstrap, connect_timeout))
    except Exception as exc:
        raise _kafka_unavailable(bootstrap, exc) from exc
    try:
        missing = [t for t in topics if t not in set(admin.list_topics())]
        if missing:
            try:
                admin.create_topics(
                    [NewTopic(t, topics[t], replication) for t in missing], timeout_ms=10000
                )
                logger.info("Created topics %s", ", ".join(missing))
            except TopicAlreadyExistsError:
                pass
        described = admin.describe_topics(list(topics))
        return {d["name"]: len(d["partitions"]) for d in described}
    except KafkaError as exc:
        raise _kafka_unavailable(bootstrap, exc) from exc
    finally:
        admin.close()


# Bytes of one partition's record batch. kafka-python's 16 KiB default holds ~60 encoded
# requests: a bigger batch means fewer, larger produce requests (twice the requests/s of
# one process; see docs/benchmarks/micro.md). A batch is sent when full or after linger_ms.
PRODUCER_BATCH_SIZE = 128 * 1024


#: ``KAFKA_DELIVERY_TIMEOUT``: seconds a record may wait for its acknowledgement before its
#: send fails with ``KafkaTimeoutError`` (kafka-python's ``delivery_timeout_ms``); the
#: :class:`~crawler.frontier.producer.Sender` then sends it again, so an outage only repeats the
#: warning
DELIVERY_TIMEOUT = 120.0


def kafka_producer(bootstrap: str, *, connect_timeout: float, linger_ms: int,
                   client_id: str, delivery_timeout: float = DELIVERY_TIMEOUT) -> Any:
    """A producer with ``acks=all``. Blocking constructor: call it from a thread.

    Not idempotent: kafka-python 3.0.12's idempotent producer never produces again once a
    batch it had sent expires (a broker silent for longer than *delivery_timeout*). The
    expiry resets its producer id to -1 but leaves its state READY, and it asks for a new
    id only from UNINITIALIZED, so its I/O thread waits for an id for ever: no batch is
    sent or expired again and every future, old or new, stays pending. Idempotence would
    buy nothing here anyway: a send that timed out may have landed, and the ``Sender``
    sends it again (the frontier is at-least-once, see docs/delivery.md).
    """
    from kafka import KafkaProducer

    try:
        return KafkaProducer(
            **kafka_common(bootstrap, connect_timeout), acks="all", linger_ms=linger_ms,
            retries=5, client_id=client_id, max_block_ms=int(connect_timeout * 1000) * 4,
            batch_size=PRODUCER_BATCH_SIZE, enable_idempotence=False,
            delivery_timeout_ms=int(delivery_timeout * 1000),
        )
    except Exception as exc:
        raise _kafka_unavailable(bootstrap, exc) from exc


def kafka_consumer(bootstrap: str, *, group_id: str, connect_timeout: float,
                   client_id: str, session_timeout_ms: int, heartbeat_interval_ms: int,
                   max_poll_interval_ms: int) -> Any:
    """A group consumer that never auto-commits. Blocking: call it from a thread."""
    from kafka import KafkaConsumer

    try:
        return KafkaConsumer(
            **kafka_common(bootstrap, connect_timeout), group_id=group_id,
            client_id=client_id, enable_auto_commit=False, auto_offset_reset="earliest",
            session_timeout_ms=session_timeout_ms, heartbeat_interval_ms=heartbeat_interval_ms,
            max_poll_interval_ms=max_poll_interval_ms,
        )
    except Exception as exc:
        raise _kafka_unavailable(bootstrap, exc) from exc
