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

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from crawler.config import defaults
from crawler.connections.retry import RedisRetry
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


class Completion:
    """Runs the heartbeat loop and decides when this worker closes."""

    def __init__(
        self, state: CrawlState, worker: str, *, partitions: set[str], idle_timeout: float,
        interval: float, local: Callable[[], LocalState], close: Callable[..., None],
        control: Callable[[str | None], None] | None = None,
        state_ttl: float = defaults.CRAWL_STATE_TTL,
    ) -> None:
        self.state = state
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
        while True:
            try:
                await self.beat()
                self.retry.succeeded()
            except Exception as exc:  # Redis outage: not drained, try again
                self.retry.failed(exc)
                self.drained_since = None
            fatal = self.retry.fatal or self.state.retry.fatal
            if fatal:
                self._close(f"Redis refuses the crawl state: {fatal}", reason=REDIS_ERROR)
                return
            await asyncio.sleep(self.interval)

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
            if timeout and local.idle and local.lag == 0 and local.assigned:
                await self._follow(now)
            return
        mono = time.monotonic()
        self.drained_since = self.drained_since or mono
        if timeout and mono - self.drained_since >= timeout:
            await self._finish(now, states)

    async def _first_beat(self, now: float) -> None:
        """Say it once if the crawl had finished, and keep its state from expiring."""
        finished = await crawllife.read_finished(self.state.client, self.state.crawl_id)
        if finished is not None and finished.closed <= now:
            await crawllife.keep_state(self.state.client, self.state.crawl_id)
            self.reused = finished
            logger.warning(crawllife.reuse_line(self.state.crawl_id, finished))
        self.started = now

    async def _follow(self, now: float) -> None:
        """Close if another worker closed the crawl after this one started."""
        finished = await crawllife.read_finished(self.state.client, self.state.crawl_id)
        if finished is not None and self.started is not None and finished.closed > self.started:
            self._close(f"another worker closed the crawl ({finished.reason})",
                        reason=finished.reason)

    async def _finish(self, now: float, states: list[WorkerState]) -> None:
        crawl = self.state.crawl_id
        fetched = sum(int(s.info.get("pages") or 0) for s in states)
        if self.reused is not None and not fetched:
            record = Finished(self.reused.at, now, crawllife.NOTHING_NEW)
            why = (f"crawl {crawl} had finished on {self.reused.date()} and this run found "
                   f"nothing new to fetch")
        else:
            record = Finished(now, now)
            why = f"the crawl has been drained for {self.idle_timeout:.0f}s"
        await crawllife.mark_finished(self.state.client, crawl, record)
        await crawllife.expire_state(self.state.client, crawl, self.state_ttl)
        self._close(why, reason=record.reason)
