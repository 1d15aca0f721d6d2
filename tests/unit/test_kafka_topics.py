"""Durable topics (:mod:`crawler.connections.kafka_topics`): the configs the crawler creates
its topics with, the settings, and the warnings about existing topics that lose work.

The admin client here is a recording fake: these test the decisions. The topics a real
broker creates are in tests/integration/test_frontier_kafka.py (Tansu accepts the configs
but reports none back, so reading them back needs an Apache Kafka broker: docs/cluster.md).
"""

from __future__ import annotations

import logging
from typing import Any

import pytest
from kafka.errors import TopicAuthorizationFailedError
from scrapy.settings import Settings

from crawler.config import defaults
from crawler.config.readers import SettingError
from crawler.connections.kafka_topics import (
    DURABLE,
    TopicPolicy,
    create_missing,
    secure_and_check,
    topic_warnings,
)

WEEK_MS = str(7 * 86_400_000)


def policy(**settings: Any) -> TopicPolicy:
    return TopicPolicy.from_settings(Settings({
        "KAFKA_REPLICATION_FACTOR": defaults.KAFKA_REPLICATION_FACTOR,
        "KAFKA_MIN_INSYNC_REPLICAS": defaults.KAFKA_MIN_INSYNC_REPLICAS,
        "KAFKA_TOPIC_CONFIG": defaults.KAFKA_TOPIC_CONFIG, **settings}))


def test_the_default_creates_durable_topics_on_the_cluster_default_replication() -> None:
    default = policy()
    assert (default.replication, default.min_insync) == (0, 0)
    assert default.create_configs() == DURABLE
    assert DURABLE == {"retention.ms": "-1", "retention.bytes": "-1", "cleanup.policy": "delete"}


@pytest.mark.parametrize("replication, min_insync, expected", [
    (1, 0, None), (2, 0, "2"), (3, 0, "2"), (5, 0, "2"), (3, 3, "3"), (0, 2, "2"),
])
def test_min_insync_replicas_follows_the_replication(replication: int, min_insync: int,
                                                     expected: str | None) -> None:
    configs = policy(KAFKA_REPLICATION_FACTOR=replication,
                     KAFKA_MIN_INSYNC_REPLICAS=min_insync).create_configs()
    assert configs.get("min.insync.replicas") == expected


def test_topic_config_adds_to_and_overrides_the_durable_configs() -> None:
    configs = policy(KAFKA_TOPIC_CONFIG={"retention.ms": 30 * 86_400_000,
                                         "max.message.bytes": "2097152"}).create_configs()
    assert configs["retention.ms"] == str(30 * 86_400_000)
    assert configs["max.message.bytes"] == "2097152" and configs["retention.bytes"] == "-1"


@pytest.mark.parametrize("settings, name", [
    ({"KAFKA_REPLICATION_FACTOR": 2, "KAFKA_MIN_INSYNC_REPLICAS": 3},
     "KAFKA_MIN_INSYNC_REPLICAS"),
    ({"KAFKA_TOPIC_CONFIG": {"min.insync.replicas": "2"}}, "KAFKA_TOPIC_CONFIG"),
    ({"KAFKA_REPLICATION_FACTOR": -1}, "KAFKA_REPLICATION_FACTOR"),
    ({"KAFKA_TOPIC_CONFIG": "not json"}, "KAFKA_TOPIC_CONFIG"),
])
def test_bad_topic_settings_name_the_setting(settings: dict[str, Any], name: str) -> None:
    with pytest.raises(SettingError) as caught:
        policy(**settings)
    assert caught.value.setting == name


def test_a_durable_topic_has_no_warning() -> None:
    configs = {**DURABLE, "min.insync.replicas": "2"}
    assert topic_warnings("c.requests", configs, 3, 3, policy()) == []
    assert topic_warnings("c.requests", DURABLE, 1, 1, policy()) == []


@pytest.mark.parametrize("configs, replicas, brokers, words", [
    ({"retention.ms": WEEK_MS}, 1, 1, ["retention.ms=604800000 (7 days)", "retention.ms=-1"]),
    ({"retention.bytes": "1073741824"}, 1, 1, ["retention.bytes=1073741824"]),
    ({"cleanup.policy": "compact"}, 1, 1, ["cleanup.policy=compact", "one record per key"]),
    ({"min.insync.replicas": "1"}, 3, 3, ["min.insync.replicas=1 with 3 replicas",
                                          "min.insync.replicas=2"]),
    ({}, 1, 3, ["one replica on a cluster of 3 brokers"]),
])
def test_an_unsafe_topic_is_named_with_its_config_and_the_fix(
        configs: dict[str, str], replicas: int, brokers: int, words: list[str]) -> None:
    warnings = topic_warnings("c.requests", {**DURABLE, **configs}, replicas, brokers, policy())
    assert len(warnings) == 1 and warnings[0].startswith("Kafka topic c.requests: ")
    assert all(word in warnings[0] for word in words), warnings


