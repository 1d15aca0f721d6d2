"""Durable topics against the local broker (Tansu): created with the crawler's configs, and
a consumer group whose committed offsets expired starts again from the first record.

Tansu accepts the configs of CreateTopics and a replication factor of -1 (the cluster's
default) but reports no topic configs back, so reading them back is left to the unit tests'
recording admin (tests/unit/test_kafka_topics.py) and to a real Apache Kafka (docs/cluster.md).
"""

from __future__ import annotations

import logging
import secrets
import time

import pytest
from kafka import KafkaAdminClient

from crawler.connections import clients as connection
from crawler.connections.kafka_topics import TopicPolicy

TIMEOUT = 5.0


def test_the_default_policy_creates_the_topics_and_warns_of_nothing(
        kafka_bootstrap: str, caplog: pytest.LogCaptureFixture) -> None:
    topics = {f"durable-{secrets.token_hex(4)}.{t}": 3 for t in ("requests", "dead")}
    caplog.set_level(logging.INFO)
    counts = connection.ensure_topics(kafka_bootstrap, topics, connect_timeout=TIMEOUT,
                                      policy=TopicPolicy())
    assert counts == topics
    created = [r.getMessage() for r in caplog.records if r.getMessage().startswith("Created")]
    assert created and "retention.ms=-1, retention.bytes=-1, cleanup.policy=delete" in created[0]
    # the crawler's own warnings (kafka-python may warn of a slow poll on a loaded machine)
    assert not [r for r in caplog.records
                if r.levelno >= logging.WARNING and r.name.startswith("crawler.")]
    again = connection.ensure_topics(kafka_bootstrap, topics, connect_timeout=TIMEOUT)
    assert again == topics  # existing topics: kept as they are


def _consume(bootstrap: str, topic: str, group: str, want: int) -> list[bytes]:
    """What the crawler's own group consumer reads of *topic*, then commits."""
    consumer = connection.kafka_consumer(
        bootstrap, group_id=group, connect_timeout=TIMEOUT, client_id="durable-test",
        session_timeout_ms=6000, heartbeat_interval_ms=1000, max_poll_interval_ms=300000)
    consumer.subscribe([topic])
    values: list[bytes] = []
    deadline = time.monotonic() + 30
    try:
        while len(values) < want and time.monotonic() < deadline:
            for records in consumer.poll(500).values():
                values += [r.value for r in records]
        consumer.commit()
    finally:
        consumer.close()
    return values


def test_a_group_whose_offsets_expired_reads_from_the_first_record(kafka_bootstrap: str) -> None:
    """Kafka drops the committed offsets of a group with no member after
    ``offsets.retention.minutes`` (7 days): a crawl paused that long comes back with none.
    DeleteGroups makes the same state; the crawler's consumer (``auto_offset_reset=earliest``)
    then reads every record the topic kept again: duplicates, never a loss."""
    topic, group = f"expiry-{secrets.token_hex(4)}", f"expiry-{secrets.token_hex(4)}"
    connection.ensure_topics(kafka_bootstrap, {topic: 1}, connect_timeout=TIMEOUT)
    producer = connection.kafka_producer(kafka_bootstrap, connect_timeout=TIMEOUT,
                                         linger_ms=0, client_id="durable-test")
    sent = [b"request-%d" % i for i in range(5)]
    for value in sent:
        producer.send(topic, value=value)
    producer.flush()
    producer.close()
    assert _consume(kafka_bootstrap, topic, group, 5) == sent
    admin = KafkaAdminClient(bootstrap_servers=kafka_bootstrap)
    try:
        assert admin.delete_groups([group]) == {group: "OK"}
    finally:
        admin.close()
    assert _consume(kafka_bootstrap, topic, group, 5) == sent
