"""The crawl's topics: created durable, and existing ones checked for configs that lose work.

A frontier topic holds work that nobody has done yet, so the broker must never delete it by
itself. Apache Kafka's defaults do: ``retention.ms`` is 7 days, so a backlog older than a
week (a paused crawl, a slow and polite host) is deleted without a word. The crawler creates
its topics with :data:`DURABLE` configs (no time or size retention, no compaction), the
cluster's default replication factor unless ``KAFKA_REPLICATION_FACTOR`` says otherwise, and
``min.insync.replicas`` of 2 on a replicated topic (``acks=all`` then means two copies), and
warns at start-up about an existing topic whose configs would lose work
(:func:`topic_warnings`). A broker that reports no topic configs (the local Tansu) is not
checked.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from crawler.config import readers as config
from crawler.config.readers import SettingError

if TYPE_CHECKING:
    from scrapy.settings import BaseSettings

logger = logging.getLogger(__name__)

#: the configs of every topic the crawler creates (``KAFKA_TOPIC_CONFIG`` adds or overrides)
DURABLE = {"retention.ms": "-1", "retention.bytes": "-1", "cleanup.policy": "delete"}
#: the replicas ``acks=all`` must reach on a replicated topic, unless KAFKA_MIN_INSYNC_REPLICAS
SAFE_INSYNC = 2
CLUSTER_DEFAULT = -1  # CreateTopics' replication factor: the broker's default.replication.factor


@dataclass(frozen=True)
class TopicPolicy:
    """How the crawler creates its topics (``KAFKA_REPLICATION_FACTOR``,
    ``KAFKA_MIN_INSYNC_REPLICAS``, ``KAFKA_TOPIC_CONFIG``); 0 means "the cluster's default"
    and "2 on a replicated topic"."""

    replication: int = 0
    min_insync: int = 0
    extra: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_settings(cls, settings: BaseSettings) -> TopicPolicy:
        policy = cls(
            replication=config.get_int(settings, "KAFKA_REPLICATION_FACTOR", minimum=0),
            min_insync=config.get_int(settings, "KAFKA_MIN_INSYNC_REPLICAS", minimum=0),
            extra={str(k): str(v) for k, v in
                   config.get_dict(settings, "KAFKA_TOPIC_CONFIG").items()})
        policy.check()
        return policy

    def check(self) -> None:
        if self.replication and self.min_insync > self.replication:
            raise SettingError("KAFKA_MIN_INSYNC_REPLICAS", f"{self.min_insync} is more than "
                               f"KAFKA_REPLICATION_FACTOR={self.replication}: no write with "
                               "acks=all could succeed")
        if "min.insync.replicas" in self.extra:
            raise SettingError("KAFKA_TOPIC_CONFIG", "'min.insync.replicas' comes from "
                               "KAFKA_MIN_INSYNC_REPLICAS: set it there")

    def insync_for(self, replicas: int) -> int | None:
        """``min.insync.replicas`` for a topic of *replicas* replicas (None: leave it)."""
        if self.min_insync:
            return self.min_insync
        return min(SAFE_INSYNC, replicas) if replicas > 1 else None

    def create_configs(self) -> dict[str, str]:
        """The configs of a new topic (``min.insync.replicas`` when its replicas are known)."""
        configs = {**DURABLE, **self.extra}
        insync = self.insync_for(self.replication) if self.replication else self.min_insync
        if insync:
            configs["min.insync.replicas"] = str(insync)
        return configs


def _days(ms: str) -> str:
    try:
        return f"{int(ms) / 86_400_000:.3g} days"
    except ValueError:
        return "not a number of milliseconds"


def topic_warnings(topic: str, configs: dict[str, str], replicas: int, brokers: int,
                   policy: TopicPolicy) -> list[str]:
    """What in an existing topic's *configs* (name -> value) can lose the crawl's work."""
    fix = f"kafka-configs.sh --alter --entity-type topics --entity-name {topic} --add-config"
    found = []
    retention = configs.get("retention.ms")
    if retention not in (None, "-1") and retention != policy.extra.get("retention.ms"):
        found.append(f"retention.ms={retention} ({_days(retention)}): the broker deletes "
                     f"requests older than that, consumed or not; `{fix} retention.ms=-1`")
    size = configs.get("retention.bytes")
    if size not in (None, "-1") and size != policy.extra.get("retention.bytes"):
        found.append(f"retention.bytes={size}: the broker deletes the oldest requests of a "
                     f"partition past that size, consumed or not; `{fix} retention.bytes=-1`")
    if "compact" in (configs.get("cleanup.policy") or ""):
        found.append(f"cleanup.policy={configs['cleanup.policy']}: compaction keeps one record "
                     f"per key, and the frontier's records share keys; `{fix} "
                     "cleanup.policy=delete`")
    want = policy.insync_for(replicas)
    insync = configs.get("min.insync.replicas")
    if want and insync is not None and insync.isdigit() and int(insync) < want:
        found.append(f"min.insync.replicas={insync} with {replicas} replicas: a write "
                     f"acknowledged with acks=all may exist on one broker only; `{fix} "
                     f"min.insync.replicas={want}`")
    if replicas == 1 and brokers > 1:
        found.append(f"one replica on a cluster of {brokers} brokers: losing one broker loses "
                     "its partitions (create the crawl's topics with KAFKA_REPLICATION_FACTOR)")
    return [f"Kafka topic {topic}: {text}" for text in found]


def create_missing(admin: Any, topics: dict[str, int], policy: TopicPolicy) -> list[str]:
    """Create the *topics* (name -> partitions) the broker lacks; returns their names."""
    from kafka.admin import NewTopic
    from kafka.errors import TopicAlreadyExistsError

    missing = [t for t in topics if t not in set(admin.list_topics())]
    if missing:
        configs = policy.create_configs()
        replication = policy.replication or CLUSTER_DEFAULT
        try:
            admin.create_topics([NewTopic(t, topics[t], replication, topic_configs=configs)
                                 for t in missing], timeout_ms=10000)
            logger.info("Created topics %s (%s)", ", ".join(missing),
                        ", ".join(f"{k}={v}" for k, v in configs.items()))
        except TopicAlreadyExistsError:
            pass
    return missing


def secure_and_check(admin: Any, described: list[dict[str, Any]], created: list[str],
                     policy: TopicPolicy) -> None:
    """Give the topics just *created* on the cluster's default replication their
    ``min.insync.replicas``, then warn about every topic whose configs can lose work."""
    from kafka.admin import ConfigResource, ConfigResourceType
    from kafka.errors import KafkaError

    replicas = {d["name"]: len(d["partitions"][0]["replica_nodes"]) if d["partitions"] else 0
                for d in described}
    try:
        if not policy.replication and not policy.min_insync:  # else set at creation
            insync = {t: policy.insync_for(replicas[t]) for t in created}
            todo = [ConfigResource(ConfigResourceType.TOPIC, t, {"min.insync.replicas": str(n)})
                    for t, n in insync.items() if n]
            if todo:
                admin.alter_configs(todo, raise_on_unknown=False)
        found = admin.describe_configs(
            [ConfigResource(ConfigResourceType.TOPIC, t) for t in replicas], config_filter="all")
        brokers = len(admin.describe_cluster().get("brokers", []))
    except KafkaError as exc:  # e.g. no DescribeConfigs/AlterConfigs right on a managed cluster
        logger.warning("Cannot read or set the configs of the topics %s (%s): check by hand "
                       "that they keep unconsumed records (docs/cluster.md, durable topics)",
                       ", ".join(replicas), type(exc).__name__)
        return
    configs = {name: {k: str(v.get("value")) for k, v in values.items()
                      if v.get("value") is not None}
               for name, values in found.get("topic", {}).items()}
    if not any(configs.values()):
        logger.debug("The broker reports no topic configs: retention and replication of %s "
                     "are not checked", ", ".join(replicas))
        return
    for topic, count in replicas.items():
        for warning in topic_warnings(topic, configs.get(topic, {}), count, brokers, policy):
            logger.warning(warning)
