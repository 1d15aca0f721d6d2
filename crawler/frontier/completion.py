"""When does a crawl end? Heartbeats and the crawl-wide drained check.

Every ``CRAWL_HEARTBEAT_INTERVAL`` the worker publishes its state and reads
everyone's (:mod:`crawler.frontier.crawlstate`). Once the whole crawl has been drained
for ``CRAWL_IDLE_TIMEOUT`` seconds the worker marks the crawl finished, so the
others close at their next heartbeat too, and closes itself; the crawl's Redis
state then lives ``CRAWL_STATE_TTL`` seconds (:mod:`crawler.frontier.crawllife`).

A worker that starts on a crawl that has finished says so in one line. If the
whole run then fetches nothing (every seed already seen), it closes with reason
``already_finished`` instead of ``finished``. Every time compared here is Redis's.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import redis.asyncio as aioredis

from crawler.config import defaults
from crawler.connections.retry import RedisRetry
from crawler.connections.tasks import every
from crawler.frontier import crawllife
from crawler.frontier.crawllife import Finished
from crawler.frontier.crawlstate import CrawlState, WorkerState, is_drained

logger = logging.getLogger(__name__)
REDIS_ERROR = "redis_error"  # close reason: Redis refuses the crawl state for good


@dataclass
class LocalState:
    idle: bool
    assigned: list[str]
    lag: int | None
    info: dict[str, Any] = field(default_factory=dict)


class Heartbeats(Protocol):
    """The crawl-wide state a worker's heartbeat loop reads and writes
    (:class:`~crawler.frontier.crawlstate.CrawlState` in Redis)."""

    crawl_id: str
    retry: RedisRetry

    async def beat(self, worker: str, *, idle: bool, assigned: list[str], lag: int | None,
                   info: dict[str, Any]) -> float: ...
    async def workers(self) -> list[WorkerState]: ...
    async def control(self) -> str | None: ...


class Ledger(Protocol):
    """The crawl's finished record and the lifetime of its state."""

    async def read_finished(self) -> Finished | None: ...
    async def mark_finished(self, record: Finished) -> None: ...
    async def mark_started(self, now: float, closed: float) -> float: ...
    async def read_started(self) -> float | None: ...
    async def keep_state(self) -> None: ...
    async def expire_state(self, ttl: float) -> None: ...


class RedisLedger:
    """:class:`Ledger` of crawl *crawl* in Redis (:mod:`crawler.frontier.crawllife`)."""

    def __init__(self, client: aioredis.Redis, crawl: str, mirror: Any = None) -> None:
        """*mirror*: a :class:`~crawler.recovery.mirror.StateMirror` that keeps a copy of
        the finished record in MongoDB, for a Redis that forgets it."""
        self.client, self.crawl, self.mirror = client, crawl, mirror

    async def read_finished(self) -> Finished | None:
        return await crawllife.read_finished(self.client, self.crawl)

    async def mark_finished(self, record: Finished) -> None:
        await crawllife.mark_finished(self.client, self.crawl, record)
        if self.mirror is None:
            return
        try:
            await self.mirror.save_finished(record)
        except Exception as exc:  # the copy is for a Redis that forgets: never in the way
            logger.warning("Could not copy the finished record to MongoDB: %s", exc)

    async def mark_started(self, now: float, closed: float) -> float:
        return await crawllife.mark_run_started(self.client, self.crawl, now, closed)

    async def read_started(self) -> float | None:
        return await crawllife.read_run_started(self.client, self.crawl)

    async def keep_state(self) -> None:
        await crawllife.keep_state(self.client, self.crawl)

    async def expire_state(self, ttl: float) -> None:
        await crawllife.expire_state(self.client, self.crawl, ttl)


