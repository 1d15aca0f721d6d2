"""Records written off the event loop, handed back once they are on disk.

:class:`DurableWriter` runs a :class:`~crawler.archive.warcfile.WarcFile` in one thread of
its own: writes and fsyncs happen in order, never on the event loop. :meth:`DurableWriter.
write` returns once an fsync that began after the records were written has ended. The
fsyncs are grouped: one runs at most every ``interval`` seconds, and every writer that
waited for it is released by it (``fsyncs`` and ``synced`` count them).

A write or fsync that fails (a full disk, an I/O error) is tried again with a doubling
backoff until it works, the page waiting meanwhile (:meth:`DurableWriter.write_until_durable`):
nothing is acknowledged before its records are on disk.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import TypeVar

from warcio.recordloader import ArcWarcRecord

from crawler.archive.warcfile import WarcFile, Written
from crawler.connections.retry import retry
from crawler.connections.tasks import Tasks

logger = logging.getLogger(__name__)
T = TypeVar("T")
REMIND_EVERY = 60.0  # seconds between two lines of one stall
Waiter = tuple[asyncio.Future[None], int]


class DurableWriter:
    """Writes records in its own thread and groups their fsyncs."""

    def __init__(self, file: WarcFile, *, interval: float) -> None:
        self.file, self.interval = file, interval
        self.fsyncs = 0  # fsyncs that released someone
        self.synced = 0  # records they released
        self.closing = False
        self._executor: ThreadPoolExecutor | None = None
        self._waiting: list[Waiter] = []
        self._flusher: asyncio.Task[None] | None = None
        self._last = -math.inf  # loop time the last fsync began
        self._tasks = Tasks("WARC writer")
        self._stalled: float | None = None
        self._reminded = 0.0

    async def run(self, call: Callable[[], T]) -> T:
        """``call()`` in the writer's thread (started on the first call)."""
        if self._executor is None:
            self._executor = ThreadPoolExecutor(1, thread_name_prefix="warc-writer")
        return await asyncio.get_running_loop().run_in_executor(self._executor, call)

    async def write(self, records: Sequence[ArcWarcRecord]) -> Written:
        """Write *records*; return once they are on disk. A failure is raised."""
        written = await self.run(partial(self.file.write, records))
        await self._durable(len(records))
        return written

    async def write_until_durable(self, records: Sequence[ArcWarcRecord]) -> Written:
        """:meth:`write`, tried again after each :class:`OSError` until it works (or the
        writer closes: then the error is raised)."""
        written = await retry(partial(self.write, records), errors=(OSError,),
                              on_retry=self._failed, base=1.0, cap=30.0,
                              stop=lambda: self.closing)
        if self._stalled is not None:
            logger.info("WARC writes work again after %.0fs",
                        time.monotonic() - self._stalled)
            self._stalled = None
        return written

    async def close(self) -> None:
        """Release the writers waiting, then close the open file; the thread ends."""
        self.closing = True
        if self._flusher is not None:
            await asyncio.wait({self._flusher})
        await self._tasks.close()
        if self._executor is not None:
            try:
                await self.run(self.file.close)
            finally:
                self._executor.shutdown(wait=True)
                self._executor = None

    async def _durable(self, records: int) -> None:
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting.append((future, records))
        if self._flusher is None:
            self._flusher = self._tasks.spawn(self._flush(), "fsync")
        await future

    async def _flush(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            while self._waiting:
                delay = self._last + self.interval - loop.time()
                if delay > 0:
                    await asyncio.sleep(delay)
                batch, self._waiting = self._waiting, []
                self._last = loop.time()
                try:
                    await self.run(self.file.sync)
                except Exception as exc:
                    self._release(batch, exc)
                else:
                    self._release(batch, None)
        finally:
            self._flusher = None

    def _release(self, batch: list[Waiter], error: BaseException | None) -> None:
        if error is None:
            self.fsyncs += 1
            self.synced += sum(records for _future, records in batch)
        for future, _records in batch:
            if future.done():
                continue
            if error is None:
                future.set_result(None)
            else:
                future.set_exception(error)

    def _failed(self, exc: Exception, _attempt: int, delay: float) -> None:
        now = time.monotonic()
        if self._stalled is None:
            self._stalled = self._reminded = now
            logger.error("WARC write failed, the pages wait and it is tried again in %.0fs: "
                         "%s", delay, exc)
        elif now - self._reminded >= REMIND_EVERY:
            self._reminded = now
            logger.error("WARC writes stalled for %.0fs: %s", now - self._stalled, exc)
