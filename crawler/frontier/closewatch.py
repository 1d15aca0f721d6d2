"""What a slow close waits on, logged while it waits.

Scrapy's engine closes only once every request it took has left it; a request held forever
(a middleware awaiting what never comes) holds the close forever, and the log shows
nothing after "Closing spider"; so does a component's ``spider_closed`` handler that never
returns. :class:`CloseWatch` looks every few seconds, in a task of its own that outlives the
components' (the scheduler cancels those first when it closes), until the engine's close is
over. Once the engine has been closing for ``after`` seconds, and then every ``after``
seconds, it logs the requests still in the engine, the downloader's and the scraper's
queues, and where each pending asyncio task of the worker is suspended (the closing one's
and each ``spider_closed`` handler's among them).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, cast

from scrapy import signals
from scrapy.crawler import Crawler

from crawler import _scrapy

logger = logging.getLogger(__name__)
SHOWN = 5  # requests named in a report
TASKS = 20  # tasks named in a report
FRAMES = 4  # the innermost frames shown of each task
LOOK = 5.0  # seconds between looks


class CloseWatch:
    """Logs what the engine's close waits on, once it has waited *after* seconds."""

    def __init__(self, crawler: Crawler, after: float = 30.0) -> None:
        self.crawler, self.after = crawler, after
        self._since: float | None = None
        self._reported = 0.0
        self._task: asyncio.Task[None] | None = None
        crawler.signals.connect(self.stop, signals.engine_stopped)

    def start(self) -> None:
        """Look every :data:`LOOK` seconds until :meth:`stop`."""
        if self._task is None:
            self._task = asyncio.ensure_future(self._run())
            self._task.set_name("close watch")

    def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()

    async def _run(self) -> None:
        """Look until the engine's close is over (its slot gone) or the engine stopped."""
        closing_seen = False
        while True:
            await asyncio.sleep(LOOK)
            self.check()
            if self._since is not None:
                closing_seen = True
            elif closing_seen:
                return

    def check(self, now: float | None = None) -> str | None:
        """The report logged now, if one is due (None otherwise)."""
        now = time.monotonic() if now is None else now
        work = _scrapy.engine_work(self.crawler)
        if work is None:
            self._since = None
            return None
        if self._since is None:
            self._since = self._reported = now
        if now - self._reported < self.after:
            return None
        self._reported = now
        report = describe(work, now - self._since)
        logger.warning("%s", report)
        return report


def describe(work: dict[str, Any], waited: float) -> str:
    held = work["inprogress"]
    urls = ", ".join(getattr(r, "url", repr(r)) for r in held[:SHOWN])
    more = f" and {len(held) - SHOWN} more" if len(held) > SHOWN else ""
    slots = "; ".join(f"{key}: {q} queued, {a} active, {t} transferring"
                      for key, (q, a, t) in list(work["slots"].items())[:SHOWN])
    return (f"Closing for {waited:.0f} s: {len(held)} request(s) still in the engine"
            f"{': ' + urls + more if held else ''}; downloader: {work['downloading']} "
            f"active{' (' + slots + ')' if slots else ''}; scraper: {work['scraping']} "
            f"active, {work['to_scrape']} queued; tasks: {pending_tasks()}")


def pending_tasks() -> str:
    """Where each pending asyncio task (but the current one) is suspended."""
    try:
        tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    except RuntimeError:  # no running loop
        return "none"
    return "; ".join(_where(t) for t in tasks[:TASKS]) or "none"


def _where(task: asyncio.Task[Any]) -> str:
    """*task*'s name and its innermost frames, down its chain of awaits."""
    frames, awaited = [], cast(Any, task.get_coro())
    while awaited is not None:
        frame = getattr(awaited, "cr_frame", None) or getattr(awaited, "gi_frame", None)
        if frame is None:
            break
        frames.append(frame)
        awaited = getattr(awaited, "cr_await", None) or getattr(awaited, "gi_yieldfrom", None)
    inner = " < ".join(f"{f.f_code.co_qualname} ({f.f_code.co_filename.rsplit('/', 2)[-1]}:"
                       f"{f.f_lineno})" for f in reversed(frames[-FRAMES:]))
    end = f" awaiting {type(awaited).__name__}" if awaited is not None else ""
    return f"{task.get_name()} at {inner or '?'}{end}"
