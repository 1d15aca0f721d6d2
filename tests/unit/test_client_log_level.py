"""``CLIENT_LOG_LEVEL``: kafka-python's and pymongo's DEBUG lines (protocol traffic, 720 lines
a page at a new project's LOG_LEVEL of DEBUG) stay out of a crawl's log unless asked for;
their warnings stay in."""

from __future__ import annotations

import logging

import pytest
from scrapy.settings import Settings

from crawler.addon import DistributedAddon
from crawler.config.readers import SettingError

SERVICES = {"KAFKA_BOOTSTRAP_SERVERS": "127.0.0.1:1", "REDIS_URL": "redis://127.0.0.1:1/0",
            "MONGO_URI": "mongodb://127.0.0.1:1/"}


def _configure(**values: object) -> None:
    DistributedAddon().update_settings(Settings({"LOG_LEVEL": "DEBUG", **SERVICES, **values}))


@pytest.mark.parametrize("name", ["kafka", "pymongo"])
def test_at_log_level_debug_the_clients_debug_lines_stay_out(name: str) -> None:
    _configure()
    logger = logging.getLogger(f"{name}.net.connection")
    assert not logger.isEnabledFor(logging.DEBUG)
    assert logger.isEnabledFor(logging.INFO) and logger.isEnabledFor(logging.WARNING)


def test_client_log_level_debug_asks_for_them() -> None:
    _configure(CLIENT_LOG_LEVEL="DEBUG")
    assert logging.getLogger("kafka.protocol.parser").isEnabledFor(logging.DEBUG)
    _configure(CLIENT_LOG_LEVEL="warning")
    assert not logging.getLogger("pymongo.command").isEnabledFor(logging.INFO)


def test_a_bad_client_log_level_names_the_setting() -> None:
    with pytest.raises(SettingError, match="CLIENT_LOG_LEVEL"):
        _configure(CLIENT_LOG_LEVEL="chatty")
