"""The shared dupefilter when URLs are fetched again (``RECRAWL_AFTER > 0``): one
:class:`~crawler.dedup.dupefilter.RedisBloom` per generation, two at a time.

Generation ``n`` is the filter ``{<CRAWL_ID>}:bloom:g<n>``; its number and start (Redis time)
are in the hash ``{<CRAWL_ID>}:recrawl``. :meth:`RecrawlBloom.check` says a fingerprint was
seen if the current or the previous generation has it; :meth:`RecrawlBloom.add` adds to the
current one. The ``tick`` script (``lua/tick.lua``) advances the generation once its
``RECRAWL_AFTER`` seconds are over and deletes, in the same call, the filters older than the
previous one, so the crawl holds two filters whatever its age. A worker asks Redis again
when its :class:`~crawler.dedup.generations.GenerationClock` says a generation is over (and
whenever a filter it uses is gone), so workers agree on the generation to within their
round trip to Redis; a disagreement at a boundary can only let a URL through twice
(crawled twice, stored once), never filter one that is due.

If the recrawl hash vanishes (``FLUSHALL``...), ``BLOOM_ON_MISSING`` applies as for the one
filter of a crawl without recrawl: pause (:class:`~crawler.dedup.dupefilter.BloomMissing`)
or start again from generation 1.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from redis.exceptions import ResponseError

from crawler.config.keys import CrawlKeys
from crawler.dedup.dupefilter import BloomMissing, RedisBloom
from crawler.dedup.generations import GenerationClock
from crawler.dedup.redis_filter import LUA_TICK

if TYPE_CHECKING:
    import redis.asyncio as aioredis
    from redis.commands.core import AsyncScript
    from scrapy.statscollectors import StatsCollector

logger = logging.getLogger(__name__)
__all__ = ["RecrawlBloom"]


class RecrawlBloom:
    """Two generations of Bloom filters; a fingerprint is forgotten ``T`` to ``2T`` after
    it was last added (``T = RECRAWL_AFTER``)."""

    def __init__(
        self, client: aioredis.Redis, crawl_id: str, *, after: float,
        make: Callable[[str], RedisBloom], on_missing: str = "pause",
        stats: StatsCollector | None = None, clock: GenerationClock | None = None,
    ) -> None:
        self.client, self.keys, self.after = client, CrawlKeys(crawl_id), after
        self.make, self.on_missing, self.stats = make, on_missing, stats
        self.clock = clock or GenerationClock(after)
        self.missing = False
        self._tick: AsyncScript | None = None
        self._filters: dict[int, RedisBloom] = {}  # generation -> its filter (two at most)

    @property
    def generation(self) -> int:
        """The generation it is now, as this worker estimates it (no I/O)."""
        return self.clock.estimate()

    async def open(self) -> None:
        """Start generation 1 if the crawl has none; open the current generation's filter."""
        self._tick = self.client.register_script(LUA_TICK)
        await self._advance(create=True)

    async def check(self, fingerprints: Sequence[bytes]) -> list[bool]:
        """For each fingerprint: True if the current or the previous generation has it."""
        if not fingerprints:
            return []
        current = await self._current()
        seen = await self._guarded(current, "check", fingerprints)
        unseen = [i for i, s in enumerate(seen) if not s]
        previous = self._filters.get(self.clock.number - 1)
        if unseen and previous is not None:
            try:
                again = await previous.check([fingerprints[i] for i in unseen])
            except BloomMissing:  # deleted by a newer generation meanwhile: forgotten
                again = [False] * len(unseen)
            for i, flag in zip(unseen, again, strict=True):
                seen[i] = flag
        return seen

    async def add(self, fingerprints: Sequence[bytes]) -> list[bool]:
        """Add to the current generation; True for each fingerprint it did not have."""
        if not fingerprints:
            return []
        current = await self._current()
        return await self._guarded(current, "add", fingerprints)

    async def _current(self) -> RedisBloom:
        if self.clock.due() or self.clock.number not in self._filters:
            await self._advance()
        return self._filters[self.clock.number]

    async def _guarded(self, bloom: RedisBloom, name: str,
                       fingerprints: Sequence[bytes]) -> list[bool]:
        """*bloom*'s *name* (check or add); if that filter is gone, ask Redis which
        generation it is and call again on its filter (a vanished crawl state raises)."""
        try:
            result: list[bool] = await getattr(bloom, name)(fingerprints)
            return result
        except BloomMissing:
            before = self.clock.number
            await self._advance()
            if self._filters.get(before) is bloom:  # still current: the filter itself is gone
                await self._vanished(self.keys.bloom_generation(before))
            retried: list[bool] = await getattr(self._filters[self.clock.number],
                                                name)(fingerprints)
            return retried

    async def _advance(self, *, create: bool = False) -> None:
        """Ask Redis for the generation (advancing it if due) and open its filter."""
        assert self._tick is not None, "RecrawlBloom.open() was not awaited"
        args = [repr(float(self.after)), "1" if create else "0", self.keys.bloom]
        try:
            number, started, now, dropped = await self._tick(keys=[self.keys.recrawl],
                                                             args=args)
        except ResponseError as exc:
            if not str(exc).startswith("NOFILTER"):
                raise
            await self._vanished(self.keys.recrawl)
            return
        self.clock.sync(int(number), float(started), float(now))
        self._recovered()
        if dropped:
            logger.info("Recrawl: generation %d began; deleted the filters of generation(s) "
                        "%s", int(number), ", ".join(str(int(g)) for g in dropped))
            self._inc("bloom/generations_dropped", len(dropped))
        await self._open_generation(int(number))

    async def _open_generation(self, number: int) -> None:
        if number in self._filters:
            return
        current = self.make(self.keys.bloom_generation(number))
        current.on_missing, current.missing_seen = "raise", None
        await current.open()
        previous = self._filters.get(number - 1)
        if previous is None:
            previous = self.make(self.keys.bloom_generation(number - 1))
            previous.on_missing, previous.missing_seen = "raise", None
            await previous.open(create=False)  # read only; it may not exist
        self._filters = {number: current, number - 1: previous}
        if self.stats is not None:
            self.stats.set_value("bloom/generation", number)

    async def _vanished(self, key: str) -> None:
        """The crawl's recrawl state (or its current filter) is gone from Redis."""
        if not self.missing:
            self._inc("bloom/missing")
        if self.on_missing == "recreate":
            logger.error("Recrawl state %s vanished from Redis: starting again "
                         "(BLOOM_ON_MISSING = recreate); every URL looks new again", key)
            self._filters.clear()
            await self._advance(create=True)
            return
        if not self.missing:
            self.missing = True
            logger.error(
                "Recrawl state %s is missing from Redis (FLUSHALL, a restart without "
                "persistence, an eviction?): this worker pauses instead of crawling again "
                "what it crawled (BLOOM_ON_MISSING; see docs/recrawl.md)", key)
        raise BloomMissing(f"{key} is missing from Redis: paused")

    def _recovered(self) -> None:
        if self.missing:
            self.missing = False
            logger.warning("Recrawl state of %s is back in Redis: the crawl goes on",
                           self.keys.crawl_id)

    def _inc(self, key: str, count: int = 1) -> None:
        if self.stats is not None:
            self.stats.inc_value(key, count)


def generation_of(backend: object) -> Callable[[], int] | None:
    """The estimate of the recrawl generation of *backend* (no I/O), or None if it has no
    generations: what a worker's pre-filter and recent window forget by."""
    return backend.clock.estimate if isinstance(backend, RecrawlBloom) else None
