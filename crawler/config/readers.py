"""Typed, validated access to the crawler's settings.

Every reader falls back to :mod:`crawler.config.defaults`; connection settings
(``ENV_SETTINGS``) also fall back to the environment variable of the same name.
A malformed value raises :class:`SettingError`, which names the setting.

The add-on registers every default into Scrapy's settings at priority ``"default"``
(:func:`register_defaults`); such a value counts as unset: a connection setting's
environment variable still wins over it, and :func:`user_set` is false for it.
"""

from __future__ import annotations

import copy
import json
import os
import re
from collections.abc import Callable
from typing import Any, TypeVar

from scrapy.settings import SETTINGS_PRIORITIES, BaseSettings

from crawler.config import defaults

KAFKA_SECURITY_SETTINGS = (
    "KAFKA_SECURITY_PROTOCOL", "KAFKA_SSL_CAFILE", "KAFKA_SSL_CERTFILE", "KAFKA_SSL_KEYFILE",
    "KAFKA_SSL_CHECK_HOSTNAME", "KAFKA_SASL_MECHANISM", "KAFKA_SASL_USERNAME",
    "KAFKA_SASL_PASSWORD", "KAFKA_SASL_OAUTH_TOKEN_PROVIDER", "KAFKA_CLIENT_PARAMS",
)
ENV_SETTINGS = frozenset(
    {"KAFKA_BOOTSTRAP_SERVERS", "REDIS_URL", "REDIS_PARAMS", "MONGO_URI", "MONGO_DATABASE",
     "CRAWL_ID", "MONGO_PARAMS", *KAFKA_SECURITY_SETTINGS}
)
SERVICE_SETTINGS = ("KAFKA_BOOTSTRAP_SERVERS", "REDIS_URL", "MONGO_URI")
_CRAWL_ID_RE = re.compile(r"^[A-Za-z0-9_-][A-Za-z0-9._-]{0,100}$")
DEFAULT_PRIORITY = SETTINGS_PRIORITIES["default"]

T = TypeVar("T")


class SettingError(ValueError):
    """A setting has a value the crawler cannot use."""

    def __init__(self, name: str, problem: str) -> None:
        super().__init__(f"Setting {name}: {problem}")
        self.setting = name


class SpiderArgumentError(ValueError):
    """A spider argument (``-a NAME=VALUE``) is missing or has a value the spider cannot use."""

    def __init__(self, name: str, problem: str) -> None:
        super().__init__(f"Spider argument {name}: {problem}")
        self.argument = name


def default(name: str) -> Any:
    return getattr(defaults, name)


def names() -> list[str]:
    """Every setting of :mod:`crawler.config.defaults`, in the order of the module."""
    return [name for name in vars(defaults) if name.isupper()]


def register_defaults(settings: BaseSettings) -> None:
    """Put every default into *settings* at priority ``"default"``, where a setting has
    no value yet; a value set anywhere (project, spider, ``-s``) keeps its priority.
    Each gets its own copy, so that no caller can change the module's lists and dicts."""
    for name in names():
        if settings.getpriority(name) is None:
            settings.set(name, copy.deepcopy(default(name)), priority="default")


def user_set(settings: BaseSettings, name: str) -> bool:
    """Whether *name* has a value above priority ``"default"`` (project, spider, ``-s``...)."""
    priority = settings.getpriority(name)
    return priority is not None and priority > DEFAULT_PRIORITY


def raw(settings: BaseSettings, name: str) -> Any:
    """The value of *name*: the settings, then the environment, then the default.

    A registered default (priority ``"default"``) gives way to the environment variable of a
    connection setting, as an unset value does."""
    value = settings.get(name)
    unset = value is None or value == ""
    if name in ENV_SETTINGS and os.environ.get(name):
        if unset or (isinstance(settings, BaseSettings) and not user_set(settings, name)):
            return os.environ[name]
    return default(name) if unset else value


