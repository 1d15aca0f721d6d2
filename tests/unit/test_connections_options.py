"""The client settings are read once, into frozen objects, each bad value named."""

from __future__ import annotations

from typing import Any

import pytest
from scrapy.settings import Settings

from crawler.config.readers import SettingError
from crawler.connections.options import MongoOptions, RedisOptions


@pytest.mark.parametrize(("name", "value"), [
    ("CONNECT_TIMEOUT", 0), ("CONNECT_TIMEOUT", "soon"), ("REDIS_PARAMS", "[1]"),
    ("REDIS_MAX_CONNECTIONS", 1),
])
def test_a_bad_redis_setting_is_named(name: str, value: Any) -> None:
    with pytest.raises(SettingError) as caught:
        RedisOptions.from_settings(Settings({"REDIS_URL": "redis://127.0.0.1:1", name: value}))
    assert caught.value.setting == name


@pytest.mark.parametrize(("name", "value"), [
    ("MONGO_TIMEOUT", 0), ("MONGO_WRITE_TIMEOUT", 999), ("MONGO_WRITE_CONCERN", "most"),
])
def test_a_bad_mongo_setting_is_named(name: str, value: Any) -> None:
    with pytest.raises(SettingError) as caught:
        MongoOptions.from_settings(Settings({"MONGO_URI": "mongodb://127.0.0.1:1", name: value}))
    assert caught.value.setting == name


def test_the_defaults() -> None:
    redis = RedisOptions.from_settings(Settings({"REDIS_URL": "redis://127.0.0.1:1"}))
    assert (redis.params, redis.max_connections, redis.connect_timeout) == ({}, 50, 5.0)
    mongo = MongoOptions.from_settings(Settings({"MONGO_URI": "mongodb://127.0.0.1:1"}))
    assert (mongo.write_concern, mongo.journal) == ("majority", True)
