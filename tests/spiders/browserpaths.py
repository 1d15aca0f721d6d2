"""Every way a rendered request can end, each keeping or not its page; at the end, which of
the pages the browser opened are still open (tests/integration/test_browser_render.py).

Every request names a page init callback, through which the spider sees each page the
browser opens for it (the label is the request's ``label`` meta). When the spider closes
(before the download handlers close the browser, which would close every page), it waits
up to 3 s for the pages to close, then writes ``{"open": [labels], "pages": {label: n},
"flags": {label: flags}}`` to the file named by ``-a report=PATH`` (``pages``: how many
distinct pages each label had; ``open``: the label of each page still open).

``scrapy runspider tests/spiders/browserpaths.py -a base=URL -a closed=URL -a report=PATH``
with ``tests/`` on ``PYTHONPATH`` (the downloader middleware and the bare handler below).
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from typing import Any

from scrapy import Request, Spider, signals
from scrapy.exceptions import IgnoreRequest
from scrapy.http import Response
from scrapy_playwright.handler import ScrapyPlaywrightDownloadHandler
from scrapy_playwright.page import PageMethod
from twisted.python.failure import Failure

KEEP = {"playwright_include_page": True}
NEVER = [PageMethod("wait_for_selector", "#never", timeout=300)]


class BarePlaywrightHandler(ScrapyPlaywrightDownloadHandler):
    """scrapy-playwright's handler as it is (the add-on keeps a project's own handler)."""


class DropOrRetry:
    """Drops the response of a ``drop`` request (as a middleware that refuses a page does);
    answers a ``retry`` request's first response with a copy of the request, as a retry does."""

    def process_response(self, request: Request, response: Response) -> Any:
        if request.meta.get("drop"):
            raise IgnoreRequest("dropped by a middleware")
        if request.meta.get("retry") and not request.meta.get("retried"):
            return request.replace(meta={**request.meta, "retried": True}, dont_filter=True)
        return response


class BrowserPathsSpider(Spider):
    name = "browserpaths"
    custom_settings = {"DOWNLOADER_MIDDLEWARES": {"spiders.browserpaths.DropOrRetry": 543},
                       "RETRY_ENABLED": False}

    def __init__(self, base: str = "", closed: str = "", report: str = "",
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.base, self.closed, self.report = base, closed, report
        self.pages: list[tuple[str, Any]] = []
        self.flags: dict[str, list[str]] = {}

    @classmethod
    def from_crawler(cls, crawler: Any, *args: Any, **kwargs: Any) -> BrowserPathsSpider:
        spider = super().from_crawler(crawler, *args, **kwargs)
        crawler.signals.connect(spider.write_report, signal=signals.spider_closed)
        return spider

    async def start(self) -> Any:
        base = self.base
        yield self.render("kept", f"{base}/p/1", KEEP)
        yield self.render("raises", f"{base}/p/2", KEEP, callback=self.fail)
        yield self.render("http_error", f"{base}/status/404", KEEP)  # HttpErrorMiddleware
        yield self.render("page_method_fails", f"{base}/p/3",
                          {**KEEP, "playwright_page_methods": NEVER}, errback=self.forget)
        yield self.render("page_method_fails_no_page", f"{base}/p/4",
                          {"playwright_page_methods": NEVER}, errback=self.forget)
        yield self.render("download_fails", f"{self.closed}/p/0", KEEP, errback=self.forget)
        yield self.render("dropped", f"{base}/p/5", {**KEEP, "drop": True})
        yield self.render("retried", f"{base}/p/6", {**KEEP, "retry": True})
        yield self.render("closed_by_callback", f"{base}/p/7", KEEP, callback=self.close_it)
        yield self.render("not_kept", f"{base}/p/8", {})
        yield Request(f"{base}/p/9", meta={"label": "no_browser"}, callback=self.parse)

    def render(self, label: str, url: str, meta: dict[str, Any], **kwargs: Any) -> Request:
        return Request(url, meta={"playwright": True, "label": label,
                                  "playwright_page_init_callback": self.seen, **meta},
                       callback=kwargs.get("callback", self.parse),
                       errback=kwargs.get("errback"), dont_filter=True)

    async def seen(self, page: Any, request: Request) -> None:
        self.pages.append((request.meta["label"], page))

    def parse(self, response: Response) -> Any:
        self.flags[response.meta["label"]] = list(response.flags)
        yield {"url": response.url}

    def fail(self, response: Response) -> Any:
        raise ValueError("a callback that raises")

    async def close_it(self, response: Response) -> Any:
        await response.meta["playwright_page"].close()
        yield {"url": response.url}

    def forget(self, failure: Failure) -> None:
        """An errback that does not close the page it was given."""

    async def write_report(self, spider: Spider) -> None:
        for _ in range(30):
            if all(page.is_closed() for _label, page in self.pages):
                break
            await asyncio.sleep(0.1)
        distinct = {id(page): (label, page) for label, page in self.pages}.values()
        report = {"open": sorted(label for label, page in distinct if not page.is_closed()),
                  "pages": Counter(label for label, _page in distinct),
                  "flags": self.flags}
        with open(self.report, "w", encoding="utf-8") as out:
            json.dump(report, out)
