"""The one retry rule: call until it works, with a doubling, capped backoff.

:func:`retry` is the loop every caller shares: it calls, and on an error it asks whether
retrying can help (*is_transient*), tells the caller (*on_retry*: count, log, or pick the
delay), checks whether to stop, sleeps and calls again. :func:`backoff` is its delay.

:class:`RedisRetry` is one retry loop's state for Redis calls, after the rule of
:mod:`crawler.connections.redis_errors`: a transient error is retried with the backoff for
ever; the first failure and then one line a minute say that the loop stalls. A
deterministic error (``OOM``, ``NOPERM``, a script error) is reported once, as one line
that says retrying cannot help, and :attr:`RedisRetry.fatal` holds it so the caller can
stop the worker instead of retrying it for ever.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from crawler.connections import redis_errors

logger = logging.getLogger(__name__)
REMIND_EVERY = 60.0  # seconds between two "still failing" lines of one stall
T = TypeVar("T")

#: ``on_retry(error, attempt, delay)``: called after each failed attempt (0-based) before
#: the wait; it may return the seconds to wait instead of *delay*, or raise to end the loop
OnRetry = Callable[[Exception, int, float], float | None]


def backoff(attempt: int, base: float, cap: float) -> float:
    """Seconds to wait before retry number *attempt* (0-based): doubling from *base*, capped."""
    return float(min(cap, base * 2 ** min(attempt, 32)))


class RetryStopped(Exception):
    """:func:`retry` gave up because its *stop* said so; the cause is the last error."""


def _always(_exc: Exception) -> bool:
    return True


async def retry(
    call: Callable[[], Awaitable[T]], *, is_transient: Callable[[Exception], bool] = _always,
    on_retry: OnRetry | None = None, base: float = 0.5, cap: float = 30.0,
    stop: Callable[[], bool] | None = None,
    errors: tuple[type[Exception], ...] = (Exception,),
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> T:
    """``await call()`` until it returns; its result.

    An exception of *errors* is retried after :func:`backoff` (or what *on_retry* returns)
    while *is_transient* says so; it is raised as it is otherwise, as is every other
    exception. *stop* is checked before every attempt and after every failure: once it is
    true, :class:`RetryStopped` is raised instead of calling again.
    """
    attempt = 0
    while True:
        if stop is not None and stop():
            raise RetryStopped("stopped before the call")
        try:
            return await call()
        except errors as exc:
            if not is_transient(exc):
                raise
            delay = backoff(attempt, base, cap)
            if on_retry is not None:
                chosen = on_retry(exc, attempt, delay)
                delay = delay if chosen is None else chosen
            if stop is not None and stop():
                raise RetryStopped(str(exc)) from exc
        await sleep(delay)
        attempt += 1


class RedisRetry:
    """Backoff and logging for one kind of Redis call (``what`` names it in the log).

    Its :meth:`failed` fits :func:`retry`'s *on_retry* through :meth:`on_retry`.
    """

    def __init__(self, what: str, *, base: float = 0.5, cap: float = 30.0) -> None:
        self.what, self.base, self.cap = what, base, cap
        self.fatal: str | None = None
        self._failures = 0
        self._since: float | None = None
        self._reminded = 0.0

    def failed(self, exc: BaseException) -> float:
        """Record a failure of the call; returns the seconds to wait before the next try."""
        now = time.monotonic()
        self._failures += 1
        if not redis_errors.is_transient(exc):
            if self.fatal is None:
                self.fatal = redis_errors.describe(exc)
                logger.error("Redis refuses %s and retrying cannot help: %s (an operator must "
                             "act: memory, ACL permissions or scripts)", self.what, self.fatal)
            return self.cap
        if self._since is None:
            self._since = self._reminded = now
            logger.warning("Redis %s unavailable, retrying: %s", self.what,
                           redis_errors.describe(exc))
        elif now - self._reminded >= REMIND_EVERY:
            self._reminded = now
            logger.warning("Redis %s stalled for %.0fs (%d failures): %s", self.what,
                           now - self._since, self._failures, redis_errors.describe(exc))
        return backoff(self._failures - 1, self.base, self.cap)

    def on_retry(self, exc: Exception, _attempt: int, _delay: float) -> float:
        """:meth:`failed`, as :func:`retry`'s *on_retry*: this state picks the delay."""
        return self.failed(exc)

    def succeeded(self) -> None:
        if self._since is not None:
            logger.info("Redis %s reachable again after %.0fs", self.what,
                        time.monotonic() - self._since)
        self._failures, self._since, self.fatal = 0, None, None

    @property
    def stalled(self) -> bool:
        return self._since is not None or self.fatal is not None
