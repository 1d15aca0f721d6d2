"""The browser pages of one worker: how many may be open, and who closes each.

A page belongs to the request it was opened for. scrapy-playwright closes it after the
download, unless the request asked to keep it (``playwright_include_page``), and when the
download fails; it leaves open, for ever, a page that was kept and that the callback or
errback did not close (a callback that raised or forgot, a response that a middleware
dropped before the callback, an errback). Here every page still open when its request
leaves the engine (:func:`crawler._scrapy.on_request_left`: the callback or errback is
done, its items stored) is closed then, whatever the path, and it is never handed to
another request (a retry's copy of the meta names it): that one opens a new page.

No more than ``BROWSER_CONCURRENCY`` pages are open at once in a worker, over every
browser context and both download handlers (``http`` and ``https``) together.
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from scrapy import Request, signals
from scrapy.crawler import Crawler

from crawler._scrapy import on_request_left

logger = logging.getLogger(__name__)

PAGE_META = "playwright_page"  # scrapy-playwright: the page of a request that asked for it


class Page(Protocol):
    """What is used of a Playwright page."""

    def is_closed(self) -> bool: ...

    async def close(self) -> None: ...

    def on(self, event: str, f: Callable[..., Any]) -> None: ...


class BrowserPages:
    """The page limit and the pages each request in flight owns, for one crawler."""

    def __init__(self, concurrency: int, stats: Any = None) -> None:
        self._free = asyncio.Semaphore(concurrency)
        self._owned: weakref.WeakKeyDictionary[Request, list[Page]] = (
            weakref.WeakKeyDictionary())
        self._released: weakref.WeakSet[Any] = weakref.WeakSet()
        self._closing: set[asyncio.Future[None]] = set()
        self._stats = stats
        self.open_pages = 0

    async def open(self, request: Request, create: Callable[[], Awaitable[Page]]) -> Page:
        """A new page for *request*, made by *create* once a page may be opened."""
        await self._free.acquire()
        try:
            page = await create()
        except BaseException:
            self._free.release()
            raise
        self.open_pages += 1
        freed = False

        def free(*_: Any) -> None:  # on "close", and on "crash" (a crashed page stays open)
            nonlocal freed
            if not freed:
                freed = True
                self.open_pages -= 1
                self._free.release()

        page.on("close", free)
        page.on("crash", free)
        self._owned.setdefault(request, []).append(page)
        return page

    def released(self, page: Any) -> bool:
        """Whether *page*'s request has left the engine (the page is closed or closing)."""
        try:
            return page in self._released
        except TypeError:  # not weakly referenceable: not a page of ours
            return False

    def forget_released_page(self, request: Request) -> None:
        """Drop from *request*'s meta a page whose own request has left (a retry's copy):
        the download opens a new one."""
        page = request.meta.get(PAGE_META)
        if page is not None and self.released(page):
            del request.meta[PAGE_META]

    def left(self, request: Request) -> None:
        """*request* left the engine: close every page it opened that is still open."""
        for page in self._owned.pop(request, ()):
            self._released.add(page)
            if not page.is_closed():
                closing = asyncio.ensure_future(self._close(page, request))
                self._closing.add(closing)
                closing.add_done_callback(self._closing.discard)

    async def _close(self, page: Page, request: Request) -> None:
        if self._stats is not None:
            self._stats.inc_value("browser/pages_closed_after_request")
        logger.debug("Closing the page of %s, left open after its request", request)
        try:
            await page.close()
        except Exception as exc:  # the browser went away meanwhile: the page with it
            logger.debug("Closing the page of %s: %s", request, exc)

    async def settle(self) -> None:
        """Wait until every page being closed is closed."""
        while self._closing:
            await asyncio.gather(*self._closing, return_exceptions=True)


_PAGES: weakref.WeakKeyDictionary[Crawler, BrowserPages] = weakref.WeakKeyDictionary()


def pages_of(crawler: Crawler, concurrency: int) -> BrowserPages:
    """The one :class:`BrowserPages` of *crawler* (its download handlers share it); it
    hears every request leave the engine from the moment the spider is open."""
    pages = _PAGES.get(crawler)
    if pages is None:
        pages = _PAGES[crawler] = BrowserPages(concurrency, crawler.stats)

        def hook() -> None:
            on_request_left(crawler, pages.left)

        crawler.signals.connect(hook, signal=signals.spider_opened, weak=False)
    return pages
