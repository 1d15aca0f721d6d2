"""The MongoDB settings every storage component reads the same way (database, timeouts, write
concern), each checked once with the setting's name in the error."""

from __future__ import annotations

from scrapy.settings import BaseSettings

from crawler.config import readers as config
from crawler.config.readers import SettingError


def database_name(settings: BaseSettings) -> str:
    name = config.get_str(settings, "MONGO_DATABASE")
    if not name or any(char in name for char in '/\\. "$\0') or len(name) > 63:
        raise SettingError("MONGO_DATABASE", f"{name!r} is not a valid MongoDB database name")
    return name


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
