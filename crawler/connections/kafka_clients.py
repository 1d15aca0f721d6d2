"""The Kafka half of :mod:`crawler.connections.clients`: kafka-python's admin client, producer
and consumer, built from :class:`~crawler.connections.options.KafkaOptions`.

Import these through :mod:`crawler.connections.clients`, the one place that builds clients.
Builders never touch the network except :func:`check_kafka` and :func:`ensure_topics`,
which raise :class:`~crawler.connections.clients.ServiceUnavailable` naming the setting.
"""

from __future__ import annotations

import logging
import re
import time
from typing import Any

from crawler.connections.kafka_logs import quiet_slow_steps, redact_sasl
from crawler.connections.kafka_topics import TopicPolicy, create_missing, secure_and_check
from crawler.connections.options import KafkaOptions
from crawler.connections.unavailable import ServiceRefused, ServiceUnavailable

logger = logging.getLogger(__name__)

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
    kept out of kafka-python's DEBUG lines, its slow-step warnings out of the warnings
    (:mod:`.kafka_logs`)."""
    options = kafka_options(kafka)
    # kafka-python logs its configuration and requests at DEBUG (an OAUTHBEARER token shows
    # only in auth_bytes and raw bytes, which are always masked)
    redact_sasl(options.sasl_password, str(options.client_params.get("ssl_password") or ""))
    quiet_slow_steps()
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
    message says which security settings to check too. A refusal by the broker's ACLs is
    told as such, naming the user."""
    options = kafka_options(kafka)
    error: BaseException | str = exc
    if type(exc).__name__.endswith("AuthorizationFailedError"):
        user = options.sasl_username or "(no SASL user)"
        return ServiceRefused(
            "KAFKA_BOOTSTRAP_SERVERS", options.bootstrap, f"{type(exc).__name__} for user "
            f"{user}", f"grant {user} the ACLs of the crawl's topics (<CRAWL_ID>.*, create, "
            "read, write, describe configs) and group (<CRAWL_ID>.workers): docs/security.md")
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


def ensure_topics(kafka: Kafka, topics: dict[str, int], *, connect_timeout: float,
                  policy: TopicPolicy | None = None,
                  also: re.Pattern[str] | None = None) -> dict[str, int]:
    """Create the missing *topics* (name -> partitions) durable, as *policy* (default: the
    defaults of the ``KAFKA_*`` topic settings) says, warn about existing ones whose configs
    lose work (:mod:`.kafka_topics`); returns their partition counts, and those of the
    existing topics whose names match *also*.

    Blocking: call it from a thread. Raises :class:`ServiceUnavailable` when the
    broker cannot be reached.
    """
    from kafka.errors import KafkaError

    policy = policy or TopicPolicy()
    admin = kafka_admin(kafka, connect_timeout)
    try:
        created = create_missing(admin, topics, policy)
        names = list(topics)
        if also is not None:
            names += sorted(t for t in admin.list_topics() if also.fullmatch(t) and t not in topics)
        # A new topic's partitions reach the brokers' metadata after CreateTopics returns. A
        # consumer that joined meanwhile was assigned none of them and rejoined; in that race
        # kafka-python 3.0.12's group leader could hang in its SyncGroup for good (2 runs of 6
        # on Apache Kafka 4.3), its partitions taken by the others and itself idle for ever.
        admin.wait_for_topics(names, timeout_ms=request_timeout_ms(connect_timeout))
        described = admin.describe_topics(names)
        secure_and_check(admin, described, created, policy)
        return {d["name"]: len(d["partitions"]) for d in described}
    except KafkaError as exc:
        raise _kafka_unavailable(kafka, exc) from exc
    finally:
        admin.close()


# Bytes of one partition's record batch. kafka-python's 16 KiB default holds ~60 encoded
# requests: a bigger batch means fewer, larger produce requests (twice the requests/s of
# one process; see docs/benchmarks/micro.md). A batch is sent when full or after linger_ms.
PRODUCER_BATCH_SIZE = 128 * 1024

#: The largest record the producer sends (kafka-python's ``max_request_size``, its default).
#: The frontier refuses a larger request when the spider yields it, not when it is sent
#: (:mod:`crawler.frontier.unsendable`); a broker whose own limit is lower refuses it later.
MAX_REQUEST_SIZE = 1024 * 1024
#: What a record adds to its value: kafka-python's batch header (61 bytes), the record's
#: varints and attributes, and the key (a host name, at most 253 bytes)
RECORD_OVERHEAD = 512


