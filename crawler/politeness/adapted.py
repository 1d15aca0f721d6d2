"""Hosts with no rate of their own that answered 429 or 503 (``RATELIMIT_DECREASE_ON``).

With the default ``RATELIMIT_RATE = 0`` most hosts have no rate, so there is nothing for the
adaptive rule to lower. A host that answers such a status gets ``RATELIMIT_UNRATED_RATE``
(a burst of one), at once lowered by ``RATELIMIT_DECREASE_FACTOR`` and then lowered and
recovered by the usual rule, never above that rate, for ``RATELIMIT_STATE_TTL`` seconds after
its last such answer. The hosts are shared through the Redis hash
``{<CRAWL_ID>}:ratelimit:adapted`` (host -> the ``time.time()`` they keep the rate until),
which every worker reads every :data:`REFRESH` seconds (one ``HGETALL``); in memory in
single-node mode.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from redis.exceptions import RedisError

from crawler.config.keys import CrawlKeys
from crawler.politeness.tokenbucket import Limit

if TYPE_CHECKING:
    import redis.asyncio as aioredis

logger = logging.getLogger(__name__)
REFRESH = 2.0  # seconds between two reads of the shared hash
ERRORS = (RedisError, OSError, asyncio.TimeoutError)


class AdaptedHosts:
    def __init__(self, client: aioredis.Redis | None, crawl_id: str, rate: float,
                 hold: float, clock: Callable[[], float] = time.time) -> None:
        self.client, self.key = client, CrawlKeys(crawl_id).ratelimit_adapted
        self.rate, self.hold, self._clock = rate, hold, clock
        self.hosts: dict[str, float] = {}  # host -> until

    def limit(self, host: str) -> Limit | None:
        until = self.hosts.get(host)
        return Limit(self.rate, 1.0) if until is not None and until > self._clock() else None

    async def adopt(self, host: str) -> Limit:
        """*host* answered 429 or 503: it has a rate from now on (Redis errors propagate)."""
        until = self._clock() + self.hold
        self.hosts[host] = until  # first: the answers of its other requests adopt it no more
        if self.client is not None:
            await self.client.hset(self.key, host, repr(until))
        return Limit(self.rate, 1.0)

    async def refresh(self) -> None:
        if self.client is None:
            return
        now = self._clock()
        shared = await self.client.hgetall(self.key)
        hosts: dict[str, float] = {}
        for raw_host, raw_until in shared.items():
            host = raw_host.decode() if isinstance(raw_host, bytes) else str(raw_host)
            try:
                until = float(raw_until)
            except ValueError:
                continue
            if until > now:
                hosts[host] = max(until, self.hosts.get(host, 0.0))
        self.hosts = hosts

    async def run(self) -> None:
        """:meth:`refresh` every :data:`REFRESH` seconds; a failed read keeps what it knew."""
        while True:
            try:
                await self.refresh()
            except ERRORS as exc:
                logger.debug("Rate limit: cannot read the adapted hosts: %s", exc)
            await asyncio.sleep(REFRESH)
