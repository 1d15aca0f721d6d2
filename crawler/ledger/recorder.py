"""A worker's side of the crawl ledger: outcomes batched into Redis before their acks.

Each record's outcome (and the items its page gave) joins the current batch, and the
batch is an :class:`~crawler.frontier.leases.AckBarrier` operation: the record's lease is
acknowledged, and so its offset committed, only after the batch is in Redis. One Lua call
per batch (``lua/record.lua``) adds the batch's counters and counts each record once per
``(topic, partition, offset)``: a record delivered again after a ``kill -9`` or a rebalance
adds its fields under ``again/`` instead, so the ledger reconciles under at-least-once
delivery. What a record's partition has committed is forgotten at the next batch: Kafka
never delivers it again.

A failed write is retried with a backoff for ever; the acks wait, so an outage of Redis
stalls the crawl and loses no count. Plain counters (``count``) ride along in the batch
but wait for nothing: they say how much work there was, not where a record went.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib.resources import files

import redis.asyncio as aioredis

from crawler.config.keys import CrawlKeys
from crawler.connections.retry import RedisRetry, retry
from crawler.connections.tasks import wait_event
from crawler.frontier.leases import AckBarrier, Partition
from crawler.ledger.sources import ledger_counters

logger = logging.getLogger(__name__)
SCRIPT = files("crawler.ledger").joinpath("lua", "record.lua").read_text(encoding="utf-8")


@dataclass
class _Batch:
    counters: Counter[str] = field(default_factory=Counter)
    records: list[tuple[Partition, int, dict[str, int]]] = field(default_factory=list)
    op: int | None = None  # the barrier operation the batch's records wait for


class LedgerRecorder:
    """Batches the outcomes of this worker's records into the crawl's ledger hash."""

    def __init__(self, client: aioredis.Redis, crawl_id: str, barrier: AckBarrier, *,
                 committed: Callable[[Partition], int | None], interval: float = 0.1,
                 on_read: Callable[[dict[str, int]], None] | None = None,
                 read_interval: float = 1.0) -> None:
        """*on_read* gets the crawl-wide counters every *read_interval* seconds (the
        worker's stats ``ledger/...``: its metrics and its final stats show them)."""
        self.keys = CrawlKeys(crawl_id)
        self.client = client
        self.barrier, self.committed, self.interval = barrier, committed, interval
        self.on_read, self.read_interval = on_read, read_interval
        self._last_read = 0.0
        self._script = client.register_script(SCRIPT)
        self._batch = _Batch()
        self._trimmed: dict[Partition, int] = {}
        self.retry = RedisRetry("ledger")
        self.written = 0  # records whose outcome this worker wrote
        self._closing = asyncio.Event()
        self._task: asyncio.Future[None] | None = None

    def count(self, name: str, n: int = 1) -> None:
        """Add *n* to counter *name* with the next batch."""
        self._batch.counters[name] += n

    def record(self, tp: Partition, offset: int, fields: dict[str, int]) -> None:
        """Count *fields* for the record at *tp*/*offset*, once; its ack waits for it."""
        batch = self._batch
        if batch.op is None:
            batch.op = self.barrier.begin()
        batch.records.append((tp, offset, fields))

    def start(self) -> None:
        """Write a batch every ``interval`` seconds until :meth:`close`."""
        self._task = asyncio.ensure_future(self._run())

    async def _run(self) -> None:
        while not self._closing.is_set():
            await wait_event(self._closing, self.interval)
            await self.flush()
            if time.monotonic() - self._last_read >= self.read_interval:
                await self.read()

    async def read(self) -> dict[str, int]:
        """The crawl-wide counters (to *on_read* too); empty if Redis does not answer."""
        self._last_read = time.monotonic()
        try:
            counters = await ledger_counters(self.client, self.keys.crawl_id)
        except Exception as exc:  # an outage: the flushes say it; try at the next interval
            logger.debug("Ledger: cannot read the counters: %s", exc)
            return {}
        if self.on_read is not None:
            self.on_read(counters)
        return counters

    async def close(self, timeout: float) -> None:
        """Write what is left (within *timeout* seconds: what is not written then was
        not acknowledged either, and is counted when its record comes again)."""
        self._closing.set()
        if self._task is None:
            await asyncio.wait_for(self.flush(), timeout)
            return
        try:
            await asyncio.wait_for(asyncio.shield(self._task), timeout)
            await asyncio.wait_for(self.read(), timeout)
        except TimeoutError:
            self._task.cancel()
            logger.warning("Ledger: %d outcomes not written at close (Redis: %s)",
                           len(self._batch.records), self.retry.fatal or "unavailable")

    async def flush(self) -> None:
        batch, self._batch = self._batch, _Batch()
        if not batch.counters and not batch.records:
            return
        keys, args = self._encode(batch)
        await retry(lambda: self._script(keys=keys, args=args), on_retry=self.retry.on_retry)
        self.retry.succeeded()
        self.written += len(batch.records)
        if batch.op is not None:
            self.barrier.end(batch.op)

    def _encode(self, batch: _Batch) -> tuple[list[str], list[str]]:
        keys = [self.keys.ledger]
        index: dict[Partition, int] = {}  # partition -> its key's Lua index (KEYS[2]...)
        records: list[list[object]] = []
        for tp, offset, fields in batch.records:
            if tp not in index:
                keys.append(self.keys.ledger_seen(*tp))
                index[tp] = len(keys)
            records.append([index[tp], str(offset), fields])
        trims = []
        for tp, k in index.items():
            below = self.committed(tp)
            if below is not None and below > self._trimmed.get(tp, -1):
                self._trimmed[tp] = below
                trims.append([k, str(below)])
        body = {"c": dict(batch.counters), "r": records, "t": trims}
        return keys, [json.dumps(body, separators=(",", ":"))]

