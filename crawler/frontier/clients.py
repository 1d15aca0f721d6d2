"""The Kafka transport of one worker's frontier, its clients built (blocking) off the reactor
thread: a :class:`~crawler.frontier.producer.Sender` and a
:class:`~crawler.frontier.consumer.ConsumerLoop` (see :mod:`crawler.frontier.transport`)."""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable
from typing import Any

from crawler.connections import clients as connection
from crawler.frontier.config import FrontierConfig
from crawler.frontier.consumer import ConsumerLoop
from crawler.frontier.partitioning import SpreadPartitioner
from crawler.frontier.producer import Sender
from crawler.frontier.transport import Channels, Deliver

logger = logging.getLogger(__name__)
#: Seconds the start-up check's answer on the topics (:func:`ensure_crawl_topics`) is taken
#: by the scheduler's open that follows it in the same process, instead of a second round
CHECKED_FOR = 60.0
_checked: dict[tuple[str, ...], tuple[float, dict[str, int]]] = {}


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
    counts = ensure_crawl_topics(cfg, reuse=True)
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


def ensure_crawl_topics(cfg: FrontierConfig, *, reuse: bool = False) -> dict[str, int]:
    """Create the crawl's missing topics, check the existing ones
    (:func:`~crawler.connections.kafka_clients.ensure_topics`), and return the partition counts of
    its topics and of the old priority bands still there.

    The start-up check calls it; the scheduler's open, a moment later, calls it with
    *reuse*: it takes that answer once, if at most :data:`CHECKED_FOR` s old, instead of a
    second round of admin requests (and a second warning about an unsafe topic).
    Blocking: call it from a thread."""
    key = (connection.kafka_options(cfg.kafka).bootstrap, cfg.requests_topic, *cfg.topics)
    checked = _checked.pop(key, None)
    if reuse and checked is not None and time.monotonic() - checked[0] < CHECKED_FOR:
        return checked[1]
    counts = connection.ensure_topics(
        cfg.kafka, {t: cfg.partitions for t in cfg.topics},
        policy=cfg.topic_policy, connect_timeout=cfg.connect_timeout,
        also=re.compile(re.escape(cfg.requests_topic) + r"\.\d+"))
    if not reuse:
        _checked[key] = (time.monotonic(), counts)
    return counts


def reactor_call() -> Any:
    from twisted.internet import reactor

    return reactor.callFromThread  # type: ignore[attr-defined]


def call_later(delay: float, func: Any, *args: Any) -> Any:
    from twisted.internet import reactor

    return reactor.callLater(delay, func, *args)  # type: ignore[attr-defined,arg-type]