def test_a_retention_the_user_chose_is_not_warned_about() -> None:
    chosen = policy(KAFKA_TOPIC_CONFIG={"retention.ms": WEEK_MS})
    assert topic_warnings("c.requests", {**DURABLE, "retention.ms": WEEK_MS}, 1, 1,
                          chosen) == []


class FakeAdmin:
    """Records what the crawler asks; answers like a broker with *replicas* per topic."""

    def __init__(self, existing: dict[str, dict[str, str]], replicas: int = 1,
                 brokers: int = 1, describe_error: Exception | None = None) -> None:
        self.existing, self.replicas, self.brokers = existing, replicas, brokers
        self.describe_error = describe_error
        self.created: list[Any] = []
        self.altered: list[Any] = []

    def list_topics(self) -> list[str]:
        return list(self.existing)

    def create_topics(self, new_topics: list[Any], timeout_ms: int) -> None:
        self.created += new_topics
        for topic in new_topics:
            self.existing[topic.name] = dict(topic.topic_configs)

    def describe_topics(self, names: list[str]) -> list[dict[str, Any]]:
        partition = {"replica_nodes": list(range(self.replicas))}
        return [{"name": n, "partitions": [partition] * 2} for n in names]

    def alter_configs(self, resources: list[Any], raise_on_unknown: bool) -> None:
        self.altered += resources

    def describe_configs(self, resources: list[Any], config_filter: str) -> dict[str, Any]:
        if self.describe_error:
            raise self.describe_error
        assert config_filter == "all"  # broker defaults count: retention.ms is one
        return {"topic": {r.name: {k: {"value": v} for k, v in self.existing[r.name].items()}
                          for r in resources}}

    def describe_cluster(self) -> dict[str, Any]:
        return {"brokers": [{"node_id": i} for i in range(self.brokers)]}


def ensure(admin: FakeAdmin, topics: dict[str, int], topic_policy: TopicPolicy) -> None:
    created = create_missing(admin, topics, topic_policy)
    secure_and_check(admin, admin.describe_topics(list(topics)), created, topic_policy)


def test_missing_topics_are_created_durable_on_the_cluster_default() -> None:
    admin = FakeAdmin({})
    ensure(admin, {"c.requests": 12, "c.dead": 12}, policy())
    assert [(t.name, t.num_partitions, t.replication_factor) for t in admin.created] == [
        ("c.requests", 12, -1), ("c.dead", 12, -1)]
    assert all(t.topic_configs == DURABLE for t in admin.created)
    assert admin.altered == []  # one replica: min.insync.replicas stays


def test_a_replicated_default_gets_min_insync_replicas_after_creation() -> None:
    admin = FakeAdmin({}, replicas=3, brokers=3)
    ensure(admin, {"c.requests": 12}, policy())
    assert [(r.name, r.configs) for r in admin.altered] == [
        ("c.requests", {"min.insync.replicas": "2"})]


def test_an_existing_unsafe_topic_is_warned_about_once_per_problem(
        caplog: pytest.LogCaptureFixture) -> None:
    admin = FakeAdmin({"c.requests": {"retention.ms": WEEK_MS, "cleanup.policy": "delete"}})
    caplog.set_level(logging.WARNING)
    ensure(admin, {"c.requests": 12, "c.seeds": 12}, policy())
    assert [t.name for t in admin.created] == ["c.seeds"]
    warnings = [r.getMessage() for r in caplog.records]
    assert warnings == [warnings[0]] and "Kafka topic c.requests: retention.ms=" in warnings[0]


def test_a_broker_that_reports_no_configs_is_not_checked(
        caplog: pytest.LogCaptureFixture) -> None:
    admin = FakeAdmin({"c.requests": {}})
    caplog.set_level(logging.DEBUG)
    ensure(admin, {"c.requests": 12}, policy())
    assert "reports no topic configs" in caplog.text
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_a_refused_describe_is_one_warning_not_a_failure(
        caplog: pytest.LogCaptureFixture) -> None:
    admin = FakeAdmin({"c.requests": {}}, describe_error=TopicAuthorizationFailedError())
    caplog.set_level(logging.WARNING)
    ensure(admin, {"c.requests": 12}, policy())
    assert len(caplog.records) == 1 and "Cannot read or set the configs" in caplog.text
