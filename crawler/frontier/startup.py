"""Where a worker's start-up goes: the time from its process's start to its first request.

Each part ends with a :func:`mark`, made where the work happens (once per process: a mark
made again keeps its first time):

- ``imports``: the interpreter, Scrapy and the project's modules, until ``scrapy crawl`` or
  ``scrapy runspider`` runs (:mod:`crawler.commands.crawl`, :mod:`crawler.commands.runspider`);
- ``preflight``: the start-up check of the settings and the services
  (:mod:`crawler.commands.preflight`);
- ``setup``: Scrapy builds the crawler and its components and opens the spider, until the
  Kafka scheduler opens;
- ``connections``: the scheduler's Redis: the check, the Bloom filter, the seed key;
- ``topics``: the crawl's topics checked or created, the Kafka clients built;
- ``join``: the consumer group's join, until the first partitions are assigned;
- ``first_request``: until the first request reaches the downloader.

When the first request goes out, :class:`StartupWatch` logs one line and sets the stats
``startup/<part>`` (seconds) and ``startup/total``. The process's start is read from
``/proc`` (10 ms ticks); where there is none, ``imports`` is left out and the total
starts at the first mark.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from typing import Any

from scrapy import signals
from scrapy.crawler import Crawler

logger = logging.getLogger(__name__)
PARTS = ("imports", "preflight", "setup", "connections", "topics", "join", "first_request")
_NAMES = {"first_request": "first request", "join": "group join"}
_marks: dict[str, float] = {}
_lock = threading.Lock()  # the consumer thread marks "join"


def process_start(stat: str = "/proc/self/stat", uptime: str = "/proc/uptime",
                  now: Callable[[], float] = time.time) -> float | None:
    """The wall-clock time this process started, or None where ``/proc`` does not say.

    Its age is the time since boot (``/proc/uptime``) less its start since boot (``stat``
    field 22), both to 10 ms; ``btime`` of ``/proc/stat`` would do instead of the uptime but
    is whole seconds, up to a second off."""
    try:
        with open(stat) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        with open(uptime) as f:
            since_boot = float(f.read().split()[0])
    except (OSError, IndexError, ValueError):
        return None
    return now() - (since_boot - int(fields[19]) / os.sysconf("SC_CLK_TCK"))


def mark(part: str, at: float | None = None) -> None:
    """*part* of the start-up ends now (or at *at*); a later mark of it changes nothing."""
    if part not in PARTS:
        raise ValueError(f"unknown start-up part {part!r}")
    with _lock:
        _marks.setdefault(part, time.time() if at is None else at)


def reset() -> None:
    """Forget every mark (tests). Marks are the process's: a second crawl in one process
    reports the first one's parts, as nothing resets them between crawls."""
    with _lock:
        _marks.clear()


def parts(started: float | None) -> dict[str, float]:
    """Seconds each part took, in order, for the parts marked so far; a part whose mark is
    missing is folded into the next one marked."""
    with _lock:
        marks = dict(_marks)
    found: dict[str, float] = {}
    previous = started
    for part in PARTS:
        at = marks.get(part)
        if at is None:
            continue
        if previous is not None:
            found[part] = max(0.0, at - previous)
        previous = at
    return found


def line(durations: dict[str, float]) -> str:
    """``Start-up: 4.31 s to the first request (imports 0.62 s, ...)``."""
    total = sum(durations.values())
    each = ", ".join(f"{_NAMES.get(p, p)} {s:.2f} s" for p, s in durations.items())
    return f"Start-up: {total:.2f} s to the first request ({each})"


class StartupWatch:
    """Marks the first request that reaches the downloader; reports the start-up then."""

    def __init__(self, crawler: Crawler, started: Callable[[], float | None] = process_start
                 ) -> None:
        self.crawler, self.started = crawler, started
        self.reported = False
        crawler.signals.connect(self._request_sent, signal=signals.request_reached_downloader)

    def _request_sent(self, request: Any, spider: Any = None) -> None:
        if self.reported:
            return
        self.reported = True
        mark("first_request")
        durations = parts(self.started())
        stats = self.crawler.stats
        if stats is not None:
            for part, seconds in durations.items():
                stats.set_value(f"startup/{part}", round(seconds, 3))
            stats.set_value("startup/total", round(sum(durations.values()), 3))
        logger.info("%s", line(durations))
        self.crawler.signals.disconnect(self._request_sent,
                                        signal=signals.request_reached_downloader)
