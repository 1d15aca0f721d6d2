"""The worker's local request buffer: a priority heap plus requests not due yet.

Pure data structure: no Kafka, no Scrapy engine, no I/O. Requests with a
``not_before`` time (a retry's back-off, a rate limiter's wait) are held apart
until they are due, so a waiting request never blocks the others. Requests whose host has
no free share of its cluster-wide concurrency (:mod:`crawler.politeness.hostgate`) are
*blocked* apart, per host, until :meth:`RequestBuffer.unblock` lets some back.
"""

from __future__ import annotations

import heapq
import itertools
import time
from collections.abc import Callable
from typing import Generic, TypeVar

from scrapy import Request

L = TypeVar("L")


class RequestBuffer(Generic[L]):
    """Highest priority first, then first in first out; delayed ones when due."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._seq = itertools.count()
        self._ready: list[tuple[int, int, Request, L]] = []
        self._delayed: list[tuple[float, int, Request, L]] = []
        self._blocked: dict[str, list[tuple[int, int, Request, L]]] = {}
        self._blocked_count = 0

    def push(self, request: Request, lease: L, not_before: float | None = None) -> None:
        if not_before is not None and not_before > self._clock():
            heapq.heappush(self._delayed, (not_before, next(self._seq), request, lease))
        else:
            heapq.heappush(self._ready, (-request.priority, next(self._seq), request, lease))

    def pop(self) -> tuple[Request, L] | None:
        """The next request that is due, or None."""
        self._promote()
        if not self._ready:
            return None
        _, _, request, lease = heapq.heappop(self._ready)
        return request, lease

    def block(self, host: str, request: Request, lease: L) -> None:
        """Hold *request* until :meth:`unblock` frees its *host* (it keeps its priority)."""
        heapq.heappush(self._blocked.setdefault(host, []),
                       (-request.priority, next(self._seq), request, lease))
        self._blocked_count += 1

    def unblock(self, host: str, count: int) -> int:
        """Make up to *count* of *host*'s blocked requests ready, the best first."""
        waiting = self._blocked.get(host)
        moved = 0
        while waiting and moved < count:
            heapq.heappush(self._ready, heapq.heappop(waiting))
            moved += 1
        if not waiting:
            self._blocked.pop(host, None)
        self._blocked_count -= moved
        return moved

    def blocked_hosts(self) -> dict[str, int]:
        """Blocked requests per host."""
        return {host: len(entries) for host, entries in self._blocked.items()}

    def _promote(self) -> None:
        now = self._clock()
        while self._delayed and self._delayed[0][0] <= now:
            _, seq, request, lease = heapq.heappop(self._delayed)
            heapq.heappush(self._ready, (-request.priority, seq, request, lease))

    def next_due(self) -> float | None:
        """Seconds until the earliest request not due yet is due (None: none waits);
        those already due count as ready from now on."""
        self._promote()
        if not self._delayed:
            return None
        return max(self._delayed[0][0] - self._clock(), 0.0)

    @property
    def ready(self) -> int:
        return len(self._ready)

    @property
    def delayed(self) -> int:
        return len(self._delayed)

    @property
    def blocked(self) -> int:
        return self._blocked_count

    def __len__(self) -> int:
        return len(self._ready) + len(self._delayed) + self._blocked_count
