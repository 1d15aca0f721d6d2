"""The ``Crawl-delay`` each host's robots.txt asks for, as this worker knows it.

:mod:`crawler.middlewares.robots` sets it when it learns a host's rules (capped at
``ROBOTSTXT_CRAWL_DELAY_MAX``); :mod:`crawler.middlewares.ratelimit` turns it into the host's
cluster-wide token bucket: one request per delay, a burst of one.
"""

from __future__ import annotations

from typing import Any
from weakref import WeakKeyDictionary

_DELAYS: WeakKeyDictionary[Any, dict[str, float]] = WeakKeyDictionary()


def crawl_delays(crawler: Any) -> dict[str, float]:
    """Host (lower case, no port) -> seconds, for *crawler*'s process."""
    delays = _DELAYS.get(crawler)
    if delays is None:
        delays = _DELAYS[crawler] = {}
    return delays
