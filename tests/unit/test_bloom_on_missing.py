"""BLOOM_ON_MISSING is read and checked at start-up, by its reader and by the scheduler's
from_crawler (what the setting does to a crawl: tests/e2e/test_bloom_missing.py)."""

from __future__ import annotations

import pytest
from support.scheduler import scheduler_for

from crawler.config.readers import SettingError


def test_bloom_on_missing_is_validated() -> None:
    from scrapy.settings import Settings

    from crawler.config import defaults
    from crawler.config.readers import SettingError
    from crawler.dedup.backend import on_missing_setting

    assert on_missing_setting(Settings({"BLOOM_ON_MISSING": defaults.BLOOM_ON_MISSING})) == "pause"
    assert on_missing_setting(Settings({"BLOOM_ON_MISSING": "Recreate"})) == "recreate"
    with pytest.raises(SettingError, match="BLOOM_ON_MISSING"):
        on_missing_setting(Settings({"BLOOM_ON_MISSING": "ignore"}))


def test_bloom_on_missing_is_checked_by_from_crawler(crawl_id: str) -> None:
    with pytest.raises(SettingError, match="BLOOM_ON_MISSING"):
        scheduler_for("redis://127.0.0.1:1", crawl_id, BLOOM_ON_MISSING="ignore")
