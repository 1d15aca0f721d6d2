"""Delaying a request without blocking the reactor or other requests.

With the Kafka frontier, a downloader middleware delays a request by returning
:func:`delayed` copy of it: the engine hands it back to the scheduler, which
keeps it, under its original lease, in the worker's buffer until it is due
(a worker killed meanwhile loses nothing: the lease was never acknowledged).
With Scrapy's own scheduler (single-node mode) there is no such buffer, so
:func:`sleep` waits on the event loop instead.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from scrapy import Request
from scrapy.crawler import Crawler
from scrapy.utils.misc import load_object

#: meta key: the request must not be downloaded before this time (``time.time()``)
NOT_BEFORE_KEY = "crawler_not_before"
#: meta key: the politeness unit whose turn the delayed request waits for (the rate limiter's)
WAITS_FOR_KEY = "crawler_waits_for"
#: signal (``unit``, ``delay``): *unit*'s next turn is *delay* seconds from now; a scheduler
#: with a buffer brings its first request waiting for that unit (:data:`WAITS_FOR_KEY`)
#: forward to then, instead of its next poll
UNIT_FREED = object()


def scheduler_delays(crawler: Crawler) -> bool:
    """Whether the crawl's scheduler honours :data:`NOT_BEFORE_KEY`: its class (the
    ``SCHEDULER`` setting) says so with a true ``supports_delays`` attribute."""
    scheduler = crawler.settings.get("SCHEDULER")
    if not scheduler:
        return False
    scheduler_cls = load_object(scheduler) if isinstance(scheduler, str) else scheduler
    return bool(getattr(scheduler_cls, "supports_delays", False))


def delayed(request: Request, delay: float, **replace: object) -> Request:
    """A copy of *request* (with *replace* applied) not to be sent for *delay* seconds."""
    meta = dict(request.meta)
    meta[NOT_BEFORE_KEY] = time.time() + max(delay, 0.0)
    return request.replace(meta=meta, **replace)  # type: ignore[call-overload,no-any-return]


def not_before(request: Request) -> float | None:
    value = request.meta.get(NOT_BEFORE_KEY)
    return float(value) if isinstance(value, (int, float)) else None


class Wakeup:
    """One timer, for the earliest due time of the delayed requests of a buffer (not
    one per request): when it fires, *wake* runs and the timer is set again for
    *next_due()* (seconds from now, None when nothing waits)."""

    def __init__(self, call_later: Callable[[float, Callable[[], None]], Any],
                 wake: Callable[[], None], next_due: Callable[[], float | None]) -> None:
        self._later, self._wake, self._next_due = call_later, wake, next_due
        self._when: float | None = None
        self._call: Any = None

    def at(self, when: float) -> None:
        """Make sure the timer fires no later than *when* (``time.time()``)."""
        if self._when is not None and self._when <= when:
            return
        if self._call is not None and self._call.active():
            self._call.cancel()
        self._when = when
        self._call = self._later(max(when - time.time(), 0.0), self._fire)

    def _fire(self) -> None:
        self._when = self._call = None
        self._wake()
        due = self._next_due()
        if due is not None:
            self.at(time.time() + max(due, 0.001))


async def sleep(delay: float) -> None:
    """Wait *delay* seconds on the event loop (single-node mode)."""
    await asyncio.sleep(max(delay, 0.0))
