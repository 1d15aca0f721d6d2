"""Where a crawl's robots.txt verdicts live: Redis for the cluster, memory for one process.

One key per origin, ``{<CRAWL_ID>}:robots:<scheme>://<host>:<port>`` (JSON, expiring a while
after the verdict), and while a worker fetches it a claim key (``SET NX PX``) so that the other
workers wait for its verdict instead of fetching it too.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from crawler.config.keys import CrawlKeys
from crawler.robots.verdict import Verdict

if TYPE_CHECKING:
    import redis.asyncio as aioredis

KEEP = 3600.0  # seconds a verdict's key outlives its expiry (the count of failures in a row)


class RobotsStore(Protocol):
    async def get(self, origin: str) -> Verdict | None: ...
    async def claim(self, origin: str, worker: str, seconds: float) -> bool: ...
    async def put(self, origin: str, verdict: Verdict, worker: str) -> None: ...


class RedisRobotsStore:
    def __init__(self, client: aioredis.Redis, crawl_id: str,
                 clock: Callable[[], float] = time.time) -> None:
        self.client, self.keys, self._clock = client, CrawlKeys(crawl_id), clock

    async def get(self, origin: str) -> Verdict | None:
        value = await self.client.get(self.keys.robots(origin))
        return Verdict.from_json(value) if value is not None else None

    async def claim(self, origin: str, worker: str, seconds: float) -> bool:
        key = self.keys.robots_claim(origin)
        return bool(await self.client.set(key, worker, nx=True, px=int(seconds * 1000)))

    async def put(self, origin: str, verdict: Verdict, worker: str) -> None:
        keep = max(verdict.expires - self._clock(), 0.0) + KEEP
        async with self.client.pipeline(transaction=True) as pipe:
            pipe.set(self.keys.robots(origin), verdict.to_json(), px=int(keep * 1000))
            pipe.delete(self.keys.robots_claim(origin))
            await pipe.execute()


class MemoryRobotsStore:
    """The same in this process (single-node mode, unit tests)."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self.verdicts: dict[str, Verdict] = {}
        self.claims: dict[str, tuple[str, float]] = {}

    async def get(self, origin: str) -> Verdict | None:
        return self.verdicts.get(origin)

    async def claim(self, origin: str, worker: str, seconds: float) -> bool:
        held = self.claims.get(origin)
        if held is not None and held[1] > self._clock():
            return False
        self.claims[origin] = (worker, self._clock() + seconds)
        return True

    async def put(self, origin: str, verdict: Verdict, worker: str) -> None:
        self.verdicts[origin] = verdict
        self.claims.pop(origin, None)
