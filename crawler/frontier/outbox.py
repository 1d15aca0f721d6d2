"""Follow-up requests on their way into the frontier: dedup, produce, mark seen.

The order is what keeps the guarantee (delivery trap 1): a fingerprint is
*checked* (read-only) in batches, the new requests are produced with
``acks=all``, and only once the broker has them are their fingerprints *added*
to the Bloom filter. A URL is therefore never both filtered and absent from the
log. A request with a ``recrawl_after`` meta is checked against, and recorded in, the
store of :mod:`crawler.dedup.due` instead, in the same order (docs/recrawl.md). Each
request is an :class:`~crawler.frontier.leases.AckBarrier` operation, so the request that
produced it is acknowledged only after the send succeeded.

Dupefilter calls follow :mod:`crawler.connections.redis_errors`: a transient error (an outage, a
failover, a missing filter: :class:`~crawler.dedup.dupefilter.BloomMissing`) is retried with
a backoff for ever, and the outbox stalls. A deterministic one (``OOM``, ``NOPERM``, a
script error) is logged once (:class:`~crawler.connections.retry.RedisRetry`), the outbox
stops calling Redis and calls ``stop``: the requests it held are neither produced nor
marked seen, and their parents' leases are never acknowledged, so they stay in Kafka.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from scrapy import Request
from scrapy.statscollectors import StatsCollector

from crawler.connections.retry import RedisRetry, RetryStopped, retry
from crawler.connections.tasks import Tasks
from crawler.dedup.due import DueStore, MemoryDue, interval_of
from crawler.frontier import unsendable
from crawler.frontier.codec import CodecError
from crawler.frontier.leases import AckBarrier

logger = logging.getLogger(__name__)
T = TypeVar("T")


class Bloom(Protocol):
    async def check(self, fingerprints: Sequence[bytes]) -> list[bool]: ...
    async def add(self, fingerprints: Sequence[bytes]) -> list[bool]: ...


class LocalFilter(Protocol):
    def __contains__(self, fingerprint: bytes) -> bool: ...
    def add(self, fingerprint: bytes) -> Any: ...


class Send(Protocol):
    def __call__(
        self, topic: str, key: bytes | None, value: bytes, done: Callable[[int, int], None],
        *, rejected: Callable[[BaseException], None] | None = None,
    ) -> None: ...


class Queued(Protocol):
    def __call__(self, request: Request, topic: str, partition: int, offset: int,
                 op: int) -> None: ...


@dataclass(slots=True)
class _Pending:
    request: Request
    fingerprint: bytes
    filtered: bool
    op: int
    after: float | None  # its recrawl_after meta: checked by the due store
    value: bytes  # encoded when the spider yielded it


class Outbox:
    """Batches follow-up requests through the dupefilter into the frontier topic."""

    def __init__(
        self, *, bloom: Bloom, local: LocalFilter, send: Send, barrier: AckBarrier,
        topic: str, dead_topic: str, key_for: Callable[[Request], bytes],
        encode: Callable[[Request], bytes], stats: StatsCollector, backoff: float = 0.5,
        backoff_max: float = 30.0, stop: Callable[[str], None] | None = None,
        topic_for: Callable[[Request], str] | None = None, due: DueStore | None = None,
        spider_name: str = "",
    ) -> None:
        """*topic_for* picks a request's topic (its priority band); without it, *topic*.
        *due* knows when the requests with a ``recrawl_after`` meta were last queued."""
        self.bloom, self.local, self._send, self.barrier = bloom, local, send, barrier
        self.topic, self.dead_topic = topic, dead_topic
        self.topic_for = topic_for or (lambda _request: topic)
        self.key_for, self.encode, self.stats = key_for, encode, stats
        self.due: DueStore = due if due is not None else MemoryDue()
        self.spider_name = spider_name  # named in the line of a request that cannot be sent
        self.retry = RedisRetry("dupefilter", base=backoff, cap=backoff_max)
        self.stop = stop  # called once with the error line when Redis refuses for good
        self.fatal: str | None = None  # the error line, once Redis refused for good
        self.abandoned = 0  # barrier operations given up after a deterministic error
        self._batch: list[_Pending] = []
        self._to_add: list[bytes] = []
        self._to_record: list[bytes] = []
        self._in_progress: set[bytes] = set()
        self._tasks = Tasks("dupefilter")
        self._local_hits = 0  # added to the stats by flush_stats(): the hot path stays cheap
        #: told of each request the broker took, with its barrier operation to end (the
        #: status index: :meth:`crawler.statusindex.hooks.IndexHooks.queued`); None: ended here
        self.queued: Queued | None = None

    def submit(self, request: Request, fingerprint: bytes, *, filtered: bool = True) -> bool:
        """Queue *request*; False if this worker already knows it is a duplicate."""
        after = interval_of(request, self.stats) if filtered else None
        if filtered and (fingerprint in self._in_progress
                         or (after is None and fingerprint in self.local)):
            self._local_hits += 1
            return False
        value = self.encoded(request)
        if value is None:
            return False
        self._in_progress.add(fingerprint)
        self._batch.append(_Pending(request, fingerprint, filtered, self.barrier.begin(), after,
                                    value))
        if len(self._batch) == 1:
            asyncio.get_running_loop().call_soon(self._spawn_flush)
        return True

    def dead_letter(self, reason: str, value: bytes, source: dict[str, Any],
                    logged: bool = False) -> None:
        """Send *value* with *reason* to the dead-letter topic, as a barrier operation
        (*logged*: the caller has said why in its own line)."""
        op = self.barrier.begin()
        body = {"reason": reason, "source": source, "value": value.decode("utf-8", "replace")}
        if not logged:
            logger.error("Dead-lettered a record from %s: %s", source, reason)
        self.stats.inc_value("frontier/dead_lettered")
        payload = json.dumps(body).encode()

        def lost(exc: BaseException) -> None:  # the dead-letter topic refuses it too
            logger.error("The dead-letter topic refused a record from %s: %s", source, exc)
            self.stats.inc_value("frontier/dead_letter_refused")
            self.barrier.end(op)

        self._send(self.dead_topic, None, payload, lambda _p, _o: self.barrier.end(op),
                   rejected=lost)

    def refused(self, request: Request, size: int, exc: BaseException) -> None:
        """The broker can never take *request* (:func:`~crawler.frontier.producer.permanent`):
        its URL
        and the reason go to the dead-letter topic instead (a barrier operation too)."""
        self._unsendable(request, "frontier/refused",
                         f"{size:,} bytes encoded: {type(exc).__name__}",
                         f"the broker refused the request ({size} bytes encoded): {exc}")

    def flush_stats(self) -> None:
        """Add the duplicates this worker filtered itself to ``bloom/filtered`` and
        ``bloom/local_hits`` (called at every heartbeat and at close)."""
        if self._local_hits:
            self.stats.inc_value("bloom/filtered", self._local_hits)
            self.stats.inc_value("bloom/local_hits", self._local_hits)
            self._local_hits = 0

    @property
    def busy(self) -> bool:
        return bool(self._batch or self._in_progress or self._tasks)

    async def close(self, grace: float = 0.0) -> None:
        """Let the dupefilter calls still running end for at most *grace* seconds, then
        cancel them (the scheduler closes): what a cancelled one held was not produced (its
        parent's lease stays unacknowledged) or was produced and not yet marked seen."""
        running = list(self._tasks)
        if running and grace > 0:
            await asyncio.wait(running, timeout=grace)
        await self._tasks.close()

    def _spawn_flush(self) -> None:
        batch, self._batch = self._batch, []
        if batch:
            self._tasks.spawn(self._flush(batch), "check")

    async def _flush(self, batch: list[_Pending]) -> None:
        try:
            dupes = await self._dupes(batch)
        except RetryStopped:
            self.abandoned += len(batch)  # never ended: their parents' leases stay open
            return
        for pending in batch:
            if id(pending) not in dupes:
                self._produce(pending)
                continue
            if pending.after is None:
                self.stats.inc_value("bloom/filtered")
                self.local.add(pending.fingerprint)
            else:
                self.stats.inc_value("recrawl/not_due")
            self._in_progress.discard(pending.fingerprint)
            self.barrier.end(pending.op)

    async def _dupes(self, batch: list[_Pending]) -> set[int]:
        """The ids of *batch*'s duplicates: by the Bloom filter, or by the due store for the
        requests with a ``recrawl_after`` meta (both read-only)."""
        checked = [p for p in batch if p.filtered and p.after is None]
        timed = [p for p in batch if p.after is not None]
        intervals = [p.after for p in timed if p.after is not None]
        fps = [p.fingerprint for p in checked]
        seen = await self._retry(self.bloom.check, fps) if fps else []
        fps = [p.fingerprint for p in timed]
        fresh = (await self._retry(lambda f: self.due.check(f, intervals), fps)
                 if fps else [])
        return {id(p) for p, s in zip(checked + timed, seen + fresh, strict=True) if s}

    def encoded(self, request: Request) -> bytes | None:
        """*request* encoded; None for one that can never travel, which is reported (naming
        the spider and callback) and dead-lettered here: a follow-up request as the spider
        yields it, a start request, a re-queued one."""
        try:
            value = self.encode(request)
        except CodecError as exc:
            self._unsendable(request, "frontier/unencodable", str(exc),
                             f"cannot encode request: {exc}",
                             unsendable.unencodable(request, exc, self.spider_name))
            return None
        problem = unsendable.too_large(value)
        if problem is not None:
            self._unsendable(request, "frontier/refused", problem, f"request too large: {problem}")
            return None
        return value

    def _unsendable(self, request: Request, stat: str, problem: str, reason: str,
                    line: str | None = None) -> None:
        """Count *stat*, log where *request* came from and why it can never be sent (*line*,
        or one built from *problem*), and dead-letter its URL with *reason*."""
        self.stats.inc_value(stat)
        logger.error("%s", line or unsendable.describe(request, problem, self.spider_name))
        self.dead_letter(reason, request.url.encode(), {"url": request.url}, logged=True)

    def _produce(self, pending: _Pending) -> None:
        value, topic = pending.value, self.topic_for(pending.request)
        self._send(topic, self.key_for(pending.request), value,
                   lambda partition, offset: self._sent(pending, topic, partition, offset),
                   rejected=lambda exc: self._refused(pending, len(value), exc))

    def _refused(self, pending: _Pending, size: int, exc: BaseException) -> None:
        self._in_progress.discard(pending.fingerprint)
        self.refused(pending.request, size, exc)
        self.barrier.end(pending.op)

    def _sent(self, pending: _Pending, topic: str, partition: int, offset: int) -> None:
        self.stats.inc_value("frontier/produced")
        if self.queued is None:
            self.barrier.end(pending.op)
        else:
            self.queued(pending.request, topic, partition, offset, pending.op)
        if pending.after is not None:
            self._to_record.append(pending.fingerprint)
            if len(self._to_record) == 1:
                asyncio.get_running_loop().call_soon(self._spawn_record)
        elif pending.filtered:
            self._to_add.append(pending.fingerprint)
            if len(self._to_add) == 1:
                asyncio.get_running_loop().call_soon(self._spawn_add)
        else:
            self._in_progress.discard(pending.fingerprint)

    def _spawn_add(self) -> None:
        fps, self._to_add = self._to_add, []
        if fps:
            self._tasks.spawn(self._add(fps), "add")

    def _spawn_record(self) -> None:
        fps, self._to_record = self._to_record, []
        if fps:
            self._tasks.spawn(self._record(fps), "record")

    async def _record(self, fps: list[bytes]) -> None:
        """Record when *fps* were queued (produced: acknowledged), then add them to the
        Bloom filter as any request (which a recrawled one already is in)."""
        try:
            await self._retry(self.due.record, fps)
        except RetryStopped:  # produced, not recorded: it may be queued again, stored once
            return
        await self._add(fps, races=False)

    async def _add(self, fps: list[bytes], *, races: bool = True) -> None:
        try:
            new = await self._retry(self.bloom.add, fps)
        except RetryStopped:  # produced, not marked seen: a copy may be crawled twice, stored once
            return
        raced = sum(1 for n in new if not n)
        if raced and races:  # another worker produced it meanwhile: crawled twice, stored once
            self.stats.inc_value("bloom/race_duplicates", raced)
        for fp in fps:
            self.local.add(fp)
            self._in_progress.discard(fp)

    @property
    def stopped(self) -> bool:
        """Whether Redis refused a dupefilter call for good (nothing is retried)."""
        return self.fatal is not None

    async def _retry(self, call: Callable[[list[bytes]], Awaitable[T]], fps: list[bytes]) -> T:
        """*call* until it succeeds; transient errors stall, a deterministic one stops
        (:class:`~crawler.connections.retry.RetryStopped`)."""
        try:
            result = await retry(lambda: call(fps), on_retry=self._failed,
                                 stop=lambda: self.stopped)
        except RetryStopped:
            self._stopped()
            raise
        self.retry.succeeded()
        return result

    def _failed(self, exc: Exception, _attempt: int, _delay: float) -> float:
        """A failed call: transient, it stalls (never drops); deterministic, it stops."""
        delay = self.retry.failed(exc)
        if self.retry.fatal is not None:
            self.fatal = self.fatal or self.retry.fatal
        else:
            self.stats.inc_value("bloom/retries")
        return delay

    def _stopped(self) -> None:
        if self.stop is not None and self.fatal is not None:
            stop, self.stop = self.stop, None  # once
            stop(self.fatal)
