"""A group leader whose poll returns while its rejoin is still in flight gets its partitions.

kafka-python 3.0.12 asks for a rejoin when the leader's topic metadata changed since it
assigned the partitions (a topic created after the group's first generation: the worker's
first assignment was empty, "No partition metadata"). Its poll then starts a JoinGroup and
SyncGroup in the background and waits for them only as long as the poll's own timeout. If
the poll returns first, the leader's assignment inside the round trip records the new
metadata, the rejoin no longer looks needed, and no later poll collects the finished round
trip: the partitions are never assigned, heartbeats stay off, and the worker crawls nothing
for ever (test_alerts_live and test_recrawl each saw it under CI load). Java's consumer
counts a pending join as a rejoin needed (``rejoinNeededOrPending``);
``crawler.frontier.kafkafix.finish_pending_join``, called before each poll as
``ConsumerLoop`` does (``kafkafix.before_poll``), makes kafka-python do the same.

The consumer loop polls for 200 ms; a poll of 1 ms here makes the round trip outlast the
poll every time, as a loaded machine or a group waiting for a killed member does.
"""

from __future__ import annotations

import time

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, TopicPartition
from kafka.admin import NewPartitions, NewTopic
from kafka.errors import KafkaError

from crawler.frontier.kafkafix import before_poll

pytestmark = pytest.mark.integration
PARTITIONS = 3


def _poll(consumer: KafkaConsumer) -> None:
    before_poll(consumer)
    consumer.poll(timeout_ms=1)


def _state(admin: KafkaAdminClient, group: str) -> str:
    try:
        return str(admin.describe_groups([group])[group]["group_state"])
    except KafkaError as exc:  # the offsets topic is still being created on a new broker
        return type(exc).__name__


def test_a_leader_whose_poll_ends_before_its_rejoin_gets_the_new_partitions(
        kafka_bootstrap, crawl_id):
    topic = f"{crawl_id}.late"
    admin = KafkaAdminClient(bootstrap_servers=kafka_bootstrap)
    consumer = KafkaConsumer(bootstrap_servers=kafka_bootstrap, group_id=crawl_id,
                             enable_auto_commit=False, session_timeout_ms=6000,
                             heartbeat_interval_ms=250,
                             # the added partitions seen within a second, not 5 minutes
                             metadata_max_age_ms=500)
    try:
        admin.create_topics([NewTopic(topic, 1, 1)])
        consumer.subscribe([topic])
        # the first generation: the broker's group Stable *and* its assignment taken in (CI,
        # 2026-12-07: Stable on the broker, the SyncGroup answer not yet read by the client)
        first, deadline = {TopicPartition(topic, 0)}, time.monotonic() + 30
        while consumer.assignment() != first or _state(admin, crawl_id) != "Stable":
            assert time.monotonic() < deadline, (
                f"the first generation never formed: assigned {sorted(consumer.assignment())}, "
                f"the group is {_state(admin, crawl_id)}")
            for _ in range(50):
                _poll(consumer)
        admin.create_partitions({topic: NewPartitions(PARTITIONS)})  # the leader's metadata
        wanted = {TopicPartition(topic, p) for p in range(PARTITIONS)}
        deadline = time.monotonic() + 30
        while consumer.assignment() != wanted and time.monotonic() < deadline:
            _poll(consumer)
        assert consumer.assignment() == wanted, (
            f"assigned {sorted(consumer.assignment())} 30 s after partitions were added; "
            f"the group is {_state(admin, crawl_id)}")
    finally:
        consumer.close()
        admin.close()