#: ``KAFKA_DELIVERY_TIMEOUT``: seconds a record may wait for its acknowledgement before its
#: send fails with ``KafkaTimeoutError`` (kafka-python's ``delivery_timeout_ms``); the
#: :class:`~crawler.frontier.producer.Sender` then sends it again, so an outage only repeats the
#: warning
DELIVERY_TIMEOUT = 120.0


def kafka_producer(kafka: Kafka, *, connect_timeout: float, linger_ms: int,
                   client_id: str, delivery_timeout: float = DELIVERY_TIMEOUT,
                   partitioner: Any = None) -> Any:
    """A producer with ``acks=all`` (and kafka-python's *partitioner*, if given). Blocking
    constructor: call it from a thread.

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
            batch_size=PRODUCER_BATCH_SIZE, max_request_size=MAX_REQUEST_SIZE,
            enable_idempotence=False,
            delivery_timeout_ms=int(delivery_timeout * 1000),
            **({} if partitioner is None else {"partitioner": partitioner})))
    except Exception as exc:
        raise _kafka_unavailable(kafka, exc) from exc


def kafka_consumer(kafka: Kafka, *, group_id: str, connect_timeout: float,
                   client_id: str, session_timeout_ms: int, heartbeat_interval_ms: int,
                   max_poll_interval_ms: int, fetch_max_bytes: int | None = None,
                   group_instance_id: str | None = None) -> Any:
    """A group consumer that never auto-commits. Blocking: call it from a thread.

    *group_instance_id* (``KAFKA_GROUP_INSTANCE_ID``) makes it a static member (KIP-345):
    restarted with the same id within the session timeout, it takes its partitions back
    without a rebalance; killed, its partitions wait for the session timeout.

    *fetch_max_bytes* (``KAFKA_FETCH_MAX_BYTES`` for the frontier's) bounds the record bytes
    one fetch brings; kafka-python's default, 50 MiB, with 1 MiB a partition, had a worker
    that buffers a few hundred requests hold megabytes of records it would not reach for
    minutes. A record larger than the bound still comes, alone (Kafka's fetch v3, KIP-74).

    No incremental fetch sessions (KIP-227): in one, the broker leaves out of its answer a
    partition with nothing new, and kafka-python 3.0.12 forgets a partition's high-water
    mark when it is assigned again. After a group lost its membership (a broker frozen past
    the session timeout) and got the same partitions back, an empty partition's high-water
    mark stayed unknown for good, so its lag did, and the crawl never counted as drained
    (Apache Kafka 4.3; both workers idle for 10 minutes). A full fetch names the worker's few
    dozen partitions each time and answers for every one.
    """
    from kafka import KafkaConsumer

    fetch: dict[str, Any] = {} if fetch_max_bytes is None else {
        "fetch_max_bytes": fetch_max_bytes}
    if group_instance_id:
        fetch["group_instance_id"] = group_instance_id
    try:
        return KafkaConsumer(**kafka_config(
            KafkaConsumer, kafka, connect_timeout, group_id=group_id,
            client_id=client_id, enable_auto_commit=False, auto_offset_reset="earliest",
            session_timeout_ms=session_timeout_ms, heartbeat_interval_ms=heartbeat_interval_ms,
            max_poll_interval_ms=max_poll_interval_ms, enable_incremental_fetch_sessions=False,
            **fetch))
    except Exception as exc:
        raise _kafka_unavailable(kafka, exc) from exc


def committed_offsets(consumer: Any, partitions: list[Any],
                      timeout: float) -> dict[Any, int | None]:
    """The offset *consumer*'s group committed on each of *partitions* (``None``: never),
    all read within *timeout* seconds; ``KafkaTimeoutError`` past it. kafka-python's
    ``committed()`` without a timeout retries a coordinator that cannot answer (loading, a
    broker frozen) for ever. Blocking: call it from a thread."""
    deadline = time.monotonic() + timeout
    return {tp: consumer.committed(tp, timeout_ms=max(int((deadline - time.monotonic())
                                                          * 1000), 1))
            for tp in partitions}
