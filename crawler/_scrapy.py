"""Every use of Scrapy's private or unstable API, in one place. Supported: Scrapy 2.13 to 2.19.

``tests/unit/test_scrapy_contract.py`` checks, against the installed Scrapy, each
attribute and signature relied on here, and names what changed if a release breaks one.

- A lease ends when the engine lets go of its request. Scrapy signals no such event, but
  every request the engine takes from the scheduler leaves through its slot's
  ``remove_request`` (``ExecutionEngine._slot``) once it is fully handled: the callback ran
  and its items left the pipelines, or the download failed, was ignored or was replaced by
  a redirect. :func:`on_request_left` wraps that method; the slot's ``nextcall`` wakes
  the engine up when the scheduler has something new.
- A download's failure reaches the spider through the engine's scraper
  (``ExecutionEngine.scraper.enqueue_scrape(result, request)``, with a ``Failure``), even
  when a downloader middleware raised it from ``process_response`` (the redirect limit,
  the decompression bound), which no ``process_exception`` hears. :func:`on_download_failed`
  wraps that method, so the ledger learns what ended each request. The scraper logs such a
  failure on the logger :data:`SCRAPER_LOGGER`.
- The engine (``crawler.engine``, :mod:`scrapy.core.engine`) is paused, resumed and
  closed by the frontier's worker lifecycle and by middlewares that give up.
- ``request.meta["_auth_proxy"]``: where ``HttpProxyMiddleware`` remembers whose proxy
  credentials a request carries; it never leaves the process.

:mod:`crawler.settings` imports this module first. Through ``http11`` it imports
``scrapy.core.downloader.contextfactory`` and ``scrapy.core.downloader.tls``, which define
deprecated aliases with ``create_deprecated_class``; that calls ``inspect.stack()``, whose
cost is the stack's depth times the modules loaded (CPython issue 92041). Imported where a
worker first needed them (about 60 frames deep, 670 modules loaded), the three calls took
0.32 CPU-s; imported first by this module, itself imported first by the settings module
(30-36 frames, 618 modules), 0.19. Every ``scrapy`` process of this project imports them
anyway.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

from scrapy import Request
from scrapy.core.downloader import contextfactory  # noqa: F401  (first: see above)
from scrapy.core.downloader.handlers.http11 import TunnelError
from scrapy.core.scheduler import BaseScheduler
from scrapy.crawler import Crawler
from scrapy.utils.defer import deferred_from_coro
from twisted.internet.defer import Deferred
from twisted.python.failure import Failure

__all__ = ["AUTH_PROXY_META", "SCRAPER_LOGGER", "BaseScheduler", "EngineHook", "TunnelError",
           "as_deferred", "close_spider", "download", "engine_paused", "engine_running",
           "engine_work", "on_download_failed", "on_request_left", "pause_engine", "schedule",
           "unpause_engine"]

#: meta key of ``HttpProxyMiddleware``: the proxy URL whose credentials the request carries
AUTH_PROXY_META = "_auth_proxy"
SUPPORTED = "Scrapy 2.13-2.19"
#: the logger of Scrapy's scraper: its "Error downloading" lines (crawler.extensions.downloadlog)
SCRAPER_LOGGER = "scrapy.core.scraper"


class EngineHook:
    """The engine slot the frontier hooked into."""

    def __init__(self, slot: Any) -> None:
        self._slot = slot

    def wake(self) -> None:
        """Make the engine ask the scheduler for requests soon."""
        self._slot.nextcall.schedule()


def on_request_left(crawler: Crawler, callback: Callable[[Request], None]) -> EngineHook:
    """Call *callback(request)* whenever the engine lets go of a request (after Scrapy's
    own ``remove_request``). Call it from the scheduler's ``open``: the slot exists then."""
    slot = getattr(crawler.engine, "_slot", None)
    if slot is None or not callable(getattr(slot, "remove_request", None)) or not hasattr(
        slot, "nextcall"
    ):
        raise RuntimeError(f"the Kafka frontier needs {SUPPORTED} (engine slot not found)")
    original = slot.remove_request

    def remove_request(request: Request) -> None:
        original(request)
        callback(request)

    slot.remove_request = remove_request
    return EngineHook(slot)


def on_download_failed(crawler: Crawler,
                       callback: Callable[[Request, BaseException], None]) -> None:
    """Call *callback(request, exception)* for each download that ended in a failure, before
    the scraper hands it to the spider's errback (call it from the scheduler's ``open``)."""
    scraper: Any = getattr(crawler.engine, "scraper", None)
    original = getattr(scraper, "enqueue_scrape", None)
    if scraper is None or not callable(original):
        raise RuntimeError(f"the Kafka frontier needs {SUPPORTED} (engine scraper not found)")

    def enqueue_scrape(result: Any, request: Request) -> Any:
        if isinstance(result, Failure) and result.value is not None:
            callback(request, result.value)
        return original(result, request)

    scraper.enqueue_scrape = enqueue_scrape


def as_deferred(coro: Coroutine[Any, Any, None]) -> Deferred[None]:
    """A Deferred of *coro*, for the scheduler's ``open`` and ``close``."""
    return deferred_from_coro(coro)


def _engine(crawler: Crawler) -> Any:
    engine = crawler.engine
    if engine is None:
        raise RuntimeError("the crawler has no engine yet")
    return engine


async def download(crawler: Crawler, request: Request) -> Any:
    """*request* downloaded by the engine outside the scheduler (a robots.txt): its response."""
    return await _engine(crawler).download_async(request)


def schedule(crawler: Crawler, request: Request) -> None:
    """Hand *request* to the scheduler, as a callback's request would be (a sitemap)."""
    _engine(crawler).crawl(request)


def engine_paused(crawler: Crawler) -> bool:
    return bool(_engine(crawler).paused)


def pause_engine(crawler: Crawler) -> None:
    _engine(crawler).pause()


def unpause_engine(crawler: Crawler) -> None:
    _engine(crawler).unpause()


def engine_running(crawler: Crawler) -> bool:
    """Whether the engine runs (True before there is one: nothing is stopping)."""
    try:
        return bool(_engine(crawler).running)
    except RuntimeError:
        return True


def engine_work(crawler: Crawler) -> dict[str, Any] | None:
    """What the engine holds while it closes (None when it is not closing): the requests in
    its slot, the downloader's per-slot queues and the scraper's, for the close watch."""
    slot = getattr(crawler.engine, "_slot", None)
    if slot is None or getattr(slot, "closing", None) is None:
        return None
    downloader: Any = getattr(crawler.engine, "downloader", None)
    slots = getattr(downloader, "slots", {}) or {}
    scraper_slot: Any = getattr(getattr(crawler.engine, "scraper", None), "slot", None)
    return {
        "inprogress": list(getattr(slot, "inprogress", ())),
        "downloading": len(getattr(downloader, "active", ())),
        "slots": {key: (len(s.queue), len(s.active), len(s.transferring))
                  for key, s in slots.items() if s.queue or s.active or s.transferring},
        "scraping": len(getattr(scraper_slot, "active", ())),
        "to_scrape": len(getattr(scraper_slot, "queue", ())),
    }


def close_spider(crawler: Crawler, reason: str) -> asyncio.Future[None]:
    """Close the spider with *reason* (unpause a paused engine first: it would never finish
    closing). Keep the future: it is the closing task."""
    return asyncio.ensure_future(_engine(crawler).close_spider_async(reason=reason))
