"""The add-on registers every default at priority "default"; reading a setting gives what it
gave before registration, whatever set it (project, spider, -s, environment, nobody)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from scrapy import Spider
from scrapy.settings import Settings
from scrapy.utils.test import get_crawler

from crawler.addon import DistributedAddon
from crawler.config import readers
from crawler.config.readers import DEFAULT_PRIORITY, ENV_SETTINGS, SERVICE_SETTINGS

ROOT = Path(__file__).resolve().parents[2]
ADDON = {"ADDONS": {"crawler.addon.DistributedAddon": 0}}
DISTRIBUTED = {"KAFKA_BOOTSTRAP_SERVERS": "127.0.0.1:1", "REDIS_URL": "redis://127.0.0.1:1",
               "MONGO_URI": "mongodb://127.0.0.1:1"}


@pytest.fixture(autouse=True)
def _no_service_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ENV_SETTINGS:
        monkeypatch.delenv(name, raising=False)


def scrapy_settings(*args: str) -> str:
    env = {k: v for k, v in os.environ.items()
           if k not in ENV_SETTINGS and not k.startswith("SCRAPY_")}
    done = subprocess.run([sys.executable, "-m", "scrapy", "settings", *args], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_scrapy_settings_get_prints_the_default_from_the_project_directory() -> None:
    assert scrapy_settings("--get", "RATELIMIT_RATE") == str(readers.default("RATELIMIT_RATE"))
    assert scrapy_settings("--get", "MONGO_DATABASE") == "crawler"
    assert scrapy_settings("--getint", "KAFKA_PARTITIONS") == "12"


def test_scrapy_settings_get_prints_a_command_line_value() -> None:
    assert scrapy_settings("-s", "RATELIMIT_RATE=3.5", "--get", "RATELIMIT_RATE") == "3.5"


def test_every_default_is_in_the_settings_after_the_addon_ran() -> None:
    settings = get_crawler(Spider, ADDON).settings
    for name in readers.names():
        assert settings.getpriority(name) == DEFAULT_PRIORITY, name
        assert settings.get(name) == readers.default(name), name


def test_registered_lists_and_dicts_are_copies() -> None:
    settings = get_crawler(Spider, ADDON).settings
    assert settings.get("MONGO_KEY_FIELDS") is not readers.default("MONGO_KEY_FIELDS")
    assert settings.get("RATELIMIT_DOMAINS") is not readers.default("RATELIMIT_DOMAINS")


@pytest.mark.parametrize("priority", ["project", "cmdline"])
def test_user_values_win(priority: str) -> None:
    settings = Settings({"RATELIMIT_RATE": 5.0, "MONGO_KEY_FIELDS": ["id"]}, priority=priority)
    DistributedAddon.register_defaults(settings)
    assert settings.getfloat("RATELIMIT_RATE") == 5.0
    assert settings.getlist("MONGO_KEY_FIELDS") == ["id"]
    assert readers.get_float(settings, "RATELIMIT_RATE") == 5.0
    assert settings.get("RATELIMIT_BURST") == readers.default("RATELIMIT_BURST")


def test_spider_custom_settings_win_over_the_defaults() -> None:
    class Custom(Spider):
        name = "custom"
        custom_settings = {"RATELIMIT_RATE": 7.0}

    crawler = get_crawler(Custom, ADDON)
    assert readers.get_float(crawler.settings, "RATELIMIT_RATE") == 7.0


def test_distributed_mode_switches_the_rate_limiter_on_and_a_user_can_switch_it_off() -> None:
    """On by default: it holds each host's robots.txt Crawl-delay (with no rate of its own)."""
    on = get_crawler(Spider, {**ADDON, **DISTRIBUTED}).settings
    assert on.getbool("RATELIMIT_ENABLED") is True
    assert "crawler.middlewares.ratelimit.RateLimitMiddleware" in on.getdict(
        "DOWNLOADER_MIDDLEWARES")
    off = get_crawler(Spider, {**ADDON, **DISTRIBUTED, "RATELIMIT_ENABLED": False}).settings
    assert off.getbool("RATELIMIT_ENABLED") is False
    assert "crawler.middlewares.ratelimit.RateLimitMiddleware" not in off.getdict(
        "DOWNLOADER_MIDDLEWARES")


