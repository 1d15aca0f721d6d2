"""The scheduler's side of the cluster-wide per-host limits (:mod:`crawler.politeness.hostgate`):
which buffered request may go to the engine now, and which waits, blocked per host in the
buffer or pushed back until the host's delay has passed."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from scrapy import Request, signals
from scrapy.crawler import Crawler

from crawler.connections.tasks import Tasks
from crawler.frontier.buffer import RequestBuffer
from crawler.frontier.leases import Lease
from crawler.politeness.hostgate import BLOCKED, HostGate
from crawler.politeness.hostlimit import HostLimitConfig, SlotStore
from crawler.politeness.unit import politeness_unit, request_unit


class HostWaits:
    """Holds a worker's requests to the shares its :class:`HostGate` has of each host."""

    def __init__(self, cfg: HostLimitConfig, store: SlotStore, worker: str, *, crawler: Crawler,
                 buffer: RequestBuffer[Lease], push: Callable[[Request, Lease, float], None],
                 wake: Callable[[], None], tasks: Tasks) -> None:
        self.buffer, self._push, self._wake, self.stats = buffer, push, wake, crawler.stats
        self.key = request_unit(politeness_unit(crawler.settings))
        self.gate = HostGate(cfg, store, worker, on_free=self._free, stats=crawler.stats,
                             demand=lambda: buffer.waiting_hosts(self.key, cfg.ttl),
                             key=self.key)
        crawler.signals.connect(self.gate.release, signals.request_left_downloader)
        tasks.spawn(self.gate.run(), "per-host limits")

    def admitted(self, request: Request, lease: Lease) -> bool:
        """Whether *request*'s host has a free share for it (else it waits in the buffer)."""
        wait = self.gate.admit(request)
        if wait is None:
            return True
        if wait == BLOCKED:
            self.buffer.block(self.key(request), request, lease)
            self._inc("hostlimit/blocked")
        else:
            self._push(request, lease, time.time() + wait)
        return False

    def left(self, request: Request) -> None:
        """The engine let go of *request* (it may never have reached the downloader)."""
        self.gate.release(request)

    def _free(self, host: str, count: int) -> None:
        if self.buffer.unblock(host, count):
            self._wake()

    def _inc(self, key: str) -> None:
        stats: Any = self.stats
        if stats is not None:
            stats.inc_value(key)
