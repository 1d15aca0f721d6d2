"""This worker's side of the cluster-wide per-host limits (:mod:`~crawler.politeness.hostlimit`).

The scheduler asks :meth:`HostGate.admit` before it hands a request to the engine: a host's
request goes out only while the worker has fewer in flight to that host than its share, and,
with a delay, no sooner than ``delay * limit / share`` seconds after the worker's previous one
(so the cluster as a whole keeps one request per ``delay``). :meth:`HostGate.release` ends a
request's hold when it leaves the downloader (or the engine, if it never reached the
downloader). The shares come from :meth:`HostGate.renew`, run every ``HOSTLIMIT_INTERVAL``,
and sooner when a request waits for a host this worker holds no share of, when its holds come
down to a share that shrank, and while others hold all of a host it wants (so a worker that
joins a crawl gets its share within a fraction of the interval); nothing on the path of one
request touches Redis. A share is used only until ``HOSTLIMIT_TTL`` after the renewal
that gave it was sent: a worker cut off from Redis stops starting requests (the crawl stalls,
nothing is lost) before its entry can expire for the others.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any

from scrapy import Request

from crawler.connections.tasks import wait_event
from crawler.politeness.hostlimit import Demand, HostLimitConfig, SlotStore
from crawler.politeness.unit import by_host, request_unit

logger = logging.getLogger(__name__)
BLOCKED = math.inf  # admit(): no share free for the host until a request of it ends
EARLY = 0.01  # seconds: the soonest a renewal asked for runs after the previous one
RETRY = 0.05  # seconds between renewals while a wanted host is all held by others (for
# one HOSTLIMIT_INTERVAL: the holders renew in it and give up what they hold above their share)


#: a request's host: its ``download_slot`` meta, else its URL's host (Scrapy's slot), so the
#: gate and the downloader agree; ``POLITENESS_UNIT`` may count another unit (HostGate's *key*)
host_key = request_unit(by_host)


class HostGate:
    """Shares of each host's cluster-wide limits held by this worker, and its holds."""

    def __init__(self, cfg: HostLimitConfig, store: SlotStore, worker: str, *,
                 on_free: Callable[[str, int], None], demand: Callable[[], Mapping[str, int]],
                 stats: Any = None, clock: Callable[[], float] = time.monotonic,
                 key: Callable[[Request], str] = host_key) -> None:
        self.cfg, self.store, self.worker, self.key = cfg, store, worker, key
        self._on_free, self._demand, self._stats, self._clock = on_free, demand, stats, clock
        self.grants: dict[str, int] = {}
        self.in_flight: Counter[str] = Counter()
        self._holders: dict[Request, str] = {}
        self._next_start: dict[str, float] = {}
        self._valid_until = 0.0
        self._asked: set[str] = set()  # the hosts the latest renewal wanted shares of
        self._over: set[str] = set()  # hosts with more in flight than the latest grant
        self._starved_since: float | None = None  # a wanted host all held by others since
        self._hurry_until = 0.0  # renew every RETRY s until then (after a rebalance)
        self._wanted = asyncio.Event()
        self._failing = False

    # -- the path of a request (no I/O) -------------------------------------
    def admit(self, request: Request) -> float | None:
        """None: *request* may go now (it holds a share until :meth:`release`); else the
        seconds to wait (:data:`BLOCKED`: until one of its host's requests ends)."""
        host = self.key(request)
        now = self._clock()
        grant = self.grants.get(host, 0) if now < self._valid_until else 0
        if self.in_flight[host] >= grant:
            if grant == 0 and host not in self._asked:
                self._wanted.set()  # not asked for yet: ask now, not at the next beat
            return BLOCKED
        if self.cfg.delay > 0:
            due = self._next_start.get(host, 0.0)
            if now < due:
                return due - now
            self._next_start[host] = now + self.cfg.delay * self.cfg.concurrency / grant
        self.in_flight[host] += 1
        self._holders[request] = host
        return None

    def release(self, request: Request) -> None:
        """*request* left the downloader (or the engine): its share is free again."""
        host = self._holders.pop(request, None)
        if host is None:
            return
        self.in_flight[host] -= 1
        left = self.in_flight[host]
        if left <= 0:
            del self.in_flight[host]
        grant = self.grants.get(host, 0)
        if left < grant:
            self._on_free(host, 1)
        elif host in self._over and left <= grant:
            self._over.discard(host)  # down to a shrunk share: tell the store now, so that
            self._wanted.set()  # the worker waiting for the rest gets it (not in an interval)

    @property
    def holding(self) -> int:
        return len(self._holders)

    # -- renewals ------------------------------------------------------------
    async def run(self) -> None:
        """Renew every ``HOSTLIMIT_INTERVAL``; soon after a request waits for a share or
        this worker's holds come down to a shrunk share; and, while a host it wants is all
        held by others, every :data:`RETRY` s for one interval, the time the holders take
        to renew and give up what they hold above their shares (a worker joining a crawl
        gets its share within :data:`RETRY` s of that)."""
        while True:
            if await wait_event(self._wanted, self.wait()):
                await asyncio.sleep(EARLY)
            self._wanted.clear()
            await self.renew()

    def wait(self) -> float:
        """Seconds to the next renewal unless one is asked for sooner."""
        now, since = self._clock(), self._starved_since
        if (since is not None and now - since < self.cfg.interval) or now < self._hurry_until:
            return RETRY
        return self.cfg.interval

    def hurry(self) -> None:
        """The crawl's consumer group changed (a worker joined or left): renew every
        :data:`RETRY` s for two intervals, so that a worker that joined gets its share of the
        hosts this one holds as soon as it asks, not after this one's next renewal."""
        self._hurry_until = self._clock() + 2 * self.cfg.interval
        self._wanted.set()  # the renewal under way may be an interval off

    def demands(self) -> list[Demand]:
        """What to ask for each host. What the worker holds is what it may have in flight
        until the answer comes: its current share, used meanwhile, if that is more than its
        requests in flight (their count alone let the store shrink the hold below what the
        worker then started, and grant the rest to another worker: over the limit)."""
        waiting = self._demand()
        hosts = set(waiting) | set(self.in_flight) | set(self.grants)
        limit = self.cfg.concurrency
        usable = self._clock() < self._valid_until
        demands = [Demand(host, limit, min(limit, self.in_flight[host] + waiting.get(host, 0)),
                          max(self.in_flight[host], self.grants.get(host, 0) if usable else 0))
                   for host in sorted(hosts)]
        self._asked = {d.host for d in demands if d.want > 0}
        return demands

    async def renew(self) -> None:
        """One round trip for every host this worker has work for or holds a share of."""
        demands = self.demands()
        if not demands:
            return
        sent = self._clock()
        try:
            grants = await self.store.renew(self.worker, demands, self.cfg.ttl)
        except Exception as exc:
            self._renew_failed(exc)
            return
        if self._failing:
            logger.info("Per-host limits renewed again")
            self._failing = False
        self._valid_until = sent + self.cfg.ttl - self.cfg.interval
        starved = False
        for demand, grant in zip(demands, grants, strict=True):
            self._granted(demand.host, grant, demand.in_flight)
            starved |= grant == 0 and demand.want > 0
        if not starved:
            self._starved_since = None
        elif self._starved_since is None:
            self._starved_since = sent
        self._inc("hostlimit/renewals")

    def _granted(self, host: str, grant: int, held: int) -> None:
        """Apply *grant*; *held* is what the store now counts for this worker."""
        if self.in_flight[host] > grant:
            self._over.add(host)
        else:
            self._over.discard(host)
            if grant < held:  # the store still counts the old share: tell it the new one
                self._wanted.set()
        if grant > 0:
            self.grants[host] = grant
        else:
            self.grants.pop(host, None)
            self._next_start.pop(host, None)
        # every share not in flight, not only the new ones: a request blocked while a renewal
        # sent before the shares' end was on its way saw no share, and has nothing in flight
        # whose end would free it (counting only the shares above the last grant, the worker
        # held it for ever); freeing more than are blocked moves none
        free = grant - self.in_flight[host]
        if free > 0:
            self._on_free(host, free)

    def _renew_failed(self, exc: Exception) -> None:
        self._inc("hostlimit/renew_errors")
        if not self._failing:
            logger.warning("Cannot renew the per-host limits (requests wait once the shares "
                           "held expire): %s", exc)
            self._failing = True

    def _inc(self, key: str) -> None:
        if self._stats is not None:
            self._stats.inc_value(key)
