"""Bloom-filter dupefilters: a scalable filter shared in Redis, and local filters.

:class:`RedisBloom` keeps a scalable Bloom filter (see :mod:`crawler.dedup.bloom`) in plain
Redis 7: slice ``i`` is the string ``<key>:s<i>`` (and, past ``PIECE_BITS`` bits,
``<key>:s<i>:1``, ``<key>:s<i>:2``, ...), the parameters and per-slice counts live in the
hash ``<key>:meta`` (see :mod:`crawler.dedup.redis_filter`). Give *key* a hash tag
(``{crawl}:bloom``) so every key of a filter lands in one Redis Cluster slot. Each
:meth:`RedisBloom.check` or :meth:`RedisBloom.add` of a batch is one ``EVALSHA`` (an add
that creates pieces takes one more per new piece). The pieces are created when first
written, so a new filter or slice costs nothing until it is used.

If the filter a worker opened disappears (``FLUSHALL``, a Redis restart without
persistence, an eviction), every URL would look new and the crawl would silently start
over. By default (``BLOOM_ON_MISSING = "pause"``) :meth:`RedisBloom.check` and
:meth:`RedisBloom.add` raise :class:`BloomMissing` instead, which the outbox retries like
an outage: the worker stalls with one ERROR line until the filter is back.

The Kafka frontier builds its backend from ``FRONTIER_DEDUP_CLASS`` (default
:class:`RedisBloom`) through :class:`~crawler.dedup.backend.DedupFactory`;
``DUPEFILTER_CLASS`` is Scrapy's scheduler's, used in single-node mode only.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Self

import redis.asyncio as aioredis
from redis.exceptions import ResponseError

from crawler.config.keys import CrawlKeys
from crawler.connections.redis_errors import TransientError
from crawler.dedup import bloom as sizing
from crawler.dedup.backend import ON_MISSING, BloomConfig
from crawler.dedup.bloom import PIECE_BITS, digest, plan, validate
from crawler.dedup.bloominfo import BloomInfo, describe
from crawler.dedup.redis_filter import LUA_ADD, LUA_CHECK, LUA_CREATE

if TYPE_CHECKING:
    from redis.commands.core import AsyncScript
    from scrapy.crawler import Crawler
    from scrapy.settings import BaseSettings

logger = logging.getLogger(__name__)
__all__ = ["BloomInfo", "BloomMissing", "RedisBloom"]


class BloomMissing(TransientError):
    """The filter this worker opened is gone from Redis (``BLOOM_ON_MISSING = "pause"``):
    callers stall and retry until it is back (restored, or created again by an operator)."""


def _flags(value: bytes | str) -> list[bool]:
    data = value.encode() if isinstance(value, str) else value
    return [byte == 0x31 for byte in data]  # b"1"


class RedisBloom:
    """A scalable Bloom filter of request fingerprints shared by all workers in Redis."""

    def __init__(
        self,
        client: aioredis.Redis,
        key: str,
        *,
        capacity: int,
        error_rate: float,
        growth: int,
        on_grow: Callable[[int], None] | None = None,
        piece_bits: int = PIECE_BITS,
        on_missing: str = "pause",
        missing_seen: Callable[[], None] | None = None,
    ) -> None:
        validate(capacity=capacity, error_rate=error_rate, growth=growth)
        if not 8 <= piece_bits <= sizing.MAX_SLICE_BITS:  # a piece is one Redis string
            raise ValueError(f"piece_bits must be >= 8 and <= {sizing.MAX_SLICE_BITS}, "
                             f"got {piece_bits}")
        if on_missing not in (*ON_MISSING, "raise"):  # raise: the caller decides (recrawl)
            raise ValueError(f"on_missing must be one of {ON_MISSING}, got {on_missing!r}")
        self.client = client
        self.key = key
        self.capacity = capacity
        self.error_rate = error_rate
        self.growth = growth
        self.on_grow = on_grow
        self.piece_bits = piece_bits  # for a filter this call creates
        self.on_missing = on_missing
        self.missing_seen = missing_seen  # called once each time the filter is found missing
        self.missing = False  # the filter this worker opened is gone (and not re-created)
        self._meta = f"{key}:meta"
        self._scripts: dict[str, AsyncScript] = {}
        self._warned_full = False
        self._warned_unfiltered = False
        self.crawl_keys: CrawlKeys | None = None  # whose recrawl hash info() reads (for_crawl)

    @classmethod
    def check_settings(cls, settings: BaseSettings) -> None:
        BloomConfig.from_settings(settings)

    @classmethod
    def from_crawler(cls, crawler: Crawler, client: aioredis.Redis, *, key: str) -> Self:
        """The crawl's filter *key*, sized by ``BLOOM_*``, counting ``bloom/slices_added``
        and ``bloom/missing`` in the crawler's stats."""
        cfg, stats = BloomConfig.from_settings(crawler.settings), crawler.stats
        assert stats is not None
        return cls(client, key, capacity=cfg.capacity, error_rate=cfg.error_rate,
                   growth=cfg.growth, on_missing=cfg.on_missing,
                   on_grow=lambda _i: stats.inc_value("bloom/slices_added"),
                   missing_seen=lambda: stats.inc_value("bloom/missing"))

    @classmethod
    def for_crawl(cls, client: aioredis.Redis, crawl_id: str, cfg: BloomConfig) -> Self:
        """The filter of crawl *crawl_id* (``{<CRAWL_ID>}:bloom``) sized by *cfg*: a
        read-only handle for :meth:`info` (never opened), as ``scrapy cluster`` and the
        alerts use."""
        handle = cls(client, CrawlKeys(crawl_id).bloom, capacity=cfg.capacity,
                     error_rate=cfg.error_rate, growth=cfg.growth)
        handle.crawl_keys = CrawlKeys(crawl_id)  # info() follows the recrawl generation
        return handle

    async def open(self, *, create: bool = True) -> None:
        """Load the scripts and create the filter, or adopt the parameters stored in
        Redis if it exists (a warning if they differ from ours). An existing filter
        planned with fewer slices gets the slices it lacks. With *create* false, only
        the scripts are loaded (a filter that may be gone: a previous recrawl generation)."""
        sources = {"create": LUA_CREATE, "check": LUA_CHECK, "add": LUA_ADD}
        for name, source in sources.items():
            self._scripts[name] = self.client.register_script(source)
            await self.client.script_load(source)
        if not create:
            return
        stored = await self._run("create", self._create_args())
        params = (int(stored[0]), float(stored[1]), int(stored[2]))
        if params != (self.capacity, self.error_rate, self.growth):
            self._adopt(*params)
            await self._run("create", self._create_args())  # plan with the stored ones

    def _create_args(self) -> list[Any]:
        specs = plan(capacity=self.capacity, error_rate=self.error_rate, growth=self.growth)
        args: list[Any] = [
            self.key, self.capacity, repr(self.error_rate), self.growth, self.piece_bits,
            len(specs),
        ]
        for spec in specs:
            args += [spec.capacity, spec.bits, spec.hashes]
        return args

    def _adopt(self, capacity: int, error_rate: float, growth: int) -> None:
        ours = (self.capacity, self.error_rate, self.growth)
        logger.warning(
            "Bloom filter %s exists with capacity %d, error rate %s, growth %d; "
            "keeping those instead of capacity %d, error rate %s, growth %d",
            self.key, capacity, error_rate, growth, *ours,
        )
        self.capacity, self.error_rate, self.growth = capacity, error_rate, growth

    async def _run(self, name: str, args: list[Any]) -> Any:
        script = self._scripts.get(name)
        if script is None:
            raise RuntimeError(f"RedisBloom({self.key!r}).open() was not awaited")
        return await script(keys=[self._meta], args=args)

    async def _call(self, name: str, args: list[Any]) -> Any:
        """Run script *name*; if the filter is missing, pause (raise :class:`BloomMissing`)
        or create it again and run the script on the new, empty filter."""
        try:
            result = await self._run(name, args)
        except ResponseError as exc:
            if not str(exc).startswith("NOFILTER"):
                raise
            await self._vanished()
            result = await self._run(name, args)
        if self.missing:
            self.missing = False
            logger.warning("Bloom filter %s is back in Redis: the crawl goes on", self.key)
        return result

    async def _vanished(self) -> None:
        if self.on_missing == "raise":
            raise BloomMissing(f"Bloom filter {self.key} is missing from Redis")
        if not self.missing and self.missing_seen is not None:
            self.missing_seen()
        if self.on_missing == "recreate":
            logger.error("Bloom filter %s vanished from Redis: creating it again "
                         "(BLOOM_ON_MISSING = recreate); every URL looks new again", self.key)
            await self.open()
            return
        if not self.missing:
            self.missing = True
            logger.warning(  # the state guard's ERROR says what is lost and what is done
                "Bloom filter %s is missing from Redis (FLUSHALL, a restart without "
                "persistence, an eviction?): this worker pauses instead of crawling again "
                "what it crawled, until the crawl's state is repaired (CRAWL_STATE_LOST) or "
                "Redis restored (BLOOM_ON_MISSING; see docs/delivery.md)", self.key)
        raise BloomMissing(f"Bloom filter {self.key} is missing from Redis: paused")

    async def check(self, fingerprints: Sequence[bytes]) -> list[bool]:
        """For each fingerprint: True if the filter has (probably) seen it. Changes nothing.
        A filter whose last slice is full for good answers False for all (and says so)."""
        if not fingerprints:
            return []
        payload = b"".join(digest(fp) for fp in fingerprints)
        flags, unfiltered = await self._call("check", [self.key, payload])
        if unfiltered and not self._warned_unfiltered:
            self._warned_unfiltered = True
            logger.error("Bloom filter %s is full and can grow no more: it no longer filters "
                         "(duplicates are crawled again); raise BLOOM_CAPACITY", self.key)
        return _flags(flags)

    async def add(self, fingerprints: Sequence[bytes]) -> list[bool]:
        """Check and add the batch. For each fingerprint: True if this call added it (it
        was new); a fingerprint repeated in the batch is new once. Each fingerprint is
        checked and added atomically; a batch that lands in pieces not yet created takes
        one script call per new piece (each call creates at most one)."""
        if not fingerprints:
            return []
        digests = [digest(fp) for fp in fingerprints]
        result = [False] * len(digests)
        todo = list(range(len(digests)))
        while todo:
            args = [self.key, b"".join(digests[i] for i in todo)]
            flags, grown, full, later = await self._call("add", args)
            self._report(grown, bool(full))
            for i, flag in zip(todo, _flags(flags), strict=True):
                result[i] = result[i] or flag
            todo = [todo[int(j) - 1] for j in later]
        return result

    def _report(self, grown: list[list[int]], full: bool) -> None:
        for index, items, capacity in grown:
            logger.info(
                "Bloom filter %s is full at %d items: added slice %d (capacity %d)",
                self.key, items, index, capacity,
            )
            if self.on_grow is not None:
                self.on_grow(int(index))
        if full and not self._warned_full:
            self._warned_full = True
            logger.warning(
                "Bloom filter %s is full and cannot add another slice: its false-positive "
                "rate now rises above %s; raise BLOOM_CAPACITY for the next crawl",
                self.key, self.error_rate,
            )

    async def info(self) -> BloomInfo:
        """Slices, items, capacity, fill and memory of the filter (zeros if it does not
        exist); with recrawl generations, of the current generation's filter."""
        return await describe(self.client, self.key, self.crawl_keys, self.error_rate,
                              self.growth)
