"""When does a crawl end? Heartbeats and the crawl-wide drained check.

Every ``CRAWL_HEARTBEAT_INTERVAL`` the worker publishes its state and reads
everyone's (:mod:`crawler.crawlstate`). Once the whole crawl has been drained
for ``CRAWL_IDLE_TIMEOUT`` seconds the worker marks the crawl finished, so the
others close at their next heartbeat too, and closes itself.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from crawler.crawlstate import CrawlState, is_drained

logger = logging.getLogger(__name__)


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
        interval: float, local: Callable[[], LocalState], close: Callable[[str], None],
        control: Callable[[str | None], None] | None = None,
    ) -> None:
        self.state = state
        self.worker = worker
        self.partitions = partitions
        self.idle_timeout = idle_timeout
        self.interval = interval
        self._local = local
        self._close = close
        self._control = control
        self.drained_since: float | None = None
        self.status = "starting"
        self.started = time.time()

    async def run(self) -> None:
        while True:
            try:
                await self.beat()
            except Exception as exc:  # Redis outage: not drained, try again
                logger.warning("Heartbeat failed: %s", exc)
                self.drained_since = None
            await asyncio.sleep(self.interval)

    async def beat(self) -> None:
        if self._control is not None:
            self._control(await self.state.control())
        local = self._local()
        await self.state.beat(self.worker, idle=local.idle, assigned=local.assigned,
                              lag=local.lag, info=local.info)
        drained, self.status = is_drained(await self.state.workers(), self.partitions)
        timeout = self.idle_timeout
        if not drained:
            self.drained_since = None
            if timeout and local.idle and local.lag == 0 and local.assigned:
                finished = await self.state.finished_at()
                if finished is not None and finished > self.started:
                    self._close("another worker saw the crawl drained")
            return
        now = time.monotonic()
        self.drained_since = self.drained_since or now
        if timeout and now - self.drained_since >= timeout:
            await self.state.mark_finished(ttl=timeout)
            self._close(f"the crawl has been drained for {timeout:.0f}s")
