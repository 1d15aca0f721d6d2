"""Recrawl's pure parts: the setting, the generation clock, the pre-filter and the recent
window forgetting at a generation change, the status line, the upsert's shape."""

from __future__ import annotations

import pytest
from bson import encode
from bson.raw_bson import RawBSONDocument
from pymongo import ReplaceOne, UpdateOne
from scrapy.settings import Settings

from crawler.config.readers import SettingError
from crawler.dedup.backend import load_backend
from crawler.dedup.generations import GenerationClock, RecrawlConfig
from crawler.dedup.local import LocalBloom
from crawler.frontier.recent import RecentFingerprints
from crawler.operations.clusterview import _dedup_line
from crawler.storage.upserts import upsert


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_recrawl_after_is_read_once_and_checked() -> None:
    assert RecrawlConfig.from_settings(Settings()).after == 0
    assert not RecrawlConfig.from_settings(Settings()).enabled
    assert RecrawlConfig.from_settings(Settings({"RECRAWL_AFTER": "3600"})).after == 3600
    for bad in (-1, "soon", float("inf")):
        with pytest.raises(SettingError, match="RECRAWL_AFTER"):
            RecrawlConfig.from_settings(Settings({"RECRAWL_AFTER": bad}))


def test_recrawl_needs_the_redis_bloom_backend() -> None:
    settings = Settings({"RECRAWL_AFTER": 60,
                         "FRONTIER_DEDUP_CLASS": "crawler.dedup.local.LocalBloomDupeFilter"})
    with pytest.raises(SettingError, match="RECRAWL_AFTER"):
        load_backend(settings)
    settings.set("RECRAWL_AFTER", 0)
    load_backend(settings)


def test_the_clock_estimates_the_generation_from_the_last_answer_of_redis() -> None:
    now = Clock()
    clock = GenerationClock(10.0, now=now)
    assert clock.estimate() == 0  # never synced
    clock.sync(4, started=1000.0, redis_now=1003.0)  # Redis is 903 s ahead of us
    assert clock.estimate() == 4 and not clock.due()
    assert clock.age() == pytest.approx(3.0)
    now.t += 6.9
    assert clock.estimate() == 4
    now.t += 0.2
    assert clock.estimate() == 5 and clock.due()
    now.t += 25
    assert clock.estimate() == 7
    with pytest.raises(ValueError):
        GenerationClock(0)


def test_the_pre_filter_forgets_everything_when_the_generation_changes() -> None:
    generation = [1]
    local = LocalBloom(1000, 0.001, recrawl=lambda: generation[0])
    assert local.add(b"a") and b"a" in local
    assert not local.add(b"a")
    generation[0] = 2
    assert b"a" not in local
    assert local.add(b"a")
    plain = LocalBloom(1000, 0.001)
    plain.add(b"a")
    assert b"a" in plain


def test_the_recent_window_drops_a_copy_only_within_one_generation() -> None:
    generation = [1]
    recent = RecentFingerprints(10, recrawl=lambda: generation[0])
    assert not recent.seen(b"a", ("t", 0, 1))
    assert recent.seen(b"a", ("t", 0, 1))  # a raced copy
    generation[0] = 2
    assert not recent.seen(b"a", ("t", 0, 1))  # produced again because it was due
    assert RecentFingerprints(10).seen(b"x", 1) is False


def test_status_shows_the_generation_and_its_age() -> None:
    bloom = {"key": "{c}:bloom:g3", "items": 5, "capacity": 10, "fill": 0.5, "slices": 1,
             "current_fill": 0.5, "memory_bytes": 2**20, "generation": 3,
             "generation_age": 12.4, "recrawl_after": 60.0, "previous_memory_bytes": 2**21}
    line = _dedup_line(bloom)
    assert "recrawl generation 3, 12 s old (RECRAWL_AFTER 60 s; previous generation 2.0 MiB)" \
        in line
    assert "recrawl" not in _dedup_line({**bloom, "generation": 0})


def test_a_page_with_a_content_hash_is_an_update_pipeline_others_a_replace() -> None:
    plain = upsert("k", RawBSONDocument(encode({"_id": "k", "url": "u"})))
    assert isinstance(plain, ReplaceOne)
    page = upsert("k", RawBSONDocument(encode({
        "_id": "k", "url": "$not.a.path", "content_hash": "h", "fetched_at": "t"})))
    assert isinstance(page, UpdateOne)
    stage = page._doc[0]["$replaceWith"]["$cond"]  # the document goes in as a literal
    assert stage[2]["$mergeObjects"][0] == {"$literal": {
        "_id": "k", "url": "$not.a.path", "content_hash": "h", "fetched_at": "t"}}
