"""``STATUS_INDEX_*``: whether the per-URL status index is kept, where, and for how long."""

from __future__ import annotations

from dataclasses import dataclass

from scrapy.settings import BaseSettings

from crawler.config import readers as config

SUFFIX = ".urls"


def collection_of(crawl_id: str) -> str:
    """The crawl's status index: the collection ``<CRAWL_ID>.urls`` of ``MONGO_DATABASE``."""
    return crawl_id + SUFFIX


@dataclass(frozen=True)
class IndexConfig:
    enabled: bool
    ttl: float  # seconds a URL's document lives after its last event; 0: for ever
    interval: float  # seconds between batches

    @classmethod
    def from_settings(cls, settings: BaseSettings) -> IndexConfig:
        return cls(enabled=config.get_bool(settings, "STATUS_INDEX_ENABLED"),
                   ttl=config.get_float(settings, "STATUS_INDEX_TTL", minimum=0.0),
                   interval=config.get_float(settings, "STATUS_INDEX_INTERVAL", minimum=0.01))
