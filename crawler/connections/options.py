"""The client settings, read once into frozen objects: one each for Redis, MongoDB and Kafka.

Every component that talks to a service reads these same settings, so they are read here
only, each checked once with the setting's name in the error
(:class:`~crawler.config.readers.SettingError`).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from scrapy.settings import BaseSettings
from scrapy.utils.misc import load_object

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


SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")


@dataclass(frozen=True)
class KafkaOptions:
    """``KAFKA_BOOTSTRAP_SERVERS`` and the security settings every Kafka client gets.

    :func:`crawler.connections.clients.kafka_security` translates them to kafka-python's
    keyword arguments. Secrets (the password, the token provider, ``KAFKA_CLIENT_PARAMS``)
    are left out of ``repr()``."""

    bootstrap: str
    security_protocol: str = "PLAINTEXT"
    ssl_cafile: str = ""
    ssl_certfile: str = ""
    ssl_keyfile: str = ""
    ssl_check_hostname: bool = True
    sasl_mechanism: str = ""
    sasl_username: str = ""
    sasl_password: str = field(default="", repr=False)
    #: a kafka-python ``AbstractTokenProvider`` (``KAFKA_SASL_OAUTH_TOKEN_PROVIDER``,
    #: instantiated once)
    oauth_token_provider: Any = field(default=None, repr=False)
    client_params: dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def uses_ssl(self) -> bool:
        return self.security_protocol in ("SSL", "SASL_SSL")

    @property
    def uses_sasl(self) -> bool:
        return self.security_protocol.startswith("SASL_")

    @classmethod
    def from_settings(cls, settings: BaseSettings) -> KafkaOptions:
        s = settings
        protocol = config.get_str(s, "KAFKA_SECURITY_PROTOCOL").upper() or "PLAINTEXT"
        if protocol not in SECURITY_PROTOCOLS:
            raise SettingError("KAFKA_SECURITY_PROTOCOL", f"expected one of "
                               f"{', '.join(SECURITY_PROTOCOLS)}, got {protocol!r}")
        options = cls(
            bootstrap=config.get_str(s, "KAFKA_BOOTSTRAP_SERVERS"),
            security_protocol=protocol,
            ssl_cafile=_ssl_file(s, "KAFKA_SSL_CAFILE", protocol),
            ssl_certfile=_ssl_file(s, "KAFKA_SSL_CERTFILE", protocol),
            ssl_keyfile=_ssl_file(s, "KAFKA_SSL_KEYFILE", protocol),
            ssl_check_hostname=config.get_bool(s, "KAFKA_SSL_CHECK_HOSTNAME"),
            sasl_mechanism=_sasl_mechanism(s, protocol),
            sasl_username=config.get_str(s, "KAFKA_SASL_USERNAME"),
            sasl_password=config.get_str(s, "KAFKA_SASL_PASSWORD"),
            oauth_token_provider=_token_provider(s),
            client_params=config.get_dict(s, "KAFKA_CLIENT_PARAMS"))
        options.check()
        return options

    def check(self) -> None:
        if self.ssl_keyfile and not self.ssl_certfile:
            raise SettingError("KAFKA_SSL_KEYFILE", "needs KAFKA_SSL_CERTFILE (the client "
                               "certificate the key belongs to)")
        mechanism = self.sasl_mechanism
        if mechanism in ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"):
            for name, value in (("KAFKA_SASL_USERNAME", self.sasl_username),
                                ("KAFKA_SASL_PASSWORD", self.sasl_password)):
                if not value:
                    raise SettingError(name, f"required by KAFKA_SASL_MECHANISM={mechanism}")
        if mechanism == "OAUTHBEARER" and self.oauth_token_provider is None:
            raise SettingError("KAFKA_SASL_OAUTH_TOKEN_PROVIDER",
                               "required by KAFKA_SASL_MECHANISM=OAUTHBEARER")
        if mechanism != "OAUTHBEARER" and self.oauth_token_provider is not None:
            raise SettingError("KAFKA_SASL_OAUTH_TOKEN_PROVIDER",
                               "used only with KAFKA_SASL_MECHANISM=OAUTHBEARER")


def _ssl_file(settings: BaseSettings, name: str, protocol: str) -> str:
    """A PEM file of ``KAFKA_SSL_*``: it must exist, and be set only with SSL or SASL_SSL."""
    path = config.get_str(settings, name)
    if not path:
        return ""
    if protocol not in ("SSL", "SASL_SSL"):
        raise SettingError(name, f"set, but KAFKA_SECURITY_PROTOCOL is {protocol}: "
                           "set it to SSL or SASL_SSL for TLS")
    if not os.path.isfile(path) or not os.access(path, os.R_OK):
        raise SettingError(name, f"{path!r} is not a readable file")
    return path


def _sasl_mechanism(settings: BaseSettings, protocol: str) -> str:
    mechanism = config.get_str(settings, "KAFKA_SASL_MECHANISM").upper()
    if protocol.startswith("SASL_"):
        if mechanism not in SASL_MECHANISMS:
            raise SettingError("KAFKA_SASL_MECHANISM", f"expected one of "
                               f"{', '.join(SASL_MECHANISMS)} with KAFKA_SECURITY_PROTOCOL="
                               f"{protocol}, got {mechanism!r}")
    elif mechanism:
        raise SettingError("KAFKA_SASL_MECHANISM", f"set, but KAFKA_SECURITY_PROTOCOL is "
                           f"{protocol}: set it to SASL_SSL or SASL_PLAINTEXT")
    return mechanism


def _token_provider(settings: BaseSettings) -> Any:
    """An instance of ``KAFKA_SASL_OAUTH_TOKEN_PROVIDER`` (a class path or a class)."""
    value = config.raw(settings, "KAFKA_SASL_OAUTH_TOKEN_PROVIDER")
    if not value:
        return None
    try:
        target = load_object(value) if isinstance(value, str) else value
        provider = target() if isinstance(target, type) else target
    except Exception as exc:
        raise SettingError("KAFKA_SASL_OAUTH_TOKEN_PROVIDER",
                           f"cannot load {value!r} ({type(exc).__name__})") from None
    from kafka.net.sasl.oauth import AbstractTokenProvider

    if not isinstance(provider, AbstractTokenProvider):  # kafka-python refuses any other
        raise SettingError("KAFKA_SASL_OAUTH_TOKEN_PROVIDER", f"{value!r} is not a "
                           "kafka.net.sasl.oauth.AbstractTokenProvider (with a token() method)")
    return provider
