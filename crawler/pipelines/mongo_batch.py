"""Batched bulk upserts into MongoDB that retry transient failures until they succeed.

:class:`BatchWriter` collects documents into batches, seals a batch when it is full or old
enough, and writes the sealed batches one after the other; each document's waiter settles
once its upsert is durably written (or permanently rejected). The error classification
(:func:`is_transient`, :func:`is_transient_write_error`) and backoff (:func:`retry_delay`)
are plain functions.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from bson.raw_bson import RawBSONDocument
from pymongo import ReplaceOne
from pymongo.errors import (
    BulkWriteError,
    ConnectionFailure,
    OperationFailure,
    PyMongoError,
    WriteConcernError,
)
from scrapy.exceptions import DropItem

from crawler.config import mask_url

if TYPE_CHECKING:
    from collections.abc import Mapping

    from pymongo.asynchronous.collection import AsyncCollection
    from scrapy.statscollectors import StatsCollector

# the pipeline's channel, so that log settings and filters for it keep covering its writes
logger = logging.getLogger("crawler.pipelines.mongo")

#: server error codes worth retrying: not primary, shutting down, network, timeouts
TRANSIENT_CODES = frozenset(
    {6, 7, 24, 50, 64, 89, 91, 112, 134, 189, 262, 9001, 10058, 10107, 11600, 11602, 13435,
     13436}
)


def retry_delay(attempt: int, base: float, cap: float) -> float:
    """Seconds to wait before retry number *attempt* (0-based): doubling, capped."""
    return min(cap, base * 2 ** min(attempt, 32))


def is_transient(exc: BaseException) -> bool:
    """Whether a failed bulk write (other than a ``BulkWriteError``) may succeed later."""
    if isinstance(exc, (ConnectionFailure, WriteConcernError)):
        return True  # includes AutoReconnect, NetworkTimeout, NotPrimary, server selection
    if isinstance(exc, OperationFailure):
        return exc.code in TRANSIENT_CODES or exc.has_error_label("RetryableWriteError")
    return False


def is_transient_write_error(error: dict[str, Any]) -> bool:
    """Whether one ``writeErrors`` entry of a bulk write may succeed when retried."""
    if error.get("code") == 11000:  # two upserts of one _id raced: the retry replaces
        return error.get("keyPattern") == {"_id": 1} or "index: _id_ " in error.get("errmsg", "")
    return error.get("code") in TRANSIENT_CODES


@dataclass
class Batch:
    """Documents waiting for one bulk write; the newest document of a key wins."""

    keys: list[str] = field(default_factory=list)
    ops: list[ReplaceOne[Any]] = field(default_factory=list)
    waiters: list[list[asyncio.Future[None]]] = field(default_factory=list)
    positions: dict[str, int] = field(default_factory=dict)
    timer: asyncio.TimerHandle | None = None

    def add(self, key: str, doc: RawBSONDocument, waiter: asyncio.Future[None]) -> None:
        op: ReplaceOne[Any] = ReplaceOne({"_id": key}, doc, upsert=True)
        position = self.positions.get(key)
        if position is None:
            self.positions[key] = len(self.ops)
            self.keys.append(key)
            self.ops.append(op)
            self.waiters.append([waiter])
        else:
            self.ops[position] = op
            self.waiters[position].append(waiter)

    def settle(self, position: int, error: BaseException | None = None) -> None:
        for waiter in (w for w in self.waiters[position] if not w.done()):
            if error is None:
                waiter.set_result(None)
            else:
                waiter.set_exception(error)


class BatchWriter:
    """Upsert documents into :attr:`collection` in batches, in order, retrying for ever.

    Transient failures are retried after :func:`retry_delay`; only permanent write errors
    reject a document (its waiter raises ``DropItem``).
    """

    def __init__(
        self, *, uri: str, batch_size: int, batch_timeout: float, retry_backoff: float,
        retry_backoff_max: float, stats: StatsCollector | None = None,
    ) -> None:
        self.collection: AsyncCollection[dict[str, Any]] | None = None
        self.uri, self.batch_size, self.batch_timeout = uri, batch_size, batch_timeout
        self.retry_backoff, self.retry_backoff_max = retry_backoff, retry_backoff_max
        self._stats = stats
        self._batch = Batch()
        self._sealed: deque[Batch] = deque()
        self._task: asyncio.Task[None] | None = None
        self._outage_since: float | None = None

    def add(self, key: str, doc: RawBSONDocument) -> asyncio.Future[None]:
        """Queue *doc* under *key*; the future settles once it is written or rejected."""
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._batch.add(key, doc, waiter)
        if len(self._batch.ops) >= self.batch_size:
            self.seal()
        elif self._batch.timer is None:
            self._batch.timer = asyncio.get_running_loop().call_later(
                self.batch_timeout, self._seal_if_current, self._batch)
        return waiter

    def seal(self) -> None:
        """Close the open batch and start writing it (after the batches sealed before it)."""
        batch, self._batch = self._batch, Batch()
        if batch.timer is not None:
            batch.timer.cancel()
        if not batch.ops:
            return
        self._sealed.append(batch)
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._drain())

    async def close(self) -> None:
        """Seal the open batch and wait until every sealed batch is written."""
        self.seal()
        if self._task is not None:
            await self._task

    def reject(self, reason: str) -> DropItem:
        """Count a document MongoDB cannot store; the ``DropItem`` to raise for it."""
        self._inc("mongo/rejected")
        return DropItem(reason)

    def _seal_if_current(self, batch: Batch) -> None:
        if batch is self._batch:
            self.seal()

    async def _drain(self) -> None:
        """Write the sealed batches one after the other, so the newest content wins."""
        while self._sealed:
            batch = self._sealed.popleft()
            try:
                await self._write(batch)
            except BaseException as exc:  # an unknown error, or cancellation at shutdown
                logger.error("MongoDB write of %d items failed: %r", len(batch.ops), exc)
                for position in range(len(batch.ops)):
                    batch.settle(position, exc)
                if not isinstance(exc, Exception):
                    raise

    async def _write(self, batch: Batch) -> None:
        assert self.collection is not None
        todo, attempt = list(range(len(batch.ops))), 0
        while todo:
            try:
                result = await self.collection.bulk_write(
                    [batch.ops[i] for i in todo], ordered=False)
            except BulkWriteError as exc:
                todo = self._partial(batch, todo, exc.details)
            except PyMongoError as exc:
                if not is_transient(exc):
                    raise
                self._failed(exc)
            else:
                stored = (result.upserted_count + result.matched_count
                          if result.acknowledged else len(todo))
                self._stored(batch, todo, stored)
                todo = []
            if todo:
                await asyncio.sleep(retry_delay(attempt, self.retry_backoff,
                                                self.retry_backoff_max))
                attempt += 1
        self._inc("mongo/batches")
        if self._outage_since is not None:
            logger.info("MongoDB writes succeed again after %.1f s (%d retries of this batch)",
                        time.monotonic() - self._outage_since, attempt)
            self._outage_since = None

    def _partial(self, batch: Batch, todo: list[int], details: Mapping[str, Any]) -> list[int]:
        """Reject the permanent failures of a bulk write; return what to write again."""
        failed: set[int] = set()
        retry: list[int] = []
        for error in details.get("writeErrors", []):
            position = todo[error["index"]]
            failed.add(position)
            if is_transient_write_error(error):
                retry.append(position)
            else:
                reason = (f"MongoDB rejected the item {batch.keys[position]}: "
                          f"{error.get('errmsg')} (code {error.get('code')})")
                batch.settle(position, self.reject(reason))
        if details.get("writeConcernErrors"):  # applied, not confirmed: write them again
            self._failed(details["writeConcernErrors"][0].get("errmsg"))
            return [i for i in todo if i not in failed or i in retry]
        done = [i for i in todo if i not in failed]
        self._stored(batch, done, details.get("nUpserted", 0) + details.get("nMatched", 0))
        if retry:
            self._failed(f"{len(retry)} transient write errors")
        return retry

    def _stored(self, batch: Batch, positions: list[int], count: int) -> None:
        for position in positions:
            batch.settle(position)
        self._inc("mongo/stored", count)

    def _failed(self, error: object) -> None:
        self._inc("mongo/retries")
        if self._outage_since is None:
            self._outage_since = time.monotonic()
            logger.warning("MongoDB writes to %s fail (%s); retrying until they succeed: the "
                           "crawl waits, no item is dropped", mask_url(self.uri), error)
        else:
            logger.debug("MongoDB write failed again: %s", error)

    def _inc(self, key: str, count: int = 1) -> None:
        if self._stats is not None:
            self._stats.inc_value(key, count)
