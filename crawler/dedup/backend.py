"""The frontier's shared dupefilter, as a pluggable backend: ``FRONTIER_DEDUP_CLASS``
(default :class:`~crawler.dedup.dupefilter.RedisBloom`), its Protocol, its factory, and the
``BLOOM_*`` settings read and checked once (:class:`BloomConfig`)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, Self

from scrapy.settings import SETTINGS_PRIORITIES
from scrapy.utils.misc import build_from_crawler, load_object

from crawler.config import readers as config
from crawler.dedup.generations import RecrawlConfig

if TYPE_CHECKING:
    import redis.asyncio as aioredis
    from scrapy.crawler import Crawler
    from scrapy.settings import BaseSettings

logger = logging.getLogger(__name__)
ON_MISSING = ("pause", "recreate")  # BLOOM_ON_MISSING: what to do when the filter vanished
DEDUP_CLASS_SETTING = "FRONTIER_DEDUP_CLASS"


def on_missing_setting(settings: BaseSettings) -> str:
    """``BLOOM_ON_MISSING``, validated (a :class:`~crawler.config.SettingError` naming it)."""
    return config.get_choice(settings, "BLOOM_ON_MISSING", ON_MISSING)


@dataclass(frozen=True)
class BloomConfig:
    """The ``BLOOM_*`` settings of :class:`RedisBloom`, read and checked once."""

    capacity: int
    error_rate: float
    growth: int
    on_missing: str

    @classmethod
    def from_settings(cls, settings: BaseSettings) -> BloomConfig:
        return cls(
            capacity=config.get_int(settings, "BLOOM_CAPACITY", minimum=1),
            error_rate=config.get_float(settings, "BLOOM_ERROR_RATE", minimum=0, maximum=0.5,
                                        exclusive_min=True),
            growth=config.get_int(settings, "BLOOM_GROWTH", minimum=1),
            on_missing=on_missing_setting(settings),
        )


class DedupBackend(Protocol):
    """What the frontier asks of its shared dupefilter (``FRONTIER_DEDUP_CLASS``): batches
    of fingerprints checked (read-only), then added once their requests are produced."""

    async def open(self) -> None: ...
    async def check(self, fingerprints: Sequence[bytes]) -> list[bool]: ...
    async def add(self, fingerprints: Sequence[bytes]) -> list[bool]: ...


class DedupFactory:
    """``FRONTIER_DEDUP_CLASS``, loaded and its settings checked at start-up (before any I/O).

    The class is built once the worker's Redis client exists, by Scrapy's
    ``build_from_crawler(cls, crawler, client, key=...)``: it needs a ``from_crawler(crawler,
    client, *, key)`` classmethod, and may have a ``check_settings(settings)`` one that
    raises :class:`~crawler.config.readers.SettingError` for a bad value.
    """

    def __init__(self, backend: type, crawler: Crawler, *,
                 recrawl: RecrawlConfig | None = None) -> None:
        self.backend = backend
        self.crawler = crawler
        self.recrawl = recrawl or RecrawlConfig()

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        backend = load_backend(crawler.settings)
        _warn_unused_dupefilter(crawler.settings)
        return cls(backend, crawler, recrawl=RecrawlConfig.from_settings(crawler.settings))

    def __call__(self, client: aioredis.Redis | None, key: str) -> DedupBackend:
        if self.recrawl.enabled and client is not None:
            return self._generations(client)
        backend: DedupBackend = build_from_crawler(self.backend, self.crawler, client, key=key)
        return backend

    def _generations(self, client: aioredis.Redis) -> DedupBackend:
        """``RECRAWL_AFTER > 0``: the crawl's filters by generation (docs/recrawl.md)."""
        from crawler.dedup.recrawl import RecrawlBloom  # imports the Redis filter

        crawl = config.crawl_id(self.crawler.settings,
                                getattr(self.crawler.spidercls, "name", "") or "")
        return RecrawlBloom(
            client, crawl, after=self.recrawl.after,
            make=lambda key: build_from_crawler(self.backend, self.crawler, client, key=key),
            on_missing=on_missing_setting(self.crawler.settings), stats=self.crawler.stats)


def _warn_unused_dupefilter(settings: BaseSettings) -> None:
    if (settings.getpriority("DUPEFILTER_CLASS") or 0) > SETTINGS_PRIORITIES["default"]:
        logger.warning("DUPEFILTER_CLASS (%s) has no effect with the Kafka frontier: its "
                       "shared dupefilter is %s (FRONTIER_DEDUP_CLASS)",
                       settings.get("DUPEFILTER_CLASS"),
                       settings.get(DEDUP_CLASS_SETTING) or config.default(DEDUP_CLASS_SETTING))


def load_backend(settings: BaseSettings) -> type:
    """The class ``FRONTIER_DEDUP_CLASS`` names, its settings checked (``check_settings``);
    a :class:`~crawler.config.readers.SettingError` naming the setting if it is unusable."""
    path = settings.get(DEDUP_CLASS_SETTING) or config.default(DEDUP_CLASS_SETTING)
    try:
        backend = load_object(path) if isinstance(path, str) else path
    except (ImportError, NameError, ValueError, AttributeError) as exc:
        raise config.SettingError(DEDUP_CLASS_SETTING, f"cannot load {path!r}: {exc}") from None
    if not callable(getattr(backend, "from_crawler", None)):
        raise config.SettingError(DEDUP_CLASS_SETTING,
                                  f"{path!r} has no from_crawler(crawler, client, key=...)")
    check = getattr(backend, "check_settings", None)
    if callable(check):
        check(settings)
    if RecrawlConfig.from_settings(settings).enabled and not _generational(backend):
        raise config.SettingError("RECRAWL_AFTER", f"needs FRONTIER_DEDUP_CLASS to be "
                                  f"crawler.dedup.RedisBloom or a subclass, not {path!r}")
    return backend  # type: ignore[no-any-return]


def _generational(backend: Any) -> bool:
    from crawler.dedup.dupefilter import RedisBloom  # imports the Redis filter

    return isinstance(backend, type) and issubclass(backend, RedisBloom)
