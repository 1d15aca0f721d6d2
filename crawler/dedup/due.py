"""Per-request recrawl intervals: the ``recrawl_after`` meta key (docs/recrawl.md).

A request whose meta has ``recrawl_after = N`` (seconds, a number > 0) is filtered iff a
request of the same fingerprint was queued less than ``N`` seconds ago, whatever
``RECRAWL_AFTER`` says. The outbox (:mod:`crawler.frontier.outbox`) checks such requests
here instead of in the Bloom filter, read-only, before producing them, and records their
time only once the broker acknowledged them: a worker killed in between loses nothing.

:class:`RedisDue` keeps one field per fingerprint in the hash
``{<CRAWL_ID>}:recrawl:due`` (fingerprint hex -> Redis time, seconds): memory grows with the
URLs that carry the key only, so give it to a bounded set of hub pages. Times are Redis's
(``TIME`` inside the scripts), so workers' clocks may disagree. :class:`MemoryDue` is its
in-process twin for tests.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Protocol

from scrapy import Request

from crawler.config.keys import CrawlKeys
from crawler.dedup.redis_filter import LUA_DUE_CHECK, LUA_DUE_RECORD

if TYPE_CHECKING:
    import redis.asyncio as aioredis
    from scrapy.statscollectors import StatsCollector

logger = logging.getLogger(__name__)
__all__ = ["RECRAWL_META", "DueStore", "MemoryDue", "RedisDue", "interval_of"]

RECRAWL_META = "recrawl_after"
BATCH = 1000  # fingerprints a script call, well under Lua's unpack() limit


def interval_of(request: Request, stats: StatsCollector) -> float | None:
    """*request*'s ``recrawl_after`` meta, or None without one; a bad value is logged,
    counted (``recrawl/bad_meta``) and ignored."""
    value = request.meta.get(RECRAWL_META)
    if value is None:
        return None
    if (isinstance(value, bool) or not isinstance(value, int | float)
            or not math.isfinite(value) or value <= 0):
        logger.warning("Ignored meta %r = %r of the request %s: it must be a number of "
                       "seconds > 0 (docs/recrawl.md)", RECRAWL_META, value, request.url)
        stats.inc_value("recrawl/bad_meta")
        return None
    return float(value)


class DueStore(Protocol):
    """When the requests with a ``recrawl_after`` meta were last queued."""

    async def check(self, fingerprints: Sequence[bytes],
                    intervals: Sequence[float]) -> list[bool]:
        """For each fingerprint: True if it was queued less than its interval ago."""
        ...

    async def record(self, fingerprints: Sequence[bytes]) -> None:
        """Their requests are in the broker now (read-write)."""
        ...


class RedisDue:
    """:class:`DueStore` in the hash :attr:`~crawler.config.keys.CrawlKeys.recrawl_due`."""

    def __init__(self, client: aioredis.Redis, crawl_id: str) -> None:
        self.key = CrawlKeys(crawl_id).recrawl_due
        self._check = client.register_script(LUA_DUE_CHECK)  # no I/O until called
        self._record = client.register_script(LUA_DUE_RECORD)

    async def check(self, fingerprints: Sequence[bytes],
                    intervals: Sequence[float]) -> list[bool]:
        flags: list[bool] = []
        for at in range(0, len(fingerprints), BATCH):
            args: list[str] = []
            for fp, after in zip(fingerprints[at:at + BATCH], intervals[at:at + BATCH],
                                 strict=True):
                args += [fp.hex(), repr(float(after))]
            answer = await self._check(keys=[self.key], args=args)
            text = answer.decode() if isinstance(answer, bytes) else str(answer)
            flags += [c == "1" for c in text]
        return flags

    async def record(self, fingerprints: Sequence[bytes]) -> None:
        for at in range(0, len(fingerprints), BATCH):
            await self._record(keys=[self.key],
                               args=[fp.hex() for fp in fingerprints[at:at + BATCH]])


class MemoryDue:
    """:class:`DueStore` in memory, on *clock* (seconds): one process only."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.queued: dict[bytes, float] = {}

    async def check(self, fingerprints: Sequence[bytes],
                    intervals: Sequence[float]) -> list[bool]:
        now = self.clock()
        return [fp in self.queued and now - self.queued[fp] < after
                for fp, after in zip(fingerprints, intervals, strict=True)]

    async def record(self, fingerprints: Sequence[bytes]) -> None:
        now = self.clock()
        for fp in fingerprints:
            self.queued[fp] = now
