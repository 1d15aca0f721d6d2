"""A partition paused while others are still fetched, then resumed, is fetched again.

The consumer loop pauses the lowest-priority request partitions while its buffer is full
and goes on fetching the urgent ones (the higher bands, the seeds). kafka-python 3.0
parks what it had fetched for a paused partition and, after the resume, never puts it
back once the records in line were used up: the partition was never fetched again and a
crawl stalled after a MongoDB outage with records left in it (test_outages[mongo]).
``crawler.frontier.kafkafix.free_used_records``, called before each poll as
``ConsumerLoop`` does, brings the parked records back.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import NewTopic

from crawler.frontier.kafkafix import free_used_records

pytestmark = pytest.mark.integration
RECORDS = 20


def _topics(bootstrap: str, crawl_id: str) -> tuple[TopicPartition, TopicPartition]:
    low, urgent = f"{crawl_id}.low", f"{crawl_id}.urgent"
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    admin.create_topics([NewTopic(low, 1, 1), NewTopic(urgent, 1, 1)])
    admin.close()
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all")
    for i in range(RECORDS):
        producer.send(low, f"low {i}".encode(), partition=0)
        producer.send(urgent, f"urgent {i}".encode(), partition=0)
    producer.flush()
    producer.close()
    return TopicPartition(low, 0), TopicPartition(urgent, 0)


def _poll(consumer: KafkaConsumer, got: dict[str, list[Any]], max_records: int) -> None:
    free_used_records(consumer)
    for tp, records in consumer.poll(timeout_ms=200, max_records=max_records).items():
        got[tp.topic].extend(records)


def test_a_paused_then_resumed_partition_is_fetched_again(kafka_bootstrap, crawl_id):
    low, urgent = _topics(kafka_bootstrap, crawl_id)
    consumer = KafkaConsumer(bootstrap_servers=kafka_bootstrap, enable_auto_commit=False)
    consumer.assign([low, urgent])
    consumer.seek_to_beginning(low, urgent)
    got: dict[str, list[Any]] = {low.topic: [], urgent.topic: []}
    try:
        deadline = time.monotonic() + 20
        while not any(got.values()):
            assert time.monotonic() < deadline, "the broker returned nothing"
            _poll(consumer, got, 1)
        # the partition whose records are in line is paused (the buffer is full), the
        # other is fetched to its end
        paused, other = (low, urgent) if got[low.topic] else (urgent, low)
        consumer.pause(paused)
        while len(got[other.topic]) < RECORDS:
            assert time.monotonic() < deadline, f"{other.topic}: {len(got[other.topic])}"
            _poll(consumer, got, 100)
        assert len(got[paused.topic]) == 1
        consumer.resume(paused)  # room again
        deadline = time.monotonic() + 10
        while len(got[paused.topic]) < RECORDS and time.monotonic() < deadline:
            _poll(consumer, got, 100)
    finally:
        consumer.close()
    assert [r.offset for r in got[paused.topic]] == list(range(RECORDS)), (
        f"{len(got[paused.topic])} of {RECORDS} records of the resumed partition fetched")