def test_user_set() -> None:
    settings = Settings({"RATELIMIT_RATE": 1.0})
    readers.register_defaults(settings)
    assert readers.user_set(settings, "RATELIMIT_RATE")
    assert not readers.user_set(settings, "RATELIMIT_BURST")
    assert not readers.user_set(Settings(), "RATELIMIT_BURST")


# -- reading gives the same with and without registration, in every case -------------------

USER = "user-value"


def _case(name: str, case: str, registered: bool, monkeypatch: pytest.MonkeyPatch) -> Any:
    settings = Settings()
    if case in ("project", "cmdline", "empty-project"):
        settings.set(name, "" if case == "empty-project" else USER, priority=case.split("-")[-1])
    if registered:
        readers.register_defaults(settings)
    if case == "spider":  # custom_settings land after the pre-crawler registration
        settings.set(name, USER, priority="spider")
    if case.startswith("env") or case == "empty-project":
        monkeypatch.setenv(name, "from-env")
    if case == "env-and-project":
        settings.set(name, USER, priority="project")
    return readers.raw(settings, name)


CASES = ["unset", "project", "cmdline", "spider", "env", "env-and-project", "empty-project"]


@pytest.mark.parametrize("case", CASES)
def test_reading_is_unchanged_by_registration(case: str, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in readers.names():
        before = _case(name, case, False, monkeypatch)
        monkeypatch.delenv(name, raising=False)
        after = _case(name, case, True, monkeypatch)
        monkeypatch.delenv(name, raising=False)
        assert after == before, (name, case)


def test_the_environment_still_wins_over_a_registered_default(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MONGO_DATABASE", "from_env")  # its default is not empty
    for name, value in DISTRIBUTED.items():
        monkeypatch.setenv(name, value)
    settings = get_crawler(Spider, ADDON).settings
    assert settings.get("MONGO_DATABASE") == "crawler"  # registered ...
    assert readers.get_str(settings, "MONGO_DATABASE") == "from_env"  # ... the environment wins
    assert readers.configured_services(settings) == list(SERVICE_SETTINGS)
    assert settings.get("SCHEDULER") == "crawler.frontier.scheduler.KafkaScheduler"


def test_a_project_value_still_wins_over_the_environment(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MONGO_DATABASE", "from_env")
    settings = Settings({"MONGO_DATABASE": "from_project"})
    readers.register_defaults(settings)
    assert readers.get_str(settings, "MONGO_DATABASE") == "from_project"


def test_download_delay_becomes_the_clusters_gap_and_scrapys_slot_delay_is_zero() -> None:
    """The rate limiter keeps DOWNLOAD_DELAY between any two requests to a host; Scrapy's
    per-process slot delay would hold a request after its token (docs/politeness.md)."""
    s = get_crawler(Spider, {**ADDON, **DISTRIBUTED, "DOWNLOAD_DELAY": 0.1}).settings
    assert (s.getfloat("HOSTLIMIT_DELAY"), s.getfloat("DOWNLOAD_DELAY")) == (0.1, 0.0)
    own = get_crawler(Spider, {**ADDON, **DISTRIBUTED, "DOWNLOAD_DELAY": 0.1,
                               "HOSTLIMIT_DELAY": 2}).settings
    assert (own.getfloat("HOSTLIMIT_DELAY"), own.getfloat("DOWNLOAD_DELAY")) == (2.0, 0.0)
    single = get_crawler(Spider, {**ADDON, "DOWNLOAD_DELAY": 0.1}).settings
    assert single.getfloat("DOWNLOAD_DELAY") == 0.1  # Scrapy's own, one process
