"""A crawl's frontier as the broker holds it, read the way a test sees it from outside:
the records of a topic and the consumer group's committed offsets (kafka-python's admin
client), so that a test can say which records are acknowledged and what they were."""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar
from urllib.parse import urldefrag

from kafka import KafkaAdminClient, KafkaConsumer, TopicPartition
from kafka.errors import RetriableError

Partition = tuple[str, int]
T = TypeVar("T")
RETRY_FOR = 30.0  # seconds a broker just back (thawed, restarted) may answer "not yet"


def _retried(call: Callable[[], T]) -> T:
    """*call*, asked again while the broker answers with a retriable error (a coordinator
    moving or loading, metadata without brokers just after a freeze), for up to RETRY_FOR."""
    deadline = time.monotonic() + RETRY_FOR
    while True:
        try:
            return call()
        except RetriableError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


@dataclass(frozen=True)
class Entry:
    """One record of a frontier topic: where it is and which request it holds."""

    topic: str
    partition: int
    offset: int
    url: str  # without its fragment, as the fingerprint sees it
    dont_filter: bool


def group_of(crawl_id: str) -> str:
    return f"{crawl_id}.workers"


def committed(bootstrap: str, group: str) -> dict[Partition, int]:
    """The group's committed offset of every partition it has committed. A broker just back
    is asked again while it answers "not yet" (:func:`_retried`)."""
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10000)
    with contextlib.closing(admin):
        offsets = _retried(lambda: admin.list_group_offsets({group: None}).get(group, {}))
    return {(tp.topic, tp.partition): meta.offset for tp, meta in offsets.items()
            if meta.offset is not None and meta.offset >= 0}


def _entry(topic: str, partition: int, offset: int, value: bytes) -> Entry:
    text = value.decode("utf-8", "replace")
    try:
        data = json.loads(text)
    except ValueError:
        data = text  # a seed may be a bare URL
    if isinstance(data, dict):
        url, dont_filter = str(data.get("url", "")), bool(data.get("dont_filter"))
    else:
        url, dont_filter = str(data).strip(), False
    return Entry(topic, partition, offset, urldefrag(url).url, dont_filter)


def read_topic(bootstrap: str, topic: str, timeout: float = 60.0) -> list[Entry]:
    """Every record of *topic* up to the high-water mark the broker reports while reading."""
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None,
                             enable_auto_commit=False, request_timeout_ms=10000)
    with contextlib.closing(consumer):
        parts = _retried(lambda: consumer.partitions_for_topic(topic)) or set()
        tps = [TopicPartition(topic, p) for p in sorted(parts)]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        entries: list[Entry] = []
        deadline = time.monotonic() + timeout
        while True:
            for tp, records in consumer.poll(timeout_ms=300).items():
                entries += [_entry(tp.topic, tp.partition, r.offset, r.value) for r in records]
            if all(_caught_up(consumer, tp) for tp in tps):
                return entries
            if time.monotonic() > deadline:
                raise AssertionError(f"could not read {topic} to its end in {timeout:.0f}s")


def _caught_up(consumer: KafkaConsumer, tp: TopicPartition) -> bool:
    high = consumer.highwater(tp)  # from fetch responses: this broker's ListOffsets is off
    return high is not None and consumer.position(tp) >= high


def acknowledged(entries: list[Entry], offsets: dict[Partition, int]) -> list[Entry]:
    """The records below their partition's committed offset."""
    return [e for e in entries if e.offset < offsets.get((e.topic, e.partition), 0)]
