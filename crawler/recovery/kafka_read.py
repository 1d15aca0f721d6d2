"""What the crawl's Kafka topics still know when Redis forgot: committed offsets and records.

Blocking (kafka-python): call these from a thread. The consumer here uses the crawl's group id
only to read its committed offsets; it never subscribes, so it never joins the group.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from kafka import TopicPartition

from crawler.connections import clients as connection
from crawler.frontier.config import FrontierConfig

POLL_MS = 500
IDLE_POLLS = 20  # polls without a record before a scan gives up on an end offset


def _consumer(cfg: FrontierConfig) -> Any:
    return connection.kafka_consumer(
        cfg.kafka, group_id=cfg.group_id, connect_timeout=cfg.connect_timeout,
        client_id=f"repair-{cfg.crawl_id}", session_timeout_ms=cfg.session_timeout_ms,
        heartbeat_interval_ms=cfg.heartbeat_interval_ms,
        max_poll_interval_ms=cfg.max_poll_interval_ms)


def _partitions(consumer: Any, topics: list[str]) -> list[TopicPartition]:
    known = consumer.topics()
    return [TopicPartition(t, p) for t in topics if t in known
            for p in sorted(consumer.partitions_for_topic(t) or ())]


def committed_offsets(cfg: FrontierConfig) -> int:
    """Records the crawl's group has committed, over its request and seeds topics: more
    than zero means the crawl has run, whatever Redis says."""
    consumer = _consumer(cfg)
    try:
        tps = _partitions(consumer, [*cfg.request_topics_in(consumer.topics()), cfg.seeds_topic])
        if not tps or not any(consumer.end_offsets(tps).values()):
            return 0  # a new crawl, its topics empty: no group to ask (a slow coordinator)
        committed = connection.committed_offsets(consumer, tps, cfg.connect_timeout)
        return sum(offset or 0 for offset in committed.values())
    finally:
        consumer.close(autocommit=False)


def scan(cfg: FrontierConfig, *, dead: bool) -> Iterator[bytes]:
    """The values of the records the crawl has not finished: from each request and seeds
    partition's committed offset to its end; with *dead*, every record of the dead-letter
    topic too."""
    consumer = _consumer(cfg)
    try:
        tps = _partitions(consumer, [*cfg.request_topics_in(consumer.topics()), cfg.seeds_topic])
        starts = connection.committed_offsets(consumer, tps, cfg.connect_timeout)
        if dead:
            for tp in _partitions(consumer, [cfg.dead_topic]):
                tps.append(tp)
                starts[tp] = None
        yield from _read(consumer, tps, starts)
    finally:
        consumer.close(autocommit=False)


def _read(consumer: Any, tps: list[TopicPartition],
          starts: dict[TopicPartition, int | None]) -> Iterator[bytes]:
    if not tps:
        return
    consumer.assign(tps)
    ends = consumer.end_offsets(tps)
    begins = consumer.beginning_offsets(tps)
    left = {}
    for tp in tps:
        start = starts.get(tp)
        start = begins[tp] if start is None else max(start, begins[tp])
        if start < ends[tp]:
            consumer.seek(tp, start)
            left[tp] = ends[tp]
    consumer.pause(*[tp for tp in tps if tp not in left])
    idle = 0
    while left and idle < IDLE_POLLS:
        batches = consumer.poll(timeout_ms=POLL_MS)
        idle = 0 if batches else idle + 1
        for tp, records in batches.items():
            for record in records:
                if tp in left and record.offset < left[tp] and record.value is not None:
                    yield record.value
            if tp in left and consumer.position(tp) >= left[tp]:
                del left[tp]
                consumer.pause(tp)
    if left:  # the broker stopped answering: a repair from part of the log is no repair
        raise ScanIncomplete("no records for "
                             f"{IDLE_POLLS * POLL_MS / 1000:.0f} s from "
                             + ", ".join(f"{tp.topic}[{tp.partition}]" for tp in sorted(left)))


class ScanIncomplete(RuntimeError):
    """Some partition could not be read to its end."""