def _convert(name: str, value: Any, kind: Callable[[Any], T], what: str) -> T:
    try:
        return kind(value)
    except (TypeError, ValueError):
        raise SettingError(name, f"expected {what}, got {value!r}") from None


def get_str(settings: BaseSettings, name: str) -> str:
    value = raw(settings, name)
    if not isinstance(value, str):
        raise SettingError(name, f"expected a string, got {value!r}")
    return value.strip()


def get_int(settings: BaseSettings, name: str, *, minimum: int | None = None) -> int:
    value = raw(settings, name)
    if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
        raise SettingError(name, f"expected an integer, got {value!r}")
    number = _convert(name, value, int, "an integer")
    if minimum is not None and number < minimum:
        raise SettingError(name, f"expected an integer >= {minimum}, got {number}")
    return number


def get_float(
    settings: BaseSettings,
    name: str,
    *,
    minimum: float | None = None,
    maximum: float | None = None,
    exclusive_min: bool = False,
) -> float:
    value = raw(settings, name)
    if isinstance(value, bool):
        raise SettingError(name, f"expected a number, got {value!r}")
    number = _convert(name, value, float, "a number")
    if number != number:  # NaN
        raise SettingError(name, "expected a number, got NaN")
    too_small = minimum is not None and (
        number <= minimum if exclusive_min else number < minimum
    )
    if too_small or (maximum is not None and number > maximum):
        low = f"> {minimum}" if exclusive_min else f">= {minimum}"
        bound = " and ".join(
            b for b in (low if minimum is not None else "", f"<= {maximum}" if maximum else "") if b
        )
        raise SettingError(name, f"expected a number {bound}, got {number}")
    return number


def get_bool(settings: BaseSettings, name: str) -> bool:
    value = raw(settings, name)
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in {"1", "true", "yes", "on"}:
        return True
    if text in {"0", "false", "no", "off", ""}:
        return False
    raise SettingError(name, f"expected true or false, got {value!r}")


def get_list(settings: BaseSettings, name: str) -> list[str]:
    value = raw(settings, name)
    if isinstance(value, str):
        return [part.strip() for part in value.split(",") if part.strip()]
    if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        return list(value)
    raise SettingError(name, f"expected a list of strings, got {value!r}")


def get_dict(settings: BaseSettings, name: str) -> dict[str, Any]:
    value = raw(settings, name)
    if isinstance(value, str):
        value = _convert(name, value, json.loads, "a JSON object")
    if isinstance(value, BaseSettings):
        value = value.copy_to_dict()
    if not isinstance(value, dict):
        raise SettingError(name, f"expected a dict, got {value!r}")
    return dict(value)


def get_choice(settings: BaseSettings, name: str, choices: tuple[str, ...]) -> str:
    value = get_str(settings, name).lower()
    if value not in choices:
        raise SettingError(name, f"expected one of {', '.join(choices)}, got {value!r}")
    return value


def crawl_id(settings: BaseSettings, spider_name: str) -> str:
    """``CRAWL_ID`` (setting or environment), else the spider's name; validated."""
    value = get_str(settings, "CRAWL_ID") or spider_name
    if not _CRAWL_ID_RE.match(value):
        raise SettingError(
            "CRAWL_ID",
            f"{value!r} is not usable as a Kafka topic prefix and collection name "
            "(letters, digits, '.', '_' and '-', at most 101 characters)",
        )
    return value


def configured_services(settings: BaseSettings) -> list[str]:
    """The connection settings that have a value (in the settings or the environment)."""
    return [name for name in SERVICE_SETTINGS if get_str(settings, name)]


#: query keys whose value is a secret: any key containing one of these words (any case)
SECRET_WORDS = ("password", "passwd", "pwd", "secret", "token", "key", "credential")
MASK = "***"
UNPARSABLE = "<unparsable address>"
_SCHEME_RE = re.compile(r"^[A-Za-z][A-Za-z0-9+._-]*://")  # SASL_SSL:// too
_HOST_PORT_RE = re.compile(r"^(\[[0-9A-Fa-f:.%\w]*\]|[^\[\]:]*)(:\d*)?$")


