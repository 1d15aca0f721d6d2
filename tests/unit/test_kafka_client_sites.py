"""Every place that builds a kafka-python client passes the Kafka security settings: the
workers' topics, producer and consumer, the start-up check, ``scrapy seed``, ``scrapy
cluster purge`` and the benchmarks. The kafka-python classes are replaced by recorders;
no secret shows in any log line."""

from __future__ import annotations

import argparse
import asyncio
import logging
from collections.abc import Iterator
from typing import Any

import kafka
import pytest
from conftest import SETTINGS, MemSpider
from scrapy.settings import Settings
from scrapy.utils.test import get_crawler

from benchmarks import micro_frontier
from crawler.commands import cluster, preflight, seed
from crawler.frontier import clients as frontier_clients
from crawler.frontier import crawllife
from crawler.frontier.config import FrontierConfig
from crawler.frontier.seedpublish import Publisher

SECRET = "s3cr3t-never-logged"
SECURE = {"KAFKA_SECURITY_PROTOCOL": "SASL_SSL", "KAFKA_SASL_MECHANISM": "SCRAM-SHA-512",
          "KAFKA_SASL_USERNAME": "crawler", "KAFKA_SASL_PASSWORD": SECRET,
          "KAFKA_CLIENT_PARAMS": {"connections_max_idle_ms": 123_456}}
EXPECTED = {"security_protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-512",
            "sasl_plain_username": "crawler", "sasl_plain_password": SECRET,
            "ssl_check_hostname": True, "connections_max_idle_ms": 123_456}
built: list[tuple[str, dict[str, Any]]] = []


class Recorder:
    DEFAULT_CONFIG: dict[str, Any] = {}

    def __init__(self, *topics: str, **config: Any) -> None:
        built.append((type(self).__name__, config))

    def close(self, *args: Any, **kwargs: Any) -> None:
        pass


class FakeAdmin(Recorder):
    DEFAULT_CONFIG = kafka.KafkaAdminClient.DEFAULT_CONFIG
    topics: dict[str, int] = {}

    def list_topics(self) -> list[str]:
        return list(self.topics)

    def create_topics(self, new: list[Any], timeout_ms: int) -> None:
        self.topics.update({t.name: t.num_partitions for t in new})

    def wait_for_topics(self, names: list[str], timeout_ms: int) -> None:
        assert set(names) <= set(self.topics)

    def describe_topics(self, names: list[str]) -> list[dict[str, Any]]:
        return [{"name": n, "partitions": [{"partition": p, "replica_nodes": [1]}
                                           for p in range(self.topics[n])]} for n in names]

    def describe_configs(self, resources: list[Any], config_filter: str) -> dict[str, Any]:
        return {"topic": {r.name: {} for r in resources}}  # a broker that reports none

    def describe_cluster(self) -> dict[str, Any]:
        return {"brokers": [{"node_id": 1}]}


class FakeProducer(Recorder):
    DEFAULT_CONFIG = kafka.KafkaProducer.DEFAULT_CONFIG

    def flush(self) -> None:
        pass


class FakeConsumer(Recorder):
    DEFAULT_CONFIG = kafka.KafkaConsumer.DEFAULT_CONFIG


@pytest.fixture(autouse=True)
def recorders(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
              ) -> Iterator[None]:
    built.clear()
    FakeAdmin.topics = {}
    for name, fake in (("KafkaAdminClient", FakeAdmin), ("KafkaProducer", FakeProducer),
                       ("KafkaConsumer", FakeConsumer)):
        monkeypatch.setattr(kafka, name, fake)
    caplog.set_level(logging.DEBUG)
    yield
    assert SECRET not in caplog.text


def settings(**values: Any) -> Settings:
    return get_crawler(MemSpider, {**SETTINGS, **SECURE, **values}).settings


def assert_secured(kinds: list[str]) -> None:
    assert [kind for kind, _ in built] == kinds
    for _, config in built:
        assert config.items() >= EXPECTED.items(), config


def test_the_worker_s_topics_producer_and_consumer() -> None:
    cfg = FrontierConfig.from_settings(settings(), "mem")
    assert cfg.kafka.sasl_password == SECRET and SECRET not in repr(cfg)
    frontier_clients.connect(cfg, "w1", lambda records: None, lambda: 0)
    assert_secured(["FakeAdmin", "FakeProducer", "FakeConsumer"])
    assert built[-1][1]["fetch_max_bytes"] == cfg.fetch_max_bytes == 1024 * 1024


def test_the_start_up_check(monkeypatch: pytest.MonkeyPatch) -> None:
    async def reached(*args: Any) -> None:
        return None

    monkeypatch.setattr(preflight, "_reach_redis", reached)
    monkeypatch.setattr(preflight, "_reach_mongo", reached)
    preflight.preflight(settings(MONGO_URI="mongodb://127.0.0.1:9/"), "mem")
    assert_secured(["FakeAdmin"])


def test_scrapy_seed() -> None:
    Publisher.open(settings(), "c1")
    assert_secured(["FakeAdmin", "FakeProducer"])


def test_scrapy_cluster_purge(monkeypatch: pytest.MonkeyPatch) -> None:
    async def no_keys(client: Any, crawl: str) -> Any:
        return
        yield

    monkeypatch.setattr(crawllife, "crawl_keys", no_keys)
    asyncio.run(cluster._purge_idle(settings(), None, "c1", yes=False))  # type: ignore[arg-type]
    assert_secured(["FakeAdmin"])


def test_the_benchmarks(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in SECURE.items():
        monkeypatch.setenv(name, value if isinstance(value, str) else
                           '{"connections_max_idle_ms": 123456}')
    options = micro_frontier.kafka_options("127.0.0.1:9")
    asyncio.run(micro_frontier.new_topic(options))
    monkeypatch.setattr(micro_frontier.Sender, "start", lambda self: None)
    asyncio.run(micro_frontier.new_sender(options))
    assert_secured(["FakeAdmin", "FakeProducer"])


def test_scrapy_seed_says_a_refusal_in_one_line(monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    class Refused(FakeAdmin):
        def __init__(self, **config: Any) -> None:
            raise kafka.errors.KafkaTimeoutError("Unable to bootstrap")

    monkeypatch.setattr(kafka, "KafkaAdminClient", Refused)
    command = seed.Command()
    command.settings = settings()
    command.run(["mem", "https://a.test/"], argparse.Namespace(
        crawl_id=None, files=[], scope=None, format="auto", progress=False))
    err = capsys.readouterr().err
    assert command.exitcode == 1 and err.count("\n") == 1
    assert err.startswith("scrapy seed: Cannot reach the service of KAFKA_BOOTSTRAP_SERVERS")
    assert "KAFKA_SASL_*" in err and SECRET not in err
