"""FRONTIER_DEDUP_CLASS picks the frontier's shared dupefilter; DUPEFILTER_CLASS does not."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from conftest import SETTINGS, MemSpider
from scrapy.utils.test import get_crawler

from crawler.config.keys import CrawlKeys
from crawler.config.readers import SettingError
from crawler.connections.clients import redis_client
from crawler.dedup.dupefilter import RedisBloom
from crawler.frontier.memory import MemoryBloom
from crawler.frontier.scheduler import KafkaScheduler

BASE = {k: v for k, v in SETTINGS.items() if k != "FRONTIER_DEDUP_CLASS"}


def _scheduler(**settings: Any) -> KafkaScheduler:
    return KafkaScheduler.from_crawler(get_crawler(MemSpider, {**BASE, **settings}))


def test_the_default_is_the_redis_bloom_filter_of_the_crawl() -> None:
    scheduler = _scheduler(BLOOM_CAPACITY=1234, BLOOM_ON_MISSING="recreate")
    scheduler.redis = redis_client("redis://127.0.0.1:1")  # no I/O until used
    bloom = scheduler._bloom()
    assert isinstance(bloom, RedisBloom)
    assert bloom.key == CrawlKeys("mem").bloom == "{mem}:bloom"
    assert (bloom.capacity, bloom.on_missing) == (1234, "recreate")
    assert bloom.client is scheduler.redis


def test_the_setting_picks_another_backend() -> None:
    scheduler = _scheduler(FRONTIER_DEDUP_CLASS="crawler.frontier.memory.MemoryBloom")
    bloom = scheduler._bloom()
    assert isinstance(bloom, MemoryBloom) and bloom.key == "{mem}:bloom"


@pytest.mark.parametrize("path", ["crawler.nowhere.Bloom", "crawler.frontier.memory",
                                  "crawler.frontier.memory.MemoryLog"])
def test_a_backend_that_cannot_be_built_fails_at_start_up_naming_the_setting(path: str) -> None:
    with pytest.raises(SettingError, match="FRONTIER_DEDUP_CLASS"):
        _scheduler(FRONTIER_DEDUP_CLASS=path)


def test_the_backends_settings_are_checked_at_start_up() -> None:
    with pytest.raises(SettingError, match="BLOOM_ERROR_RATE"):
        _scheduler(BLOOM_ERROR_RATE=0.9)


def test_dupefilter_class_set_in_distributed_mode_says_it_has_no_effect(
        caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        _scheduler()
    assert "DUPEFILTER_CLASS" not in caplog.text
    with caplog.at_level(logging.WARNING):
        _scheduler(DUPEFILTER_CLASS="crawler.dedup.LocalBloomDupeFilter")
    assert "DUPEFILTER_CLASS (crawler.dedup.LocalBloomDupeFilter) has no effect" \
        in caplog.text
