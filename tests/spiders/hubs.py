"""A spider whose links to the site's front page carry ``recrawl_after`` (seconds, the
``interval`` argument): the front page is fetched again each interval, the rest once."""

from __future__ import annotations

from typing import Any

from scrapy import Request, Spider


class HubsSpider(Spider):
    name = "hubs"
    allowed_domains = ["127.0.0.1"]

    def __init__(self, base: str = "", interval: str = "1", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.base, self.interval = base, float(interval)

    async def start(self) -> Any:
        yield Request(f"{self.base}/", meta={"recrawl_after": self.interval})

    def parse(self, response: Any) -> Any:
        yield {"url": response.url, "status": response.status}
        for href in response.css("a::attr(href)").getall():
            url = response.urljoin(href).split("#")[0]
            if not url.startswith(self.base):
                continue
            meta = {"recrawl_after": self.interval} if url == f"{self.base}/" else {}
            yield Request(url, meta=meta)
