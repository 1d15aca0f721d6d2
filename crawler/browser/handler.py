"""The download handler of ``http`` and ``https`` with ``BROWSER_ENABLED``: scrapy-playwright's.

A request with ``meta["playwright"]`` is rendered in Chromium; any other goes through
Scrapy's HTTP/1.1 handler, which scrapy-playwright's handler extends. What this subclass
adds (:mod:`crawler.browser.pages`): the per-worker page limit, and every page closed once
its request has left the engine.

It overrides one private method of scrapy-playwright, ``_create_page(request, spider)``,
through which every page of a request is opened;
``tests/unit/test_browser_pages.py`` checks it is still there. Without the ``browser``
extra the module imports (the wheel imports every module) but the handler refuses to start.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from scrapy import Request, Spider
from scrapy.crawler import Crawler

from crawler.browser.pages import pages_of
from crawler.config import readers as config
from crawler.config.readers import SettingError

if TYPE_CHECKING:
    from scrapy_playwright.handler import ScrapyPlaywrightDownloadHandler as Base
else:
    try:
        from scrapy_playwright.handler import ScrapyPlaywrightDownloadHandler as Base
    except ImportError:  # the add-on names the extra before it gets here

        class Base:
            def __init__(self, crawler: Crawler) -> None:
                raise SettingError(
                    "BROWSER_ENABLED",
                    "needs scrapy-playwright: pip install 'scrapy-fleet[browser]'")

try:
    from scrapy_playwright.handler import _SCRAPY_ASYNC_API
except ImportError:
    _SCRAPY_ASYNC_API = True


class BrowserDownloadHandler(Base):
    """scrapy-playwright's handler, with the worker's page limit and page closing."""

    def __init__(self, crawler: Crawler) -> None:
        super().__init__(crawler)
        concurrency = config.get_int(crawler.settings, "BROWSER_CONCURRENCY", minimum=1)
        self.pages = pages_of(crawler, concurrency)  # shared with the other scheme's handler

    async def _create_page(self, request: Request, spider: Spider) -> Any:
        create = super()._create_page
        return await self.pages.open(request, lambda: create(request, spider))

    if _SCRAPY_ASYNC_API:

        async def download_request(self, request: Request) -> Any:
            self.pages.forget_released_page(request)
            return await super().download_request(request)

        async def close(self) -> None:
            await self.pages.settle()  # the pages being closed, before their contexts are
            await super().close()

    else:  # Scrapy 2.13

        def download_request(  # type: ignore[misc]  # its own signature then
                self, request: Request, spider: Spider) -> Any:
            self.pages.forget_released_page(request)
            return super().download_request(request, spider)
