"""The frontier's settings: read once, each with its bounds in one place, shared with every
other reader (the staleness rule, the retry middleware, ``scrapy cluster``); the start-up
preflight reads all of them, as the scheduler does."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from conftest import SETTINGS, MemSpider
from scrapy import Request
from scrapy.settings import Settings
from scrapy.utils.test import get_crawler

from crawler.commands.preflight import preflight
from crawler.config.readers import SettingError
from crawler.connections.options import RedisOptions
from crawler.frontier import config as frontier
from crawler.frontier.config import FrontierConfig
from crawler.frontier.crawlstate import stale_after, stale_after_setting


def settings(**values: Any) -> Settings:
    return get_crawler(MemSpider, {**SETTINGS, **values}).settings


def test_the_config_is_frozen_and_has_no_instance_dict() -> None:
    cfg = FrontierConfig.from_settings(settings(), "mem")
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.buffer_size = 1  # type: ignore[misc]
    assert not hasattr(cfg, "__dict__")
    assert cfg.partition_key(Request("https://a.test/x")) == b"https://a.test/x"  # by URL


def test_the_redis_options_are_the_shared_pool_s() -> None:
    s = settings(REDIS_PARAMS={"client_name": "w"}, REDIS_MAX_CONNECTIONS=40,
                 CONNECT_TIMEOUT=3)
    cfg = FrontierConfig.from_settings(s, "mem")
    assert cfg.redis == RedisOptions.from_settings(s)
    assert (cfg.redis.params, cfg.redis.max_connections, cfg.connect_timeout) == (
        {"client_name": "w"}, 40, 3.0)


@pytest.mark.parametrize(("name", "value"), [
    ("REDIS_MAX_CONNECTIONS", 1), ("REDIS_PARAMS", "not a dict"), ("CONNECT_TIMEOUT", 0),
    ("CRAWL_HEARTBEAT_INTERVAL", 0.01), ("KAFKA_SESSION_TIMEOUT_MS", 500),
    ("KAFKA_LEASE_TIMEOUT", 0.5), ("KAFKA_FETCH_MAX_BYTES", 100)])
def test_a_bad_value_names_its_setting(name: str, value: Any) -> None:
    with pytest.raises(SettingError, match=name):
        FrontierConfig.from_settings(settings(**{name: value}), "mem")


def test_a_fetch_brings_a_mebibyte_of_records_by_default() -> None:
    """kafka-python's 50 MiB (1 MiB a partition) had a worker that buffers 256 requests
    hold megabytes of records it would not reach for minutes."""
    assert FrontierConfig.from_settings(settings(), "mem").fetch_max_bytes == 1024 * 1024
    cfg = FrontierConfig.from_settings(settings(KAFKA_FETCH_MAX_BYTES=65536), "mem")
    assert cfg.fetch_max_bytes == 65536


def test_the_frontier_needs_a_redis_url() -> None:
    with pytest.raises(SettingError, match=r"REDIS_URL.*required by the Kafka frontier"):
        FrontierConfig.from_settings(settings(REDIS_URL=""), "mem")


@pytest.mark.parametrize(("name", "value"), [
    ("CRAWL_HEARTBEAT_INTERVAL", 0.01), ("KAFKA_SESSION_TIMEOUT_MS", 999)])
def test_the_staleness_rule_reads_the_same_bounds_as_the_frontier(name: str,
                                                                   value: Any) -> None:
    s = settings(**{name: value})
    with pytest.raises(SettingError) as by_rule:
        stale_after_setting(s)
    with pytest.raises(SettingError) as by_frontier:
        FrontierConfig.from_settings(s, "mem")
    assert str(by_rule.value) == str(by_frontier.value)


def test_one_reader_per_setting_and_the_frontier_s_rule_at_the_defaults() -> None:
    s = settings(CRAWL_HEARTBEAT_INTERVAL=2, KAFKA_SESSION_TIMEOUT_MS=10000,
                 KAFKA_LEASE_TIMEOUT=30)
    cfg = FrontierConfig.from_settings(s, "mem")
    assert (frontier.heartbeat_interval(s), frontier.session_timeout_ms(s),
            frontier.lease_timeout(s)) == (cfg.heartbeat_interval, cfg.session_timeout_ms,
                                           cfg.lease_timeout) == (2.0, 10000, 30.0)
    assert stale_after_setting(s) == stale_after(2.0, 10000) == 11.0


DISTRIBUTED = {"KAFKA_BOOTSTRAP_SERVERS": "127.0.0.1:1", "REDIS_URL": "redis://127.0.0.1:1",
               "MONGO_URI": "mongodb://127.0.0.1:1", "CRAWL_ID": "mem"}


@pytest.mark.parametrize(("name", "value"), [
    ("REDIS_MAX_CONNECTIONS", 1), ("REDIS_PARAMS", "not a dict"), ("CONNECT_TIMEOUT", -1),
    ("CRAWL_HEARTBEAT_INTERVAL", 0), ("KAFKA_LEASE_TIMEOUT", 0), ("CRAWL_STATE_TTL", -1),
    ("FRONTIER_DEDUP_CLASS", "crawler.nowhere.Bloom"), ("BLOOM_ERROR_RATE", 0.9),
    ("MALLOC_ARENA_MAX", -1), ("CLIENT_LOG_LEVEL", "chatty")])
def test_the_preflight_reads_what_the_scheduler_reads(name: str, value: Any) -> None:
    """A bad value of any setting the scheduler reads ends the start-up before any
    service is reached (the addresses here are unreachable)."""
    with pytest.raises(SettingError, match=name):
        preflight(Settings({**DISTRIBUTED, name: value}), "mem")


def test_the_scheduler_takes_the_start_up_checks_topics_once(monkeypatch) -> None:
    """The start-up check ensures the crawl's topics; the scheduler's open a moment later
    takes that answer instead of a second round of admin requests, once only."""
    from crawler.frontier import clients

    calls: list[dict[str, int]] = []

    def ensure(kafka: Any, topics: dict[str, int], **kwargs: Any) -> dict[str, int]:
        calls.append(topics)
        return dict.fromkeys(topics, 3)

    monkeypatch.setattr(clients.connection, "ensure_topics", ensure)
    cfg = FrontierConfig.from_settings(settings(), "mem")
    counts = clients.ensure_crawl_topics(cfg)  # the start-up check
    assert clients.ensure_crawl_topics(cfg, reuse=True) == counts and len(calls) == 1
    clients.ensure_crawl_topics(cfg, reuse=True)  # a second open: asks the broker again
    assert len(calls) == 2
    clients.ensure_crawl_topics(cfg)
    monkeypatch.setattr(clients, "CHECKED_FOR", 0.0)
    clients.ensure_crawl_topics(cfg, reuse=True)  # too old: asks again
    assert len(calls) == 4


@pytest.mark.parametrize(("buffer", "unacked", "refused"), [
    (256, 512, True), (256, 300, True), (256, 513, False), (4, 8, True), (4, 9, False)])
def test_max_unacked_must_be_more_than_twice_the_buffer(buffer: int, unacked: int,
                                                       refused: bool) -> None:
    """At most twice the buffer, a worker could stall for ever at the bound (issue 33):
    refused at start-up, in one line naming both settings."""
    s = settings(KAFKA_BUFFER_SIZE=buffer, KAFKA_MAX_UNACKED=unacked)
    if not refused:
        assert FrontierConfig.from_settings(s, "mem").max_unacked == unacked
        return
    with pytest.raises(SettingError) as error:
        FrontierConfig.from_settings(s, "mem")
    assert "KAFKA_MAX_UNACKED" in str(error.value) and "KAFKA_BUFFER_SIZE" in str(error.value)
    assert f"({buffer})" in str(error.value) and "\n" not in str(error.value)
