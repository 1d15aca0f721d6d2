"""The status index's writer: a worker's URL events, batched into MongoDB before the acks.

Events join the current batch; every :attr:`StatusIndex.interval` seconds the batch goes
to MongoDB as one unordered bulk write, one pipeline update per URL
(:func:`crawler.statusindex.events.update`). A batch is an
:class:`~crawler.frontier.leases.AckBarrier` operation, as the ledger's is: a lease that
ends while it is open (its page fetched, its items stored) is acknowledged only after the
batch is written, so a worker killed with ``kill -9`` never leaves an acknowledged page out
of the index. An event may also carry an operation begun earlier (a follow-up request's
send), which then ends only with the batch. A failed write is retried with a backoff for
ever; the acks wait, as they do for the items.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import defaultdict
from typing import TYPE_CHECKING, Any

from pymongo import ASCENDING, IndexModel, UpdateOne

from crawler.connections.retry import retry
from crawler.connections.tasks import wait_event
from crawler.frontier.leases import AckBarrier
from crawler.statusindex.events import Event, update

if TYPE_CHECKING:
    from pymongo.asynchronous.collection import AsyncCollection

logger = logging.getLogger(__name__)
REMIND_EVERY = 60.0  # seconds between warnings while MongoDB refuses the index's writes


class StatusIndex:
    """Batches this worker's URL events into the crawl's status collection."""

    def __init__(self, collection: AsyncCollection[dict[str, Any]], barrier: AckBarrier, *,
                 ttl: float, interval: float) -> None:
        self.collection, self.barrier = collection, barrier
        self.ttl, self.interval = ttl, interval
        self._events: dict[str, list[Event]] = defaultdict(list)
        self._ops: list[int] = []
        self._own: int | None = None  # the batch's own barrier operation
        self._closing = asyncio.Event()
        self._task: asyncio.Future[None] | None = None
        self._failing_since: float | None = None
        self._reminded = 0.0
        self.written = 0  # events written
        self.batches = 0

    async def open(self) -> None:
        """The TTL index on ``at`` (``STATUS_INDEX_TTL``; none when 0), then the writer."""
        if self.ttl > 0:
            await self.collection.create_indexes(
                [IndexModel([("at", ASCENDING)], expireAfterSeconds=int(self.ttl))])
        await self.collection.create_indexes([IndexModel([("state", ASCENDING)])])
        self._task = asyncio.ensure_future(self._run())

    def add(self, url: str, found: Event, op: int | None = None) -> None:
        """Record *found* for *url*; *op*, a barrier operation, ends once it is written."""
        if self._own is None:
            self._own = self.barrier.begin()
        self._events[url].append(found)
        if op is not None:
            self._ops.append(op)

    @property
    def pending(self) -> int:
        return sum(len(v) for v in self._events.values())

    async def _run(self) -> None:
        while not self._closing.is_set():
            await wait_event(self._closing, self.interval)
            await self.flush()

    async def flush(self) -> None:
        events, self._events = self._events, defaultdict(list)
        ops, self._ops = self._ops, []
        own, self._own = self._own, None
        if events:
            now = time.time()
            writes = [UpdateOne({"_id": url}, update(found, now), upsert=True)
                      for url, found in events.items()]
            await retry(lambda: self.collection.bulk_write(writes, ordered=False),
                        on_retry=self._failed)
            self._recovered()
            self.written += sum(len(v) for v in events.values())
            self.batches += 1
        for op in ([] if own is None else [own]) + ops:
            self.barrier.end(op)

    def _failed(self, exc: Exception, attempt: int, delay: float) -> float:
        now = time.monotonic()
        if self._failing_since is None or now - self._reminded >= REMIND_EVERY:
            self._failing_since = self._failing_since or now
            self._reminded = now
            logger.warning("Status index: MongoDB refuses the write, retrying (the acks "
                           "wait): %s", str(exc)[:300])
        return delay

    def _recovered(self) -> None:
        if self._failing_since is not None:
            logger.info("Status index: written again after %.0f s",
                        time.monotonic() - self._failing_since)
            self._failing_since = None

    async def close(self, timeout: float) -> None:
        """Write what is left, within *timeout* seconds (what is not written then was not
        acknowledged either: its record comes again)."""
        self._closing.set()
        try:
            if self._task is not None:
                await asyncio.wait_for(asyncio.shield(self._task), timeout)
            await asyncio.wait_for(self.flush(), timeout)
        except TimeoutError:
            if self._task is not None:
                self._task.cancel()
            logger.warning("Status index: %d events not written at close", self.pending)
