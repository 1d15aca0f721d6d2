"""One retry loop's state for crawl-state calls to Redis: backoff, stall and error lines.

The rule of :mod:`crawler.connections.redis_errors`: a transient error is retried with a backoff
that doubles up to a cap, for ever; the first failure and then one line a minute say
that the loop stalls. A deterministic error (``OOM``, ``NOPERM``, a script error) is
reported once, as one line that says retrying cannot help, and :attr:`fatal` holds it
so the caller can stop the worker instead of retrying it for ever.
"""

from __future__ import annotations

import logging
import time

from crawler.connections import redis_errors

logger = logging.getLogger(__name__)
REMIND_EVERY = 60.0  # seconds between two "still failing" lines of one stall


class RedisRetry:
    """Backoff and logging for one kind of Redis call (``what`` names it in the log)."""

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
        return float(min(self.cap, self.base * 2 ** min(self._failures - 1, 30)))

    def succeeded(self) -> None:
        if self._since is not None:
            logger.info("Redis %s reachable again after %.0fs", self.what,
                        time.monotonic() - self._since)
        self._failures, self._since, self.fatal = 0, None, None

    @property
    def stalled(self) -> bool:
        return self._since is not None or self.fatal is not None
