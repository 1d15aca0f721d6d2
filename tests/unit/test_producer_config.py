"""The producer's delivery timeout is read and bounded at start-up (no broker: the freeze itself
is tests/integration/test_producer_freeze.py)."""

from __future__ import annotations

import pytest
from scrapy.settings import Settings

from crawler.config import defaults
from crawler.config.readers import SettingError
from crawler.frontier.config import FrontierConfig

DELIVERY_TIMEOUT = 12.0  # the value of tests/integration/test_producer_freeze.py


def _config(**overrides: object) -> FrontierConfig:
    settings = Settings()
    settings.setmodule(defaults)
    settings.setdict({"KAFKA_BOOTSTRAP_SERVERS": "127.0.0.1:9", "REDIS_URL": "redis://x",
                      **overrides})
    return FrontierConfig.from_settings(settings, "site")


def test_the_delivery_timeout_is_validated_at_start_up() -> None:
    assert _config().delivery_timeout == defaults.KAFKA_DELIVERY_TIMEOUT == 120.0
    assert _config(KAFKA_DELIVERY_TIMEOUT=DELIVERY_TIMEOUT).delivery_timeout == DELIVERY_TIMEOUT
    for bad in ("abc", 0, 9.9):  # 9.9 s: shorter than the 10 s request timeout
        with pytest.raises(SettingError, match="KAFKA_DELIVERY_TIMEOUT"):
            _config(KAFKA_DELIVERY_TIMEOUT=bad)
    with pytest.raises(SettingError, match="KAFKA_DELIVERY_TIMEOUT"):  # linger counts too
        _config(KAFKA_DELIVERY_TIMEOUT=12, CONNECT_TIMEOUT=12)
