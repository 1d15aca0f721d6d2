"""The storage concern's settings: every ``MONGO_*`` setting (and ``CONNECT_TIMEOUT``), read
and checked in one place into a frozen :class:`StorageConfig`, which the item pipeline and the
failure store share (:meth:`StorageConfig.of` builds it once per crawler).
The client's own options (timeouts, write concern) are read in
:mod:`crawler.connections.options`, re-exported here."""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from scrapy.settings import BaseSettings

from crawler.config import readers as config
from crawler.config.readers import SettingError
from crawler.connections.options import (
    connect_timeout,
    mongo_params,
    mongo_timeout,
    write_concern_setting,
    write_timeout_setting,
)

__all__ = ["StorageConfig", "database_name", "mongo_timeout", "write_concern_setting",
           "write_timeout_setting"]

if TYPE_CHECKING:
    from scrapy.crawler import Crawler


@dataclass(frozen=True, slots=True)
class StorageConfig:
    """The MongoDB settings of a crawl, validated (:class:`SettingError` names a bad one)."""

    uri: str
    database: str
    crawl_id: str  # the items' collection; the failures go to ``<crawl_id>.failures``
    batch_size: int
    batch_timeout: float
    key_fields: tuple[str, ...]
    write_concern: str | int
    journal: bool
    indexes: tuple[str, ...]
    retry_backoff: float
    retry_backoff_max: float
    connect_timeout: float
    timeout: float
    write_timeout: float
    index_timeout: float
    params: dict[str, Any] = field(default_factory=dict)  # MONGO_PARAMS

    @classmethod
    def from_settings(cls, settings: BaseSettings, spider_name: str) -> StorageConfig | None:
        """The storage settings, or ``None`` without ``MONGO_URI`` (single-node mode)."""
        s = settings
        uri = config.get_str(s, "MONGO_URI")
        if not uri:
            return None
        key_fields = config.get_list(s, "MONGO_KEY_FIELDS")
        if not key_fields:
            raise SettingError("MONGO_KEY_FIELDS", "expected at least one field name")
        backoff = config.get_float(s, "MONGO_RETRY_BACKOFF", minimum=0, exclusive_min=True)
        return cls(
            uri=uri, database=database_name(s), crawl_id=config.crawl_id(s, spider_name),
            batch_size=config.get_int(s, "MONGO_BATCH_SIZE", minimum=1),
            batch_timeout=_positive(s, "MONGO_BATCH_TIMEOUT"), key_fields=tuple(key_fields),
            write_concern=write_concern_setting(s), journal=config.get_bool(s, "MONGO_JOURNAL"),
            indexes=tuple(config.get_list(s, "MONGO_INDEXES")), retry_backoff=backoff,
            retry_backoff_max=config.get_float(s, "MONGO_RETRY_BACKOFF_MAX", minimum=backoff),
            connect_timeout=connect_timeout(s), timeout=mongo_timeout(s),
            write_timeout=write_timeout_setting(s),
            index_timeout=_positive(s, "MONGO_INDEX_TIMEOUT"), params=mongo_params(s),
        )

    @classmethod
    def of(cls, crawler: Crawler) -> StorageConfig | None:
        """The crawler's storage settings, read on the first call and shared afterwards."""
        cached = _BUILT.get(crawler)
        if cached is not None and cached[0] is crawler.settings:
            return cached[1]
        spider = crawler.spider if crawler.spider is not None else crawler.spidercls
        built = cls.from_settings(crawler.settings, spider.name)
        _BUILT[crawler] = (crawler.settings, built)
        return built


_BUILT: weakref.WeakKeyDictionary[Crawler, tuple[BaseSettings, StorageConfig | None]] = (
    weakref.WeakKeyDictionary())


def _positive(settings: BaseSettings, name: str) -> float:
    return config.get_float(settings, name, minimum=0, exclusive_min=True)


def database_name(settings: BaseSettings) -> str:
    name = config.get_str(settings, "MONGO_DATABASE")
    if not name or any(char in name for char in '/\\. "$\0') or len(name) > 63:
        raise SettingError("MONGO_DATABASE", f"{name!r} is not a valid MongoDB database name")
    return name
