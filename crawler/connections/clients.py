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
from pymongo.errors import OperationFailure
from redis.exceptions import RedisError

from crawler.config.readers import SettingError, mask_url
from crawler.connections.kafka_logs import redact_sasl
from crawler.connections.options import KafkaOptions, RedisOptions

logger = logging.getLogger(__name__)


class ServiceUnavailable(RuntimeError):
    """A service could not be reached at start-up (one line, the address masked)."""

    def __init__(self, setting: str, address: str, error: BaseException | str,
                 hint: str | None = None) -> None:
        super().__init__(
            f"Cannot reach the service of {setting} at {mask_url(address)}: "
            f"{scrub(str(error), address)}"
        )
        self.setting = setting
        #: what to do about it, for the one start-up line (default: start the service)
        self.hint = hint or f"start it, or point {setting} at a running one"


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


#: what a Kafka builder takes: the options (security included), or a bare bootstrap string
#: (PLAINTEXT, as the tests' local brokers)
Kafka = KafkaOptions | str


def kafka_options(kafka: Kafka) -> KafkaOptions:
    return kafka if isinstance(kafka, KafkaOptions) else KafkaOptions(bootstrap=kafka)


def kafka_common(kafka: Kafka, connect_timeout: float) -> dict[str, Any]:
    """Options every kafka-python client of the crawler shares, security included."""
    options = kafka_options(kafka)
    return {
        "bootstrap_servers": [s.strip() for s in options.bootstrap.split(",") if s.strip()],
        "request_timeout_ms": request_timeout_ms(connect_timeout),
        "bootstrap_timeout_ms": int(connect_timeout * 1000),
        "reconnect_backoff_max_ms": 2000,
        **kafka_security(options),
    }


def kafka_security(options: KafkaOptions) -> dict[str, Any]:
    """The ONE translation of ``KAFKA_SECURITY_PROTOCOL``, ``KAFKA_SSL_*`` and
    ``KAFKA_SASL_*`` to kafka-python 3.x keyword arguments."""
    config: dict[str, Any] = {"security_protocol": options.security_protocol}
    if options.uses_ssl:
        config["ssl_check_hostname"] = options.ssl_check_hostname
        for key in ("ssl_cafile", "ssl_certfile", "ssl_keyfile"):
            if getattr(options, key):
                config[key] = getattr(options, key)
    if options.uses_sasl:
        config["sasl_mechanism"] = options.sasl_mechanism
        if options.sasl_mechanism == "OAUTHBEARER":
            config["sasl_oauth_token_provider"] = options.oauth_token_provider
        else:
            config["sasl_plain_username"] = options.sasl_username
            config["sasl_plain_password"] = options.sasl_password
    return config


def kafka_config(client: type, kafka: Kafka, connect_timeout: float,
                 **specific: Any) -> dict[str, Any]:
    """The keyword arguments of kafka-python's *client* class: the shared options, the
    client's own (*specific*), then ``KAFKA_CLIENT_PARAMS``, last: those of its keys
    that *client* knows (the admin client refuses a producer's ``acks``). The secrets are
    kept out of kafka-python's DEBUG lines (:mod:`.kafka_logs`)."""
    options = kafka_options(kafka)
    # kafka-python logs its configuration and requests at DEBUG (an OAUTHBEARER token shows
    # only in auth_bytes and raw bytes, which are always masked)
    redact_sasl(options.sasl_password, str(options.client_params.get("ssl_password") or ""))
    known = getattr(client, "DEFAULT_CONFIG", {})
    params = {k: v for k, v in options.client_params.items() if k in known}
    return {**kafka_common(options, connect_timeout), **specific, **params}


def kafka_admin(kafka: Kafka, connect_timeout: float) -> Any:
    """A ``KafkaAdminClient``; raises :class:`ServiceUnavailable` when no broker answers.

    Blocking: call it from a thread."""
    from kafka import KafkaAdminClient

    try:
        return KafkaAdminClient(**kafka_config(KafkaAdminClient, kafka, connect_timeout))
    except Exception as exc:
        raise _kafka_unavailable(kafka, exc) from exc


def request_timeout_ms(connect_timeout: float) -> int:
    """kafka-python's ``request_timeout_ms`` for *connect_timeout* (``CONNECT_TIMEOUT``)."""
    return max(int(connect_timeout * 1000), 10000)


def _kafka_unavailable(kafka: Kafka, exc: BaseException) -> ServiceUnavailable:
    """kafka-python reports a failed TLS handshake or SASL login as a bootstrap timeout: the
    message says which security settings to check too."""
    options = kafka_options(kafka)
    error: BaseException | str = exc
    if options.security_protocol != "PLAINTEXT":
        error = (f"{exc} (KAFKA_SECURITY_PROTOCOL="
                 f"{options.security_protocol}: a refused TLS handshake or SASL login looks "
                 "the same; check KAFKA_SSL_* and KAFKA_SASL_*)")
    return ServiceUnavailable("KAFKA_BOOTSTRAP_SERVERS", options.bootstrap, error)


def check_kafka(kafka: Kafka, *, connect_timeout: float) -> None:
    """Raise :class:`ServiceUnavailable` unless a broker of *kafka* answers.

    Blocking: call it from a thread.
    """
    kafka_admin(kafka, connect_timeout).close()


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
    kafka: Kafka, topics: dict[str, int], *, replication: int, connect_timeout: float
) -> dict[str, int]:
    """Create the missing *topics* (name -> partitions); returns their partition counts.

    Blocking: call it from a thread. Raises :class:`ServiceUnavailable` when the
    broker cannot be reached.
    """
    from kafka.admin import NewTopic
    from kafka.errors import KafkaError, TopicAlreadyExistsError

    admin = kafka_admin(kafka, connect_timeout)
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
        raise _kafka_unavailable(kafka, exc) from exc
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


def kafka_producer(kafka: Kafka, *, connect_timeout: float, linger_ms: int,
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
        return KafkaProducer(**kafka_config(
            KafkaProducer, kafka, connect_timeout, acks="all", linger_ms=linger_ms,
            retries=5, client_id=client_id, max_block_ms=int(connect_timeout * 1000) * 4,
            batch_size=PRODUCER_BATCH_SIZE, enable_idempotence=False,
            delivery_timeout_ms=int(delivery_timeout * 1000)))
    except Exception as exc:
        raise _kafka_unavailable(kafka, exc) from exc


def kafka_consumer(kafka: Kafka, *, group_id: str, connect_timeout: float,
                   client_id: str, session_timeout_ms: int, heartbeat_interval_ms: int,
                   max_poll_interval_ms: int) -> Any:
    """A group consumer that never auto-commits. Blocking: call it from a thread."""
    from kafka import KafkaConsumer

    try:
        return KafkaConsumer(**kafka_config(
            KafkaConsumer, kafka, connect_timeout, group_id=group_id,
            client_id=client_id, enable_auto_commit=False, auto_offset_reset="earliest",
            session_timeout_ms=session_timeout_ms, heartbeat_interval_ms=heartbeat_interval_ms,
            max_poll_interval_ms=max_poll_interval_ms))
    except Exception as exc:
        raise _kafka_unavailable(kafka, exc) from exc
