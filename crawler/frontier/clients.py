"""The Kafka transport of one worker's frontier, its clients built (blocking) off the reactor
thread: a :class:`~crawler.frontier.producer.Sender` and a
:class:`~crawler.frontier.consumer.ConsumerLoop` (see :mod:`crawler.frontier.transport`)."""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from typing import Any

from crawler.connections import clients as connection
from crawler.frontier.config import FrontierConfig
from crawler.frontier.consumer import ConsumerLoop
from crawler.frontier.partitioning import SpreadPartitioner
from crawler.frontier.producer import Sender
from crawler.frontier.transport import Channels, Deliver

logger = logging.getLogger(__name__)


class KafkaTransport:
    """:class:`~crawler.frontier.transport.Transport` over Kafka, from the frontier's config."""

    def __init__(self, config: FrontierConfig) -> None:
        self.config = config

    def connect(self, worker: str, deliver: Deliver, unacked: Callable[[], int]) -> Channels:
        return connect(self.config, worker, deliver, unacked)

    def call_later(self, delay: float, func: Callable[..., Any], *args: Any) -> Any:
        return call_later(delay, func, *args)


def connect(cfg: FrontierConfig, worker: str, deliver: Deliver,
            unacked: Callable[[], int]) -> Channels:
    """Create the crawl's topics if needed, then its producer and its consumer loop.

    Blocking: call it from a thread."""
    counts = connection.ensure_topics(
        cfg.kafka, {t: cfg.partitions for t in cfg.topics},
        policy=cfg.topic_policy, connect_timeout=cfg.connect_timeout,
        also=re.compile(re.escape(cfg.requests_topic) + r"\.\d+"))
    old = sorted(set(counts) - set(cfg.topics))
    if old:
        logger.warning("Consuming %s too: priority bands of this crawl that KAFKA_PRIORITY_BANDS "
                       "no longer names (their records are fetched; nothing new goes there)",
                       ", ".join(old))
    topics = (*cfg.band_topics, *old, cfg.seeds_topic)
    producer = connection.kafka_producer(cfg.kafka, connect_timeout=cfg.connect_timeout,
                                         linger_ms=cfg.linger_ms, client_id=worker,
                                         delivery_timeout=cfg.delivery_timeout,
                                         partitioner=SpreadPartitioner(cfg.host_partitions))
    sender = Sender(producer, call_from_thread=reactor_call(), call_later=call_later,
                    backoff=cfg.send_backoff, backoff_max=cfg.send_backoff_max)
    consumer = connection.kafka_consumer(
        cfg.kafka, group_id=cfg.group_id, connect_timeout=cfg.connect_timeout,
        client_id=worker, session_timeout_ms=cfg.session_timeout_ms,
        heartbeat_interval_ms=cfg.heartbeat_interval_ms,
        max_poll_interval_ms=cfg.max_poll_interval_ms, fetch_max_bytes=cfg.fetch_max_bytes,
        group_instance_id=cfg.group_instance_id or None)
    loop = ConsumerLoop(
        consumer, list(topics), buffer_size=cfg.buffer_size,
        commit_interval=cfg.commit_interval, deliver=deliver,
        call_from_thread=reactor_call(), max_unacked=cfg.max_unacked, unacked=unacked,
        urgent=cfg.urgent_topics | set(old))
    return Channels(sender, loop, (counts[cfg.requests_topic], counts[cfg.seeds_topic]),
                    {f"{t}:{p}" for t in topics for p in range(counts[t])})


def reactor_call() -> Any:
    from twisted.internet import reactor

    return reactor.callFromThread  # type: ignore[attr-defined]


def call_later(delay: float, func: Any, *args: Any) -> Any:
    from twisted.internet import reactor

    return reactor.callLater(delay, func, *args)  # type: ignore[attr-defined,arg-type]