class Completion:
    """Runs the heartbeat loop and decides when this worker closes."""

    def __init__(
        self, state: Heartbeats, worker: str, *, partitions: set[str], idle_timeout: float,
        interval: float, local: Callable[[], LocalState], close: Callable[..., None],
        control: Callable[[str | None], None] | None = None,
        state_ttl: float = defaults.CRAWL_STATE_TTL, ledger: Ledger | None = None,
    ) -> None:
        self.state = state
        self.ledger = ledger if ledger is not None else _redis_ledger(state)
        self.worker = worker
        self.partitions = partitions
        self.idle_timeout = idle_timeout
        self.interval = interval
        self.state_ttl = state_ttl
        self._local = local
        self._close = close
        self._control = control
        self.drained_since: float | None = None
        self.status = "starting"
        self.started: float | None = None  # Redis time of this worker's first heartbeat
        self.reused: Finished | None = None  # the crawl had finished before this worker began
        self.retry = RedisRetry("heartbeats")

    async def run(self) -> None:
        """A heartbeat now and every ``interval`` seconds, until Redis refuses for good."""
        await every(self.interval, self._round, wait_first=False)

    async def _round(self) -> bool:
        """One heartbeat; False once Redis refuses the crawl state for good (closed)."""
        try:
            await self.beat()
            self.retry.succeeded()
        except Exception as exc:  # Redis outage: not drained, try again
            self.retry.failed(exc)
            self.drained_since = None
        fatal = self.retry.fatal or self.state.retry.fatal
        if fatal:
            self._close(f"Redis refuses the crawl state: {fatal}", reason=REDIS_ERROR)
            return False
        return True

    async def beat(self) -> None:
        if self._control is not None:
            self._control(await self.state.control())
        local = self._local()
        now = await self.state.beat(self.worker, idle=local.idle, assigned=local.assigned,
                                    lag=local.lag, info=local.info)
        if self.started is None:
            await self._first_beat(now)
        states = await self.state.workers()
        drained, self.status = is_drained(states, self.partitions)
        timeout = self.idle_timeout
        if not drained:
            self.drained_since = None
            # an idle worker follows a close: one with no lag, or one with no partitions at
            # all (CI: its consumer never finished joining and it ran on after the others)
            if timeout and local.idle and (local.lag == 0 or not local.assigned):
                await self._follow(now)
            return
        mono = time.monotonic()
        self.drained_since = self.drained_since or mono
        if timeout and mono - self.drained_since >= timeout:
            await self._finish(now, states)

    async def _first_beat(self, now: float) -> None:
        """Say it once if the crawl had finished, and keep its state from expiring."""
        finished = await self.ledger.read_finished()
        if finished is not None and finished.closed <= now:
            await self.ledger.keep_state()
            self.reused = finished
            logger.warning(crawllife.reuse_line(self.state.crawl_id, finished))
        await self.ledger.mark_started(now, finished.closed if finished is not None else 0.0)
        self.started = now

    async def _follow(self, now: float) -> None:
        """Close if another worker closed the crawl after this one started."""
        finished = await self.ledger.read_finished()
        if finished is not None and self.started is not None and finished.closed > self.started:
            self._close(f"another worker closed the crawl ({finished.reason})",
                        reason=finished.reason)

    async def _finish(self, now: float, states: list[WorkerState]) -> None:
        crawl = self.state.crawl_id
        fetched = sum(int(s.info.get("pages") or 0) for s in states)
        started = await self.ledger.read_started()
        if self.reused is not None and not fetched:
            record = Finished(self.reused.at, now, crawllife.NOTHING_NEW, started)
            why = (f"crawl {crawl} had finished on {self.reused.date()} and this run found "
                   f"nothing new to fetch")
        else:
            record = Finished(now, now, started=started)
            why = f"the crawl has been drained for {self.idle_timeout:.0f}s"
        await self.ledger.mark_finished(record)
        await self.ledger.expire_state(self.state_ttl)
        self._close(why, reason=record.reason)


def _redis_ledger(state: Heartbeats) -> Ledger:
    if not isinstance(state, CrawlState):
        raise TypeError("a Completion of a crawl state outside Redis needs its ledger")
    return RedisLedger(state.client, state.crawl_id)
