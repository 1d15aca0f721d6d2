"""Recrawl generations (``RECRAWL_AFTER``): the settings and the clock, pure logic, no I/O.

With ``RECRAWL_AFTER = T > 0`` the crawl's time is cut into generations of ``T`` seconds
of Redis time, numbered from 1; the number and the start of the current one live in Redis
(:attr:`crawler.config.CrawlKeys.recrawl`, advanced by the ``tick`` script of
:mod:`crawler.dedup.recrawl`). A fingerprint is seen if the filter of the current or of the
previous generation has it, so a URL added at time ``t`` is filtered until at least
``t + T`` and at most ``t + 2T`` (see ``docs/recrawl.md``).

:class:`GenerationClock` tells a worker, between two reads of Redis, which generation it is
now: Redis's time is estimated from the local monotonic clock and the offset seen at the
last read. The pre-filter and the window of recent fingerprints of the worker forget what
they hold when that number changes (:func:`crawler.dedup.local.LocalBloom`,
:class:`crawler.frontier.recent.RecentFingerprints`).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from crawler.config import readers as config

if TYPE_CHECKING:
    from scrapy.settings import BaseSettings


@dataclass(frozen=True)
class RecrawlConfig:
    """``RECRAWL_*``, read and checked once."""

    after: float = 0.0  # seconds; 0: never recrawl (one filter for ever)

    @property
    def enabled(self) -> bool:
        return self.after > 0

    @classmethod
    def from_settings(cls, settings: BaseSettings) -> RecrawlConfig:
        after = config.get_float(settings, "RECRAWL_AFTER", minimum=0)
        if math.isinf(after) or math.isnan(after):
            raise config.SettingError("RECRAWL_AFTER", f"expected a finite number of "
                                      f"seconds (0: never), got {after!r}")
        return cls(after=after)


class GenerationClock:
    """The current generation, estimated locally between two reads of Redis."""

    def __init__(self, after: float, *, now: Callable[[], float] = time.monotonic) -> None:
        if not after > 0:
            raise ValueError(f"after must be > 0, got {after!r}")
        self.after = after
        self._now = now
        self.number = 0  # the generation Redis said at the last sync (0: never synced)
        self.started = 0.0  # its start, Redis time
        self._offset = 0.0  # Redis time - local monotonic time, at the last sync

    def sync(self, number: int, started: float, redis_now: float) -> None:
        """What Redis said: generation *number* started at *started*, it is *redis_now*."""
        self.number, self.started = number, started
        self._offset = redis_now - self._now()

    def redis_now(self) -> float:
        """Redis's time now, estimated."""
        return self._now() + self._offset

    def estimate(self) -> int:
        """The generation it is now (0 before the first sync)."""
        if not self.number:
            return 0
        steps = math.floor((self.redis_now() - self.started) / self.after)
        return self.number + max(steps, 0)

    def due(self) -> bool:
        """Whether Redis should be asked again: the estimate moved past the last answer."""
        return self.estimate() != self.number

    def age(self) -> float:
        """Seconds since the current generation began (estimated)."""
        return max(self.redis_now() - self.started, 0.0)
