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
    """Highest priority first, then first in first out; delayed ones when due.

    A request that waited (delayed until its time, or blocked until its host had a free
    share) goes ahead of the ready ones of its priority once it may go: its host's slot
    is now, and the others' hosts are not waiting for them. Behind the ready ones, a host
    with a 0.5 s Crawl-delay got its turn about once a second in a broad crawl.

    With *band_of* (a priority's band, :meth:`crawler.frontier.config.FrontierConfig.band_of`)
    and *min_share*, every ``1 / min_share``-th request comes from a band below the highest
    that has ready requests (the lower bands in turn), so no band starves.
    """

    def __init__(self, clock: Callable[[], float] = time.time, *,
                 band_of: Callable[[int], int] | None = None, min_share: float = 0.0) -> None:
        self._clock = clock
        self._seq = itertools.count()
        self._waited_seq = itertools.count(-(1 << 62))  # before every ready one: see above
        self._band_of = band_of or (lambda _priority: 0)
        self._every = round(1 / min_share) if min_share > 0 else 0
        self._since_lower = 0
        self._turn = 0
        self._ready: dict[int, list[tuple[int, int, Request, L]]] = {}
        self._ready_count = 0
        self._delayed: list[tuple[float, int, Request, L]] = []
        self._blocked: dict[str, list[tuple[int, int, Request, L]]] = {}
        self._blocked_count = 0

    def push(self, request: Request, lease: L, not_before: float | None = None) -> None:
        if not_before is not None and not_before > self._clock():
            heapq.heappush(self._delayed, (not_before, next(self._seq), request, lease))
        else:
            self._make_ready((-request.priority, next(self._seq), request, lease))

    def _make_ready(self, entry: tuple[int, int, Request, L]) -> None:
        heapq.heappush(self._ready.setdefault(self._band_of(-entry[0]), []), entry)
        self._ready_count += 1

    def pop(self) -> tuple[Request, L] | None:
        """The next request that is due, or None."""
        self._promote()
        band = self._next_band()
        if band is None:
            return None
        heap = self._ready[band]
        _, _, request, lease = heapq.heappop(heap)
        if not heap:
            del self._ready[band]
        self._ready_count -= 1
        return request, lease

    def _next_band(self) -> int | None:
        if not self._ready:
            return None
        top = max(self._ready)
        if self._every and len(self._ready) > 1:
            self._since_lower += 1
            if self._since_lower >= self._every:
                self._since_lower = 0
                lower = sorted(band for band in self._ready if band != top)
                self._turn = (self._turn + 1) % len(lower)
                return lower[self._turn]
        return top

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
            priority, _seq, request, lease = heapq.heappop(waiting)
            self._make_ready((priority, next(self._waited_seq), request, lease))
            moved += 1
        if not waiting:
            self._blocked.pop(host, None)
        self._blocked_count -= moved
        return moved

    def blocked_hosts(self) -> dict[str, int]:
        """Blocked requests per host."""
        return {host: len(entries) for host, entries in self._blocked.items()}

    def waiting_hosts(self, key: Callable[[Request], str], within: float) -> dict[str, int]:
        """Requests per host (*key*) that wait for a share or for their time: blocked, or
        delayed (a retry's back-off, a rate limiter's slot) and due in *within* seconds."""
        counts = self.blocked_hosts()
        soon = self._clock() + within
        for due, _seq, request, _lease in self._delayed:
            if due <= soon:
                host = key(request)
                counts[host] = counts.get(host, 0) + 1
        return counts

    def hurry(self, wants: Callable[[Request], bool], due: float) -> bool:
        """Bring the first delayed request that *wants* forward to *due*, if it waits longer;
        whether one was."""
        found = min((entry for entry in self._delayed if entry[0] > due and wants(entry[2])),
                    default=None, key=lambda entry: entry[:2])
        if found is None:
            return False
        self._delayed.remove(found)
        self._delayed.append((due, *found[1:]))
        heapq.heapify(self._delayed)
        return True

    def _promote(self) -> None:
        now = self._clock()
        while self._delayed and self._delayed[0][0] <= now:
            _, _seq, request, lease = heapq.heappop(self._delayed)
            self._make_ready((-request.priority, next(self._waited_seq), request, lease))

    def next_due(self) -> float | None:
        """Seconds until the earliest request not due yet is due (None: none waits);
        those already due count as ready from now on."""
        self._promote()
        if not self._delayed:
            return None
        return max(self._delayed[0][0] - self._clock(), 0.0)

    @property
    def ready(self) -> int:
        return self._ready_count

    @property
    def delayed(self) -> int:
        return len(self._delayed)

    @property
    def blocked(self) -> int:
        return self._blocked_count

    def __len__(self) -> int:
        return self._ready_count + len(self._delayed) + self._blocked_count
