"""Durable topics on Apache Kafka: created with the crawler's configs and read back through
the admin API (DescribeConfigs), on one node and on three brokers as production runs them; an
unsafe topic created beforehand is named in a start-up warning; a consumer group whose
committed offsets expired starts again from the first record.
"""

from __future__ import annotations

import logging
import secrets
import time

import pytest
from kafka import KafkaAdminClient
from kafka.admin import ConfigResource, ConfigResourceType, NewTopic

from crawler.connections import clients as connection
from crawler.connections.kafka_topics import TopicPolicy
from crawler.localstack.kafka_cluster import KafkaCluster

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


def _configs(admin: KafkaAdminClient, topics: list[str]) -> dict[str, dict[str, str]]:
    """The topics' effective configs, as the broker reports them (DescribeConfigs)."""
    found = admin.describe_configs(
        [ConfigResource(ConfigResourceType.TOPIC, t) for t in topics], config_filter="all")
    return {name: {k: str(v.get("value")) for k, v in values.items()}
            for name, values in found.get("topic", {}).items()}


def test_the_created_topics_read_back_durable_and_replicated(
        kafka_cluster: KafkaCluster, caplog: pytest.LogCaptureFixture) -> None:
    """On three brokers the crawl's topics are created as production wants them: no time or
    size retention, three replicas, ``min.insync.replicas`` 2; read back through the admin
    API, not from what the crawler asked for."""
    topics = {f"durable-{secrets.token_hex(4)}.{t}": 4 for t in ("requests", "seeds")}
    caplog.set_level(logging.INFO)
    connection.ensure_topics(kafka_cluster.bootstrap, topics, connect_timeout=TIMEOUT)
    assert not [r for r in caplog.records
                if r.levelno >= logging.WARNING and r.name.startswith("crawler.")]
    with kafka_cluster.admin() as admin:
        configs = _configs(admin, list(topics))
        described = admin.describe_topics(list(topics))
    for topic in topics:
        assert configs[topic]["retention.ms"] == "-1", configs[topic]
        assert configs[topic]["retention.bytes"] == "-1", configs[topic]
        assert configs[topic]["cleanup.policy"] == "delete", configs[topic]
        assert configs[topic]["min.insync.replicas"] == "2", configs[topic]
    assert {len(p["replica_nodes"]) for d in described for p in d["partitions"]} == {3}


def test_an_unsafe_topic_gets_a_start_up_warning_naming_it_and_the_config(
        kafka_cluster: KafkaCluster, caplog: pytest.LogCaptureFixture) -> None:
    """A topic created beforehand with one hour of retention and one replica on a cluster of
    three: the crawler keeps it as it is, and warns of both, naming the topic."""
    topic = f"unsafe-{secrets.token_hex(4)}.requests"
    with kafka_cluster.admin() as admin:
        admin.create_topics([NewTopic(topic, 2, 1, topic_configs={"retention.ms": "3600000"})])
    caplog.set_level(logging.WARNING)
    connection.ensure_topics(kafka_cluster.bootstrap, {topic: 2}, connect_timeout=TIMEOUT)
    warnings = [r.getMessage() for r in caplog.records if r.name.startswith("crawler.")]
    assert any(f"Kafka topic {topic}: retention.ms=3600000" in w for w in warnings), warnings
    assert any(f"Kafka topic {topic}: one replica on a cluster of 3 brokers" in w
               for w in warnings), warnings
    with kafka_cluster.admin() as admin:
        assert _configs(admin, [topic])[topic]["retention.ms"] == "3600000"  # left as it was


def test_the_single_node_broker_reports_the_durable_configs(kafka_bootstrap: str) -> None:
    """The local stack's broker is Apache Kafka too: its effective configs read back."""
    topic = f"durable-{secrets.token_hex(4)}.requests"
    connection.ensure_topics(kafka_bootstrap, {topic: 1}, connect_timeout=TIMEOUT)
    admin = KafkaAdminClient(bootstrap_servers=kafka_bootstrap)
    try:
        configs = _configs(admin, [topic])[topic]
    finally:
        admin.close()
    assert (configs["retention.ms"], configs["retention.bytes"]) == ("-1", "-1")
