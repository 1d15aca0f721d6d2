"""The client settings, read once into frozen objects: one for Redis, one for MongoDB.

Every component that talks to a service reads these same settings, so they are read here
only, each checked once with the setting's name in the error
(:class:`~crawler.config.readers.SettingError`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from scrapy.settings import BaseSettings

from crawler.config import readers as config
from crawler.config.readers import SettingError


@dataclass(frozen=True)
class RedisOptions:
    """``REDIS_URL``, ``REDIS_PARAMS``, ``REDIS_MAX_CONNECTIONS`` and ``CONNECT_TIMEOUT``."""

    url: str
    params: dict[str, Any] = field(default_factory=dict)
    max_connections: int = 50
    connect_timeout: float = 5.0

    @classmethod
    def from_settings(cls, settings: BaseSettings) -> RedisOptions:
        return cls(url=config.get_str(settings, "REDIS_URL"),
                   params=config.get_dict(settings, "REDIS_PARAMS"),
                   max_connections=config.get_int(settings, "REDIS_MAX_CONNECTIONS", minimum=2),
                   connect_timeout=connect_timeout(settings))


@dataclass(frozen=True)
class MongoOptions:
    """``MONGO_URI`` and its client options: ``MONGO_PARAMS``, write concern, journal,
    timeouts."""

    uri: str
    params: dict[str, Any] = field(default_factory=dict)
    write_concern: str | int = "majority"
    journal: bool = True
    connect_timeout: float = 5.0
    timeout: float | None = None
    write_timeout: float | None = None

    @classmethod
    def from_settings(cls, settings: BaseSettings) -> MongoOptions:
        return cls(uri=config.get_str(settings, "MONGO_URI"), params=mongo_params(settings),
                   write_concern=write_concern_setting(settings),
                   journal=config.get_bool(settings, "MONGO_JOURNAL"),
                   connect_timeout=connect_timeout(settings),
                   timeout=mongo_timeout(settings), write_timeout=write_timeout_setting(settings))


#: MongoClient options that have a setting of their own (lower case: pymongo ignores case)
MONGO_OWN_OPTIONS = {
    "host": "MONGO_URI", "port": "MONGO_URI", "w": "MONGO_WRITE_CONCERN",
    "journal": "MONGO_JOURNAL", "j": "MONGO_JOURNAL", "wtimeoutms": "MONGO_WRITE_TIMEOUT",
    "sockettimeoutms": "MONGO_TIMEOUT", "connecttimeoutms": "CONNECT_TIMEOUT",
    "serverselectiontimeoutms": "CONNECT_TIMEOUT", "connect": "CONNECT_TIMEOUT",
}


def mongo_params(settings: BaseSettings) -> dict[str, Any]:
    """``MONGO_PARAMS``: a dict (or JSON object) of extra MongoClient options.

    A malformed value is not shown in the error: it may hold a password."""
    value = config.raw(settings, "MONGO_PARAMS")
    if isinstance(value, str):
        try:
            value = json.loads(value) if value.strip() else {}
        except ValueError:
            raise SettingError("MONGO_PARAMS", "expected a JSON object of MongoClient options "
                               "(the value is not shown: it may hold a password)") from None
    if isinstance(value, BaseSettings):
        value = value.copy_to_dict()
    if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
        raise SettingError("MONGO_PARAMS", "expected a dict of MongoClient options, got a "
                           f"{type(value).__name__}")
    for key in value:
        own = MONGO_OWN_OPTIONS.get(key.lower())
        if own is not None:
            raise SettingError("MONGO_PARAMS", f"{key!r} comes from {own}: set it there")
    return dict(value)


def connect_timeout(settings: BaseSettings) -> float:
    return config.get_float(settings, "CONNECT_TIMEOUT", minimum=0, exclusive_min=True)


def mongo_timeout(settings: BaseSettings) -> float:
    return config.get_float(settings, "MONGO_TIMEOUT", minimum=0, exclusive_min=True)


def write_timeout_setting(settings: BaseSettings) -> float:
    """``MONGO_WRITE_TIMEOUT``, shorter than ``MONGO_TIMEOUT``: the server's answer comes first."""
    value = config.get_float(settings, "MONGO_WRITE_TIMEOUT", minimum=0, exclusive_min=True)
    if value >= mongo_timeout(settings):
        raise SettingError("MONGO_WRITE_TIMEOUT", f"{value:g} must be shorter than "
                           f"MONGO_TIMEOUT ({mongo_timeout(settings):g}), so that MongoDB "
                           "reports a write concern timeout before the connection times out")
    return value


def write_concern_setting(settings: BaseSettings) -> str | int:
    value = config.raw(settings, "MONGO_WRITE_CONCERN")
    if isinstance(value, str) and value.strip().lower() == "majority":
        return "majority"
    number = -1
    if not isinstance(value, bool):
        try:
            number = int(str(value).strip())
        except ValueError:
            pass
    if number < 0:
        raise SettingError("MONGO_WRITE_CONCERN",
                           f'expected "majority" or an integer >= 0, got {value!r}')
    if number == 0 and config.get_bool(settings, "MONGO_JOURNAL"):
        raise SettingError("MONGO_WRITE_CONCERN",
                           "0 (unacknowledged writes) cannot be combined with MONGO_JOURNAL=True")
    return number
