"""LocalBloomDupeFilter and LocalBloom (single-node mode, no services)."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from scrapy import Request, Spider
from scrapy.utils.misc import build_from_crawler
from scrapy.utils.test import get_crawler

from crawler.config.readers import SettingError
from crawler.dedup.local import LocalBloom, LocalBloomDupeFilter


def make_filter(**settings: Any) -> tuple[LocalBloomDupeFilter, Any]:
    crawler = get_crawler(Spider, settings_dict=settings)
    crawler.stats.open_spider()
    return build_from_crawler(LocalBloomDupeFilter, crawler), crawler


def test_filters_seen_requests_and_counts_them(caplog: pytest.LogCaptureFixture) -> None:
    dupefilter, crawler = make_filter()
    spider = Spider("test")
    first = Request("https://example.com/a?x=1&y=2")
    assert dupefilter.request_seen(first) is False
    # Same fingerprint: canonical URL (query order) and same method and body.
    again = Request("https://example.com/a?y=2&x=1")
    assert dupefilter.request_seen(again) is True
    with caplog.at_level(logging.DEBUG, logger="crawler.dedup.local"):
        dupefilter.log(again, spider)
        dupefilter.log(again, spider)
    assert crawler.stats.get_value("bloom/filtered") == 2
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 1  # without DUPEFILTER_DEBUG only the first is shown
    assert "no more duplicates will be shown" in messages[0]


def test_different_requests_are_not_filtered() -> None:
    dupefilter, crawler = make_filter()
    requests = [Request(f"https://example.com/page/{i}") for i in range(5000)]
    requests += [Request("https://example.com/page/1", method="POST")]
    requests += [Request("https://example.com/page/1", method="POST", body=b"q=2")]
    assert not any(dupefilter.request_seen(r) for r in requests)
    assert all(dupefilter.request_seen(r) for r in requests)
    assert len(dupefilter.bloom) == len(requests)
    assert crawler.stats.get_value("bloom/filtered") is None


def test_debug_logs_every_duplicate(caplog: pytest.LogCaptureFixture) -> None:
    dupefilter, _ = make_filter(DUPEFILTER_DEBUG=True)
    spider = Spider("test")
    request = Request("https://example.com/", headers={"Referer": "https://example.com/r"})
    dupefilter.request_seen(request)
    assert dupefilter.request_seen(request)
    with caplog.at_level(logging.DEBUG, logger="crawler.dedup.local"):
        dupefilter.log(request, spider)
        dupefilter.log(request, spider)
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 2
    assert "referer: https://example.com/r" in messages[0]


def test_settings_are_read_and_validated() -> None:
    dupefilter, _ = make_filter(BLOOM_LOCAL_CAPACITY=100, BLOOM_LOCAL_ERROR_RATE=0.01)
    # Grows past its initial capacity; a few false positives are allowed (1 % at most).
    new = sum(not dupefilter.request_seen(Request(f"https://example.com/{i}")) for i in range(2000))
    assert 1980 <= new <= 2000
    assert len(dupefilter.bloom) == new
    with pytest.raises(SettingError, match="BLOOM_LOCAL_CAPACITY"):
        make_filter(BLOOM_LOCAL_CAPACITY="many")
    with pytest.raises(SettingError, match="BLOOM_LOCAL_ERROR_RATE"):
        make_filter(BLOOM_LOCAL_ERROR_RATE=1.5)


def test_local_bloom() -> None:
    bloom = LocalBloom(1000, 0.001)
    assert b"a" * 20 not in bloom
    assert bloom.add(b"a" * 20) is True
    assert bloom.add(b"a" * 20) is False
    assert b"a" * 20 in bloom and b"b" * 20 not in bloom
    assert len(bloom) == 1
