"""The ``ROBOTSTXT_*`` settings of the cluster-wide robots.txt middleware, checked once."""

from __future__ import annotations

from typing import TYPE_CHECKING

from crawler.config import readers as config
from crawler.robots.verdict import RobotsPolicy

if TYPE_CHECKING:
    from scrapy.settings import BaseSettings


def robots_policy(s: BaseSettings) -> RobotsPolicy:
    """:class:`~crawler.config.readers.SettingError` names a bad setting."""
    return RobotsPolicy(
        ttl=config.get_float(s, "ROBOTSTXT_TTL", minimum=1),
        retry_after=config.get_float(s, "ROBOTSTXT_RETRY_AFTER", minimum=1),
        retries=config.get_int(s, "ROBOTSTXT_RETRIES", minimum=1),
        max_size=config.get_int(s, "ROBOTSTXT_MAX_SIZE", minimum=1024),
        max_redirects=config.get_int(s, "ROBOTSTXT_MAX_REDIRECTS", minimum=0),
        crawl_delay_max=config.get_float(s, "ROBOTSTXT_CRAWL_DELAY_MAX", minimum=0),
    )


def claim_seconds(s: BaseSettings) -> float:
    """How long a worker's claim to fetch a robots.txt lasts: its download and one retry,
    each up to ``DOWNLOAD_TIMEOUT``, and some (a killed worker's claim lapses after it)."""
    return 2 * config.get_float(s, "DOWNLOAD_TIMEOUT", minimum=0, exclusive_min=True) + 10
