"""Scrapy's limits, bounded for a crawl that takes its URLs from other systems.

Scrapy's defaults suit a spider its author points at one site: downloads up to 1 GiB, 20
redirects, no depth limit, robots.txt ignored. Distributed mode puts these in their place
at the add-on's priority, so a project or ``-s`` value still wins (``docs/security.md``).
"""

from __future__ import annotations

from typing import Any

from scrapy.settings import BaseSettings

MIB = 1024 * 1024

#: setting -> the distributed default (Scrapy's own in the comment)
DISTRIBUTED_LIMITS: dict[str, Any] = {
    "DOWNLOAD_MAXSIZE": 32 * MIB,  # 1 GiB; bounds the decompressed body too
    "DOWNLOAD_WARNSIZE": 4 * MIB,  # 32 MiB
    "REDIRECT_MAX_TIMES": 10,  # 20
    "URLLENGTH_LIMIT": 2083,  # 2083, kept: what old browsers took
    "DEPTH_LIMIT": 32,  # 0, no limit: the link-trap guard (a calendar's "next month")
    "ROBOTSTXT_OBEY": True,  # False
}


def apply(settings: BaseSettings, priority: str) -> None:
    """Set every limit at *priority*: a value set at a higher one (project, ``-s``) wins."""
    for name, value in DISTRIBUTED_LIMITS.items():
        settings.set(name, value, priority)
