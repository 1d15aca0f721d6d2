"""The window of recently consumed fingerprints that drops a raced second copy."""

from __future__ import annotations

import pytest
from scrapy import Request, Spider
from scrapy.utils.test import get_crawler

from crawler.frontier.consumer import Record
from crawler.frontier.recent import RecentFingerprints
from crawler.frontier.scheduler import KafkaScheduler


def test_a_second_copy_from_the_same_partition_and_epoch_is_seen() -> None:
    recent = RecentFingerprints(10)
    assert not recent.seen(b"a", ("t", 0, 1))
    assert recent.seen(b"a", ("t", 0, 1))
    assert not recent.seen(b"b", ("t", 0, 1))


def test_a_copy_from_another_epoch_or_partition_is_not_seen_and_moves_the_window() -> None:
    recent = RecentFingerprints(10)
    recent.seen(b"a", ("t", 0, 1))
    assert not recent.seen(b"a", ("t", 0, 2))  # redelivered after a rebalance: crawl it
    assert recent.seen(b"a", ("t", 0, 2))  # its raced copy in the new epoch: drop it
    assert not recent.seen(b"a", ("t", 3, 2))


def test_the_window_keeps_two_generations_and_forgets_older_ones() -> None:
    recent = RecentFingerprints(2)
    for fp in (b"a", b"b", b"c", b"d"):
        assert not recent.seen(fp, "p")
    assert len(recent) == 4
    assert recent.seen(b"a", "p")  # still in the previous generation
    recent.seen(b"e", "p")
    recent.seen(b"f", "p")  # a and b's generation is gone now
    assert not recent.seen(b"b", "p")


def test_size_zero_remembers_nothing() -> None:
    recent = RecentFingerprints(0)
    assert not recent.seen(b"a", "p")
    assert not recent.seen(b"a", "p")
    with pytest.raises(ValueError):
        RecentFingerprints(-1)


class _Spider(Spider):
    name = "recent"

    def parse(self, response):  # type: ignore[no-untyped-def]
        pass


def _scheduler(window: int = 100) -> KafkaScheduler:
    crawler = get_crawler(_Spider, {
        "KAFKA_RECENT_WINDOW": window, "CRAWL_ID": "recent-test",
        "KAFKA_BOOTSTRAP_SERVERS": "127.0.0.1:1", "REDIS_URL": "redis://127.0.0.1:1",
        "MONGO_URI": "mongodb://127.0.0.1:1"})
    return KafkaScheduler.from_crawler(crawler)


def _record(offset: int, epoch: int = 1) -> Record:
    return Record("c.requests", 4, offset, b"{}", epoch)


def test_the_scheduler_drops_only_a_raced_copy_of_a_filtered_request() -> None:
    scheduler = _scheduler()
    url = "http://example.com/a"
    assert not scheduler._raced_copy(Request(url), _record(10))
    assert scheduler._raced_copy(Request(url), _record(11))
    assert not scheduler._raced_copy(Request(url, dont_filter=True), _record(12))
    assert not scheduler._raced_copy(Request(url), _record(13, epoch=2))
    assert scheduler.stats.get_value("frontier/raced_copies_dropped") == 1


def test_a_negative_window_is_a_setting_error() -> None:
    from crawler.config.readers import SettingError

    with pytest.raises(SettingError, match="KAFKA_RECENT_WINDOW"):
        _scheduler(-5)
