"""Notice that Redis lost a running crawl's state, say so, and repair it before going on.

A Redis that comes back empty (a restart without persistence, ``FLUSHALL``, a failover to an
empty replica) looks like a new crawl: an empty Bloom filter lets every URL through again and
the crawl silently starts over. :class:`StateGuard` runs when a worker opens and when a
running worker finds its filter gone. The crawl's Redis state is *lost* when Redis has no
filter while the crawl exists elsewhere: its consumer group has committed offsets, or its
MongoDB collection holds documents (:class:`Evidence`). Then the worker logs one ERROR line,
sets the stat ``crawl/state_lost`` (the alert ``state_lost``) and, by ``CRAWL_STATE_LOST``:

- ``repair`` (default): one worker (a lock in Redis) rebuilds before any request of it goes
  through: the seed key and the finished record from their copy in MongoDB
  (:mod:`crawler.recovery.mirror`, or the key this worker holds), the ledger marked as reset
  (``reset/at``, ``reset/committed``: ``scrapy cluster report`` says so), and the Bloom
  filter (:mod:`crawler.recovery.rebuild`), put in place last. The others wait for it.
- ``stop``: the worker refuses to go on, naming the problem, for operators who decide.

A finished crawl whose state expired as ``CRAWL_STATE_TTL`` says is not a loss: it starts
again as a new run, as before, with a WARNING.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import redis.asyncio as aioredis
from scrapy import Request

from crawler.config.keys import CrawlKeys
from crawler.config.readers import SettingError
from crawler.connections import shared
from crawler.connections.tasks import Tasks, every, in_thread
from crawler.dedup.dupefilter import RedisBloom
from crawler.frontier import crawllife
from crawler.frontier.config import FrontierConfig
from crawler.frontier.seedtrust import crawl_seed_key
from crawler.recovery import kafka_read, rebuild
from crawler.recovery.mirror import Mirrored, StateMirror, collection_of
from crawler.storage.settings import StorageConfig

logger = logging.getLogger(__name__)
MODES = ("repair", "stop")  # CRAWL_STATE_LOST
LOCK_MS = 60_000  # the repair lock's time to live, renewed while the repair runs
WAIT = 0.5  # seconds between two looks at another worker's repair


class CrawlStateLost(SettingError):
    """The crawl's Redis state is gone and ``CRAWL_STATE_LOST = "stop"``."""


@dataclass(frozen=True)
class Evidence:
    """What says the crawl has run: offsets its group committed, items it stored."""

    committed: int
    documents: int

    @property
    def exists(self) -> bool:
        return self.committed > 0 or self.documents > 0


