"""Batched bulk upserts into MongoDB that retry every failure but a bad document's for ever.

:class:`BatchWriter` collects documents into batches, seals a batch when it is full or old
enough, and writes the sealed batches one after the other; each document's waiter settles
once its upsert is durably written, or rejected because the document itself can never be
stored (:func:`~crawler.storage.errors.rejects_document`). Any other failure, MongoDB's or
not, stalls the batch: it is retried with backoff (:func:`retry_delay`) until it succeeds,
with the stat ``mongo/stalled`` at 1 and a log line at every retry, and its waiters wait.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from bson.raw_bson import RawBSONDocument
from pymongo.errors import BulkWriteError
from scrapy.exceptions import DropItem

from crawler.config.readers import mask_url
from crawler.connections.retry import backoff, retry
from crawler.connections.tasks import Tasks
from crawler.storage.errors import (
    TRANSIENT_CODES,
    describe,
    is_id_race,
    is_transient,
    rejects_document,
)
from crawler.storage.upserts import Upsert, upsert

if TYPE_CHECKING:
    from collections.abc import Mapping

    from pymongo.asynchronous.collection import AsyncCollection
    from scrapy.statscollectors import StatsCollector

__all__ = ["TRANSIENT_CODES", "Batch", "BatchWriter", "is_transient",
           "is_transient_write_error", "rejects_document", "retry_delay"]

# the pipeline's channel, so that log settings and filters for it keep covering its writes
logger = logging.getLogger("crawler.pipelines.mongo")


#: seconds to wait before retry number *attempt* (0-based): doubling, capped
retry_delay = backoff


class _Unwritten(Exception):
    """Part of a batch must be written again: *cause* says why (an error or a line)."""

    def __init__(self, cause: object, *, transient: bool) -> None:
        super().__init__(cause)
        self.cause, self.transient = cause, transient


def is_transient_write_error(error: dict[str, Any]) -> bool:
    """Whether one ``writeErrors`` entry is an outage (an ``_id`` upsert race, a failover)."""
    return is_id_race(error) or error.get("code") in TRANSIENT_CODES


@dataclass
class Batch:
    """Documents waiting for one bulk write; the newest document of a key wins."""

    keys: list[str] = field(default_factory=list)
    ops: list[Upsert] = field(default_factory=list)
    waiters: list[list[asyncio.Future[None]]] = field(default_factory=list)
    positions: dict[str, int] = field(default_factory=dict)
    timer: asyncio.TimerHandle | None = None

    def add(self, key: str, doc: RawBSONDocument, waiter: asyncio.Future[None]) -> None:
        op = upsert(key, doc)
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

    Every failure is retried after :func:`retry_delay`, for ever; only a per-document write
    error that no retry can fix rejects its document (its waiter raises ``DropItem``).
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
        self._tasks = Tasks("MongoDB writer")
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
            self._task = self._tasks.spawn(self._drain(), "batch writes")

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
            except BaseException as exc:  # cancelled at shutdown: every error else is retried
                logger.info("MongoDB write of %d items cancelled at close: their requests stay "
                            "unacknowledged", len(batch.ops))
                for position in range(len(batch.ops)):
                    batch.settle(position, exc)
                raise

    async def _write(self, batch: Batch) -> None:
        """Write *batch* until every document is stored or rejected."""
        todo, attempts = list(range(len(batch.ops))), 0

        async def attempt() -> None:
            todo[:] = await self._attempt(batch, todo, attempts)

        def failed(exc: Exception, number: int, _delay: float) -> None:
            nonlocal attempts
            attempts = number + 1
            if isinstance(exc, _Unwritten):
                self._failed(exc.cause, number, transient=exc.transient)
            else:  # the whole batch failed: it stalls, whatever the error
                self._failed(exc, number, transient=is_transient(exc))

        # any exception, MongoDB's or not (a driver bug, an encoder, a closed client): the
        # batch stalls and is retried; only a document refused for its content is rejected
        await retry(attempt, errors=(Exception,), on_retry=failed,
                    base=self.retry_backoff, cap=self.retry_backoff_max)
        self._inc("mongo/batches")
        self._recovered(attempts)

    async def _attempt(self, batch: Batch, todo: list[int], attempt: int) -> list[int]:
        """Write the documents *todo* once; what is left, or :class:`_Unwritten` to retry."""
        assert self.collection is not None
        try:
            result = await self.collection.bulk_write([batch.ops[i] for i in todo],
                                                      ordered=False)
        except BulkWriteError as exc:
            return self._partial(batch, todo, exc.details, attempt)
        stored = result.upserted_count + result.matched_count if result.acknowledged else len(todo)
        self._stored(batch, todo, stored)
        return []

    def _partial(self, batch: Batch, todo: list[int], details: Mapping[str, Any],
                 attempt: int) -> list[int]:
        """Reject the documents that can never be stored; :class:`_Unwritten` with what to
        write again (or ``[]``: nothing left)."""
        failed: set[int] = set()
        retried: list[tuple[int, dict[str, Any]]] = []
        for error in details.get("writeErrors", []):
            position = todo[error["index"]]
            failed.add(position)
            if rejects_document(error):
                reason = (f"MongoDB rejected the item {batch.keys[position]}: "
                          f"{error.get('errmsg')} (code {error.get('code')})")
                batch.settle(position, self.reject(reason))
            else:
                retried.append((position, error))
        again = [position for position, _ in retried]
        if details.get("writeConcernErrors"):  # applied, not confirmed: write them again
            concern = details["writeConcernErrors"][-1]
            transient = concern.get("code") in TRANSIENT_CODES
            todo[:] = [i for i in todo if i not in failed or i in again]
            if not todo:  # nothing left to confirm: said once, not retried
                self._failed(concern, attempt, transient=transient)
                return []
            raise _Unwritten(concern, transient=transient) from None
        done = [i for i in todo if i not in failed]
        self._stored(batch, done, details.get("nUpserted", 0) + details.get("nMatched", 0))
        if not retried:
            return []
        errors = [error for _, error in retried]
        todo[:] = again
        raise _Unwritten(f"{len(retried)} write errors, the first: {describe(errors[0])}",
                         transient=all(is_transient_write_error(e) for e in errors)) from None

    def _stored(self, batch: Batch, positions: list[int], count: int) -> None:
        for position in positions:
            batch.settle(position)
        self._inc("mongo/stored", count)

    def _delay(self, attempt: int) -> float:
        return retry_delay(attempt, self.retry_backoff, self.retry_backoff_max)

    def _failed(self, error: object, attempt: int, *, transient: bool) -> None:
        """Count a failed write and say so, once per retry: the lines thin out with the backoff."""
        self._inc("mongo/retries")
        cause = error if isinstance(error, str) else describe(error)
        if self._outage_since is None:
            self._outage_since = time.monotonic()
            self._inc("mongo/stalls")
            self._set("mongo/stalled", 1)
        if transient:
            logger.warning("MongoDB writes to %s fail (%s); retrying until they succeed, "
                           "next in %.1f s: the crawl waits, no item is dropped",
                           mask_url(self.uri), cause, self._delay(attempt))
            return
        logger.error("MongoDB writes to %s are stalled for %.0f s by an error that needs "
                     "attention (%s); retrying until they succeed, next in %.1f s: the crawl "
                     "waits, no item is dropped", mask_url(self.uri),
                     time.monotonic() - self._outage_since, cause, self._delay(attempt))

    def _recovered(self, attempt: int) -> None:
        if self._outage_since is None:
            return
        logger.info("MongoDB writes succeed again after %.1f s (%d retries of this batch)",
                    time.monotonic() - self._outage_since, attempt)
        self._outage_since = None
        self._set("mongo/stalled", 0)

    def _inc(self, key: str, count: int = 1) -> None:
        if self._stats is not None:
            self._stats.inc_value(key, count)

    def _set(self, key: str, value: int) -> None:
        if self._stats is not None:
            self._stats.set_value(key, value)
