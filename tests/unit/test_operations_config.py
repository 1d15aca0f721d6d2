"""AlertsConfig and MetricsConfig: the operations concern's settings, read and checked once."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from scrapy.settings import Settings

from crawler.config.readers import SettingError
from crawler.extensions.alerts import AlertsConfig
from crawler.extensions.metrics import MetricsConfig
from crawler.operations.alert_rules import Thresholds


def alerts(**values: Any) -> AlertsConfig:
    return AlertsConfig.from_settings(Settings({"REDIS_URL": "", **values}))


def test_alerts_defaults() -> None:
    cfg = alerts()
    assert cfg.limits == Thresholds()
    assert (cfg.interval, cfg.ttl, cfg.webhook, cfg.webhook_timeout) == (10.0, 60.0, "", 5.0)
    assert cfg.stale_after == 7.0  # the crawl's rule at the defaults
    assert cfg.redis_url == ""  # the client itself: crawler.connections.options.RedisOptions
    assert (cfg.bloom.capacity, cfg.bloom.error_rate, cfg.bloom.growth) == (10_000_000, 0.001, 2)
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.ttl = 1.0  # type: ignore[misc]


@pytest.mark.parametrize(("name", "value"), [
    ("ALERT_INTERVAL", 0), ("ALERT_TTL", 0.5), ("ALERT_WEBHOOK_TIMEOUT", 0),
    ("ALERT_FAILURE_RATE", 1.5), ("ALERT_MIN_PROXIES", -1), ("ALERT_BLOOM_FILL", -0.1),
    ("ALERT_NODE_SILENT_SECONDS", 0),
    ("BLOOM_CAPACITY", 0), ("BLOOM_ERROR_RATE", 0), ("BLOOM_GROWTH", 0),
])
def test_alerts_bad_value_names_its_setting(name: str, value: Any) -> None:
    with pytest.raises(SettingError) as caught:
        alerts(**{name: value})
    assert caught.value.setting == name


def test_metrics_config() -> None:
    assert MetricsConfig.from_settings(Settings()) == MetricsConfig(host="127.0.0.1", port=0)
    assert MetricsConfig.from_settings(Settings({"METRICS_PORT": "9410"})).port == 9410
    for port in (-1, 65536, "abc"):
        with pytest.raises(SettingError) as caught:
            MetricsConfig.from_settings(Settings({"METRICS_PORT": port}))
        assert caught.value.setting == "METRICS_PORT"