def mask_url(url: object) -> str:
    """*url*, any service address or page URL, with every secret replaced by ``***``: safe
    to log. The one masking function of the crawler; it never raises.

    Handles URLs and connection strings of any scheme (``mongodb://u:pw@h1:27017,h2:27017/``,
    ``mongodb+srv://``, ``rediss://``, ``unix://``, ``https://``), Kafka-style
    ``host:port,host:port`` lists, a password in the user info (``user:***@``; a user info
    without ``:`` may be a token: ``***@``) and in the query string or fragment (every key
    that contains one of :data:`SECRET_WORDS`, and the values of ``authMechanismProperties``).
    Hosts, ports, paths and the other options (``replicaSet``, ``authSource``, ``tls``) stay.
    Anything it cannot read gives :data:`UNPARSABLE`.
    """
    try:
        return _mask(url) if isinstance(url, str) else UNPARSABLE
    except Exception:  # never let a log line fail on an odd address
        return UNPARSABLE


def _mask(url: str) -> str:
    match = _SCHEME_RE.match(url)
    scheme = match.group(0) if match else ""
    rest = url[len(scheme):]
    end = min((i for i in (rest.find(c) for c in "/?#") if i >= 0), default=len(rest))
    authority, tail = rest[:end], rest[end:]
    if not scheme and "=" in authority:  # bare options: sasl_plain_password=...;...
        return _mask_query(url)
    if "@" not in authority and "@" in tail and not _plain_hosts(authority):
        # a user info with an unescaped '/', '?' or '#' (user:pa/ss@host): up to the last '@'
        head, _, after = tail.rpartition("@")
        cut = min((i for i in (after.find(c) for c in "/?#") if i >= 0), default=len(after))
        authority, tail = f"{authority}{head}@{after[:cut]}", after[cut:]
    return scheme + _mask_authority(authority) + _mask_tail(tail)


def _plain_hosts(authority: str) -> bool:
    """Whether *authority* reads as ``host[:port][,host[:port]...]`` (numeric ports)."""
    return all(_HOST_PORT_RE.match(host) for host in authority.split(","))


def _mask_authority(authority: str) -> str:
    if "@" not in authority:
        return authority
    userinfo, _, hosts = authority.rpartition("@")
    user, colon, _ = userinfo.partition(":")
    return f"{user}:{MASK}@{hosts}" if colon else f"{MASK}@{hosts}"


def _mask_tail(tail: str) -> str:
    """The path, query and fragment of an address, with the secret values masked."""
    path, qmark, query = tail.partition("?")
    query, hash_, fragment = query.partition("#")
    if not qmark:
        path, hash_, fragment = path.partition("#")
    return path + qmark + _mask_query(query) + hash_ + _mask_query(fragment)


def _mask_query(query: str) -> str:
    parts = re.split(r"([&;])", query)
    return "".join(_mask_pair(part) if i % 2 == 0 else part for i, part in enumerate(parts))


def _mask_pair(pair: str) -> str:
    key, equals, value = pair.partition("=")
    if not equals:
        return pair
    if _is_secret(key):
        return f"{key}={MASK}"
    if key.lower() == "authmechanismproperties":  # AWS_SESSION_TOKEN:..., comma-separated
        items = [item.partition(":") for item in value.split(",")]
        value = ",".join(f"{k}:{MASK}" if sep and _is_secret(k) else k + sep + v
                         for k, sep, v in items)
    return f"{key}={value}"


def _is_secret(key: str) -> bool:
    """Whether option *key* holds a secret; ``tlsCertificateKeyFile`` holds a file name."""
    name = key.lower()
    return any(word in name for word in SECRET_WORDS) and not name.endswith(("file", "path"))
