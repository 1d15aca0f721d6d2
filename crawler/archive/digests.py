"""The payload digest of each URL's last full capture, shared by every worker of a crawl.

A recrawled page whose payload did not change gets a ``revisit`` record that refers to that
capture. :class:`RedisDigests` keeps one field per request fingerprint (hex) in the hash
:attr:`~crawler.config.keys.CrawlKeys.warc_digests`, valued ``"<digest> <WARC-Date>"``
(:class:`~crawler.archive.records.Seen`): about 100 bytes a page. :class:`MemoryDigests` is
its in-process twin for single-node mode.

:class:`DigestBook` is what the middleware uses: the lookups of one moment become one
``HMGET``, the captures to remember one ``HSET``. A capture is remembered only once its
records are on disk, so a revisit never refers to a record that could be lost. A Redis
error costs a revisit (the page is stored whole), never a page.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Protocol

from crawler.archive.records import Seen
from crawler.config.keys import CrawlKeys
from crawler.connections.redis_errors import describe
from crawler.connections.tasks import Tasks

if TYPE_CHECKING:
    import redis.asyncio as aioredis
    from scrapy.statscollectors import StatsCollector

logger = logging.getLogger(__name__)
BATCH = 1000  # fields one HMGET or HSET carries
REMIND_EVERY = 60.0  # seconds between two lines about failing digest calls


class DigestStore(Protocol):
    async def lookup(self, fingerprints: Sequence[str]) -> list[Seen | None]: ...
    async def remember(self, seen: Mapping[str, Seen]) -> None: ...


class MemoryDigests:
    """:class:`DigestStore` in this process (single-node mode)."""

    def __init__(self) -> None:
        self.seen: dict[str, Seen] = {}

    async def lookup(self, fingerprints: Sequence[str]) -> list[Seen | None]:
        return [self.seen.get(fp) for fp in fingerprints]

    async def remember(self, seen: Mapping[str, Seen]) -> None:
        self.seen.update(seen)


class RedisDigests:
    """:class:`DigestStore` in the crawl's Redis hash."""

    def __init__(self, client: aioredis.Redis, crawl_id: str) -> None:
        self.client, self.key = client, CrawlKeys(crawl_id).warc_digests

    async def lookup(self, fingerprints: Sequence[str]) -> list[Seen | None]:
        found: list[Seen | None] = []
        for at in range(0, len(fingerprints), BATCH):
            values = await self.client.hmget(self.key, list(fingerprints[at:at + BATCH]))
            found += [Seen.decode(value) for value in values]
        return found

    async def remember(self, seen: Mapping[str, Seen]) -> None:
        items = [(fp, s.encode()) for fp, s in seen.items()]
        for at in range(0, len(items), BATCH):
            await self.client.hset(self.key, mapping=dict(items[at:at + BATCH]))


class DigestBook:
    """Batched, failure-tolerant access to a :class:`DigestStore`."""

    def __init__(self, store: DigestStore, stats: StatsCollector | None = None) -> None:
        self.store, self.stats = store, stats
        self._asked: list[tuple[str, asyncio.Future[Seen | None]]] = []
        self._pending: dict[str, Seen] = {}
        self._lookups: asyncio.Task[None] | None = None
        self._remembers: asyncio.Task[None] | None = None
        self._tasks = Tasks("WARC digests")
        self._failing_since: float | None = None
        self._reminded = 0.0

    async def previous(self, fingerprint: str) -> Seen | None:
        """The last full capture of *fingerprint*'s URL, if any is known."""
        future: asyncio.Future[Seen | None] = asyncio.get_running_loop().create_future()
        self._asked.append((fingerprint, future))
        if self._lookups is None:
            self._lookups = self._tasks.spawn(self._look_up(), "lookups")
        return await future

    def remember(self, fingerprint: str, seen: Seen) -> None:
        """*fingerprint*'s URL was captured whole (its records are on disk): soon stored."""
        self._pending[fingerprint] = seen
        if self._remembers is None:
            self._remembers = self._tasks.spawn(self._store(), "remember")

    async def close(self) -> None:
        """Store what is pending, then stop."""
        if self._remembers is not None:
            await asyncio.wait({self._remembers}, timeout=10.0)
        await self._tasks.close()
        for _fp, future in self._asked:
            if not future.done():
                future.set_result(None)

    async def _look_up(self) -> None:
        await asyncio.sleep(0)  # the asks of this moment join the first batch
        while self._asked:
            batch, self._asked = self._asked[:BATCH], self._asked[BATCH:]
            found: list[Seen | None] = [None] * len(batch)
            try:
                found = await self.store.lookup([fp for fp, _future in batch])
                self._succeeded()
            except Exception as exc:
                self._failed("look-up", exc)
            for (_fp, future), seen in zip(batch, found, strict=True):
                if not future.done():
                    future.set_result(seen)
        self._lookups = None

    async def _store(self) -> None:
        await asyncio.sleep(0)
        while self._pending:
            batch, self._pending = self._pending, {}
            try:
                await self.store.remember(batch)
                self._succeeded()
            except Exception as exc:
                self._failed("update", exc)
        self._remembers = None

    def _failed(self, what: str, exc: BaseException) -> None:
        if self.stats is not None:
            self.stats.inc_value("warc/digest_errors")
        now = time.monotonic()
        if self._failing_since is None or now - self._reminded >= REMIND_EVERY:
            self._failing_since = self._failing_since or now
            self._reminded = now
            logger.warning("WARC payload digests: %s failed (%s); pages are stored whole, "
                           "not as revisits, until it works", what, describe(exc))

    def _succeeded(self) -> None:
        if self._failing_since is not None:
            logger.info("WARC payload digests work again after %.0fs",
                        time.monotonic() - self._failing_since)
            self._failing_since = None
