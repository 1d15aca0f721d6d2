"""The client settings, read once into frozen objects: one for Redis, one for MongoDB.

Every component that talks to a service reads these same settings, so they are read here
only, each checked once with the setting's name in the error
(:class:`~crawler.config.readers.SettingError`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
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
        url = config.get_str(settings, "REDIS_URL")
        return cls(url=url, params=redis_params(settings, url),
                   max_connections=config.get_int(settings, "REDIS_MAX_CONNECTIONS", minimum=2),
                   connect_timeout=connect_timeout(settings))

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> RedisOptions:
        """From a service environment (``REDIS_URL``, ``REDIS_PARAMS`` as JSON), as a local
        stack or a benchmark hands it to its workers; the rest are the defaults."""
        given = {name: env[name] for name in ("REDIS_URL", "REDIS_PARAMS") if env.get(name)}
        return cls.from_settings(BaseSettings(given, priority="cmdline"))


@dataclass(frozen=True)
class MongoOptions:
    """``MONGO_URI`` and its client options: write concern, journal, timeouts."""

    uri: str
    write_concern: str | int = "majority"
    journal: bool = True
    connect_timeout: float = 5.0
    timeout: float | None = None
    write_timeout: float | None = None

    @classmethod
    def from_settings(cls, settings: BaseSettings) -> MongoOptions:
        return cls(uri=config.get_str(settings, "MONGO_URI"),
                   write_concern=write_concern_setting(settings),
                   journal=config.get_bool(settings, "MONGO_JOURNAL"),
                   connect_timeout=connect_timeout(settings),
                   timeout=mongo_timeout(settings), write_timeout=write_timeout_setting(settings))


#: ``REDIS_PARAMS`` keys that name a file (or, ``ssl_ca_path``, a directory) of the client
SSL_FILES = ("ssl_ca_certs", "ssl_certfile", "ssl_keyfile", "ssl_ca_path")


def redis_params(settings: BaseSettings, url: str) -> dict[str, Any]:
    """``REDIS_PARAMS`` (a dict, or JSON in the setting or the environment), checked against
    *url*: TLS options need a ``rediss://`` URL, and the files they name must exist."""
    params = config.get_dict(settings, "REDIS_PARAMS")
    tls = url.lower().startswith("rediss://")
    for key, value in params.items():
        if key.startswith("ssl") and not tls and url:
            raise SettingError("REDIS_PARAMS", f"{key} is a TLS option: REDIS_URL must start "
                                               "with rediss:// to use it")
        if key in SSL_FILES and value is not None and not os.path.exists(str(value)):
            raise SettingError("REDIS_PARAMS", f"{key}: no such file {value!r}")
    return params


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
