"""A spider that renders every page in the browser: ``playwright`` and a page method on each
request, the start request and every follow-up alike (so each one travels through the
frontier with its page method). One item per page, with the links the script added.
``-a contexts=N`` spreads the pages over N browser contexts (each has its own page limit
in scrapy-playwright; the worker's limit covers them all).

``scrapy runspider tests/spiders/jsrender.py -a base=http://127.0.0.1:PORT -s BROWSER_ENABLED=1``
"""

from __future__ import annotations

from typing import Any

from scrapy import Request, Spider
from scrapy.http import Response
from scrapy_playwright.page import PageMethod

READY = "#ready"  # the script of tests/servers/jssite.py adds it after the links


def rendered(url: str, context: str = "default") -> Request:
    """*url* to render, waiting for the script's links before the page is read."""
    return Request(url, meta={"playwright": True, "playwright_context": context,
                              "playwright_page_methods": [
                                  PageMethod("wait_for_selector", READY, state="attached")]})


class JsRenderSpider(Spider):
    name = "jsrender"
    allowed_domains = ["127.0.0.1"]

    def __init__(self, base: str = "", contexts: str = "1", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.base, self.contexts = base, int(contexts)
        self.count = 0

    async def start(self) -> Any:
        yield self.rendered(f"{self.base}/p/0")

    def rendered(self, url: str) -> Request:
        self.count += 1
        return rendered(url, "default" if self.contexts == 1 else f"c{self.count % self.contexts}")

    def parse(self, response: Response) -> Any:
        links = response.css("a::attr(href)").getall()
        yield {"url": response.url, "links": len(links), "flags": response.flags,
               "ready": bool(response.css(READY))}
        for href in links:
            yield self.rendered(response.urljoin(href))
