"""A spider that walks every way a request can end (delivery trap 5)."""

from __future__ import annotations

from typing import Any

from scrapy import Request, Spider


class PathsSpider(Spider):
    name = "paths"
    allowed_domains = ["127.0.0.1"]
    custom_settings = {"RETRY_TIMES": 2, "RETRY_HTTP_CODES": [500, 503]}

    def __init__(self, base: str = "", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.base = base

    async def start(self) -> Any:
        yield Request(f"{self.base}/hub")

    def parse(self, response: Any) -> Any:
        yield {"url": response.url, "kind": "hub"}
        for href in response.css("a::attr(href)").getall():
            url = response.urljoin(href)
            errback = self.on_error if "errback" in href else None
            yield Request(url, callback=self.parse_leaf, errback=errback)

    def parse_leaf(self, response: Any) -> Any:
        if response.url.endswith("/raise"):
            yield {"url": response.url, "kind": "before-raise"}
            raise ValueError("the callback failed on purpose")
        if response.url.endswith("/meta-copy"):
            yield response.follow("/meta-child", callback=self.parse_leaf, meta=response.meta)
        yield {"url": response.url, "kind": "leaf", "status": response.status}

    def on_error(self, failure: Any) -> Any:
        yield {"url": failure.request.url, "kind": "errback"}
