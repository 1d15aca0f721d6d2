"""StorageConfig: every MONGO_* setting read and checked once, shared by the item pipeline and
the failure store (no MongoDB needed: nothing connects before open_spider / the first record)."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from scrapy import Spider
from scrapy.exceptions import NotConfigured
from scrapy.settings import Settings
from scrapy.utils.test import get_crawler

from crawler.config.readers import SettingError
from crawler.pipelines.mongo import MongoPipeline
from crawler.storage.failures import COLLECTION_SUFFIX, FailureStore
from crawler.storage.settings import StorageConfig

URI = "mongodb://127.0.0.1:1"


class Shop(Spider):
    name = "shop"


@pytest.fixture(autouse=True)
def _no_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("MONGO_URI", "MONGO_DATABASE", "CRAWL_ID"):
        monkeypatch.delenv(name, raising=False)


def build(**values: Any) -> StorageConfig | None:
    return StorageConfig.from_settings(Settings(values), "shop")


def test_no_uri_means_no_storage() -> None:
    assert build() is None
    assert build(MONGO_BATCH_SIZE=0) is None  # nothing else is read in single-node mode


def test_defaults() -> None:
    cfg = build(MONGO_URI=URI)
    assert cfg is not None
    assert (cfg.uri, cfg.database, cfg.crawl_id) == (URI, "crawler", "shop")
    assert (cfg.batch_size, cfg.batch_timeout) == (100, 0.2)
    assert cfg.key_fields == ("url",) and cfg.indexes == ("url", "fetched_at")
    assert (cfg.write_concern, cfg.journal) == ("majority", True)
    assert (cfg.retry_backoff, cfg.retry_backoff_max) == (0.5, 30.0)
    assert (cfg.connect_timeout, cfg.timeout, cfg.write_timeout, cfg.index_timeout) == (
        5.0, 30.0, 20.0, 300.0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.uri = "other"  # type: ignore[misc]


@pytest.mark.parametrize(("values", "setting"), [
    ({"MONGO_KEY_FIELDS": []}, "MONGO_KEY_FIELDS"),
    ({"MONGO_DATABASE": "a.b"}, "MONGO_DATABASE"),
    ({"MONGO_BATCH_SIZE": 0}, "MONGO_BATCH_SIZE"),
    ({"MONGO_BATCH_TIMEOUT": 0}, "MONGO_BATCH_TIMEOUT"),
    ({"MONGO_WRITE_CONCERN": "some"}, "MONGO_WRITE_CONCERN"),
    ({"MONGO_WRITE_CONCERN": 0}, "MONGO_WRITE_CONCERN"),  # with MONGO_JOURNAL=True
    ({"MONGO_RETRY_BACKOFF": 2, "MONGO_RETRY_BACKOFF_MAX": 1}, "MONGO_RETRY_BACKOFF_MAX"),
    ({"MONGO_WRITE_TIMEOUT": 30}, "MONGO_WRITE_TIMEOUT"),  # not shorter than MONGO_TIMEOUT
    ({"MONGO_INDEX_TIMEOUT": -1}, "MONGO_INDEX_TIMEOUT"),
    ({"CONNECT_TIMEOUT": 0}, "CONNECT_TIMEOUT"),
    ({"CRAWL_ID": "no spaces"}, "CRAWL_ID"),
])
def test_a_bad_value_names_its_setting(values: dict[str, Any], setting: str) -> None:
    with pytest.raises(SettingError) as caught:
        build(MONGO_URI=URI, **values)
    assert caught.value.setting == setting


def test_the_pipeline_and_the_failure_store_share_one_config() -> None:
    crawler = get_crawler(Shop, {"MONGO_URI": URI, "MONGO_BATCH_SIZE": 7, "MONGO_JOURNAL": False,
                                 "MONGO_WRITE_CONCERN": 1, "CRAWL_ID": "c1"})
    cfg = StorageConfig.of(crawler)
    assert cfg is StorageConfig.of(crawler)
    pipeline = MongoPipeline.from_crawler(crawler)
    store = FailureStore.from_crawler(crawler)
    assert store is not None and cfg is not None
    assert (pipeline.collection_name, store.collection_name) == ("c1", "c1" + COLLECTION_SUFFIX)
    assert pipeline.batch_size == 7
    assert (pipeline.write_concern, pipeline.journal) == (store.write_concern, store.journal)
    assert (pipeline.write_concern, pipeline.journal) == (1, False)


def test_without_uri_the_pipeline_is_off_and_there_is_no_failure_store() -> None:
    crawler = get_crawler(Shop)
    with pytest.raises(NotConfigured):
        MongoPipeline.from_crawler(crawler)
    assert FailureStore.from_crawler(crawler) is None
