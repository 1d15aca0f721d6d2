"""The MongoDB settings every storage component reads the same way (database, timeouts, write
concern), each checked once with the setting's name in the error. The client's own options
are read in :mod:`crawler.connections.options`, re-exported here."""

from __future__ import annotations

from scrapy.settings import BaseSettings

from crawler.config import readers as config
from crawler.config.readers import SettingError
from crawler.connections.options import mongo_timeout, write_concern_setting, write_timeout_setting

__all__ = ["database_name", "mongo_timeout", "write_concern_setting", "write_timeout_setting"]


def database_name(settings: BaseSettings) -> str:
    name = config.get_str(settings, "MONGO_DATABASE")
    if not name or any(char in name for char in '/\\. "$\0') or len(name) > 63:
        raise SettingError("MONGO_DATABASE", f"{name!r} is not a valid MongoDB database name")
    return name