class StateGuard:
    """Detects a crawl's lost Redis state and repairs it (or stops), once at a time."""

    def __init__(self, client: aioredis.Redis, cfg: FrontierConfig, *, mode: str, worker: str,
                 stats: Any, make_filter: Callable[[str], RedisBloom], database: Any | None,
                 by_url_id: bool, fingerprint: Callable[[Request], bytes], state_ttl: float,
                 recrawl: bool = False) -> None:
        self.client, self.cfg, self.mode, self.worker = client, cfg, mode, worker
        self.keys = CrawlKeys(cfg.crawl_id)
        self.stats, self.make_filter, self.fingerprint = stats, make_filter, fingerprint
        self.database, self.by_url_id = database, by_url_id
        self.mirror = None if database is None else StateMirror(
            database[collection_of(cfg.crawl_id)])
        self.state_ttl, self.recrawl = state_ttl, recrawl
        self.own_key: bytes | None = None  # the seed key this worker holds, once open
        self.stop: Callable[[str], None] | None = None  # ends a running worker (stop mode)
        self._lock = asyncio.Lock()
        self._release: Callable[[], Any] | None = None
        self._tasks = Tasks("state guard")  # the copies written to MongoDB

    @classmethod
    def from_crawler(cls, crawler: Any, client: aioredis.Redis, cfg: FrontierConfig, *,
                     worker: str, recrawl: bool) -> StateGuard:
        """The guard of *crawler*'s crawl: ``CRAWL_STATE_LOST``, the crawl's MongoDB database
        (the worker's shared client, given back by :meth:`close`) and filter sizing."""
        settings = crawler.settings
        storage = StorageConfig.from_settings(settings, cfg.crawl_id)
        mongo = None if storage is None else shared.mongo_for(crawler)
        guard = cls(client, cfg, mode=cfg.state_lost,
                    worker=worker, stats=crawler.stats,
                    make_filter=lambda key: RedisBloom.from_crawler(crawler, client, key=key),
                    database=None if mongo is None or storage is None
                    else mongo[storage.database],
                    by_url_id=storage is None or storage.key_fields == ("url",),
                    fingerprint=crawler.request_fingerprinter.fingerprint,
                    state_ttl=crawllife.state_ttl(settings), recrawl=recrawl)
        guard._release = None if mongo is None else (
            lambda: shared.release_mongo(crawler, mongo))
        return guard

    async def close(self) -> None:
        """End the copies still being written, and give the shared MongoDB client back."""
        await self._tasks.close()
        release, self._release = self._release, None
        if release is not None:
            await release()

    def saved_seed_key(self, key: bytes) -> None:
        """Keep a copy of the crawl's seed key in MongoDB (in the background: a failure is
        said, never in the way of the crawl)."""
        self.own_key = key
        if self.mirror is not None:
            self._background(self.mirror.save_seed_key(key), "the seed key's copy")

    def _background(self, work: Any, what: str) -> None:
        async def run() -> None:
            try:
                await work
            except Exception as exc:
                logger.warning("Could not write %s to MongoDB: %s", what, exc)

        self._tasks.spawn(run(), what)

    async def ensure(self, *, running: bool = False) -> None:
        """Return once the crawl's Redis state is there (repaired if it was lost); raise
        :class:`CrawlStateLost` in stop mode. *running*: this worker opened the filter that
        vanished, so the crawl exists whatever Kafka and MongoDB say yet."""
        async with self._lock:
            if await self.has_state():
                return
            mirrored = await self._mirrored()
            evidence = await self.evidence(mirrored)
            if not evidence.exists and not running:
                return  # a new crawl
            if self._expired(mirrored):
                return
            self._lost(evidence)
            await self._repair_or_wait(mirrored)

    async def watch(self) -> None:
        """A running worker's filter vanished: the same, a stop mode ends the worker."""
        try:
            await self.ensure(running=True)
        except CrawlStateLost as exc:
            if self.stop is not None:
                self.stop(str(exc))

    async def has_state(self) -> bool:
        return bool(await self.client.exists(f"{self.keys.bloom}:meta", self.keys.recrawl))

    async def evidence(self, mirrored: Mirrored) -> Evidence:
        """Offsets committed, and the items stored if the crawl's state copy (*mirrored*) is
        there too: ``scrapy cluster purge`` drops the copy (and the topics and group), so a
        purged crawl run again starts anew, whatever it stored before."""
        committed = await self._committed()
        documents = 0
        if self.database is not None and mirrored.kept:
            documents = await self.database[self.cfg.crawl_id].estimated_document_count()
        return Evidence(committed, documents)

    async def _mirrored(self) -> Mirrored:
        return Mirrored() if self.mirror is None else await self.mirror.load()

    def _expired(self, mirrored: Mirrored) -> bool:
        """Whether the crawl had finished and its state expired by ``CRAWL_STATE_TTL``."""
        done = mirrored.finished
        if done is None or self.state_ttl <= 0 or time.time() - done.closed < self.state_ttl:
            return False
        logger.warning("Crawl %s finished on %s and its Redis state expired since "
                       "(CRAWL_STATE_TTL): this run starts it again as a new crawl",
                       self.cfg.crawl_id, done.date())
        return True

    def _lost(self, evidence: Evidence) -> None:
        self.stats.set_value("crawl/state_lost", 1)
        self.stats.inc_value("crawl/state_losses")
        what = "repairing it before any request goes on" if self.mode == "repair" else \
            "this worker stops (CRAWL_STATE_LOST = stop)"
        line = (f"Redis has lost the state of crawl {self.cfg.crawl_id} (no Bloom filter), "
                f"yet the crawl exists: {evidence.committed} records committed by group "
                f"{self.cfg.group_id}, {evidence.documents} documents in MongoDB. A restart "
                f"without persistence, FLUSHALL or a failover to an empty replica?")
        if self.mode == "stop" or self.recrawl:
            why = "repair does not rebuild recrawl generations: " if self.recrawl else ""
            raise CrawlStateLost("CRAWL_STATE_LOST", f"{line} {why}Restore Redis from its "
                                 "persistence, or set CRAWL_STATE_LOST = repair")
        logger.error("%s %s", line, what)

    async def _repair_or_wait(self, mirrored: Mirrored) -> None:
        waiting = False
        while True:
            if await self.client.set(self.keys.repair, self.worker, nx=True, px=LOCK_MS):
                try:
                    if not await self.has_state():  # or another worker repaired meanwhile:
                        await self._repair(mirrored)  # a second swap would drop its adds
                finally:
                    await self._unlock()
                return
            if not waiting:
                waiting = True
                logger.info("Another worker repairs the crawl's state: waiting for it")
            while await self.client.exists(self.keys.repair):
                await asyncio.sleep(WAIT)
            if await self.has_state():
                return

    async def _unlock(self) -> None:
        if await self.client.get(self.keys.repair) == self.worker.encode():
            await self.client.delete(self.keys.repair)

    async def _repair(self, mirrored: Mirrored) -> None:
        started = time.monotonic()
        renew = asyncio.ensure_future(every(LOCK_MS / 3000, self._renew))
        try:
            key = mirrored.seed_key or self.own_key
            if key is not None:
                await crawl_seed_key(self.client, self.cfg.crawl_id, proposed=key)
            if mirrored.finished is not None:
                await crawllife.mark_finished(self.client, self.cfg.crawl_id, mirrored.finished)
            await self._reset_ledger()
            count = await rebuild.rebuild(self.client, self.keys, self.make_filter,
                                          self._fingerprints())
        finally:
            renew.cancel()
        took = time.monotonic() - started
        self.stats.set_value("crawl/state_repair_seconds", round(took, 3))
        logger.warning("Crawl %s repaired in %.1f s: %d fingerprints in its Bloom filter, "
                       "the seed key %s, the finished record %s, the ledger marked reset",
                       self.cfg.crawl_id, took, count,
                       "kept" if key is not None else "not known (a new one)",
                       "restored" if mirrored.finished is not None else "absent")

    async def _committed(self) -> int:
        return await in_thread(lambda: kafka_read.committed_offsets(self.cfg), "repair-offsets")

    async def _renew(self) -> None:
        await self.client.pexpire(self.keys.repair, LOCK_MS)

    async def _reset_ledger(self) -> None:
        """The counters are gone: say when, and how many records had been committed."""
        committed = await self._committed()
        now, _ = await self.client.time()
        await self.client.hset(self.keys.ledger,
                               mapping={"reset/at": int(now), "reset/committed": committed})

    def _fingerprints(self) -> Any:
        return rebuild.fingerprints(self.cfg, self.database, by_url_id=self.by_url_id,
                                    fingerprint=self.fingerprint)


def watch_filter(backend: object, lost: Callable[[], object]) -> None:
    """Call *lost* each time *backend*, the crawl's :class:`RedisBloom`, finds its filter
    gone from Redis (a running worker's detection; other backends have no such signal)."""
    if not isinstance(backend, RedisBloom):
        return
    seen = backend.missing_seen

    def both() -> None:
        if seen is not None:
            seen()
        lost()

    backend.missing_seen = both
