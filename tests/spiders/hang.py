"""A spider with one download that hangs and one callback that hangs (lease expiry).

The origin decides what hangs: it holds the first download of ``/hang-download`` open, and
answers the first fetch of ``/hang-callback`` with ``HOLD``, whereupon the callback awaits
(without blocking the reactor) until the file named by ``-a release=PATH`` exists.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

from scrapy import Request, Spider


class HangSpider(Spider):
    name = "hang"

    def __init__(self, base: str = "", release: str = "", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.base, self.release = base, release

    async def start(self) -> Any:
        yield Request(f"{self.base}/hub")

    def parse(self, response: Any) -> Any:
        yield {"url": response.url}
        for href in response.css("a::attr(href)").getall():
            yield Request(response.urljoin(href), callback=self.parse_leaf)

    async def parse_leaf(self, response: Any) -> Any:
        if response.text.startswith("HOLD"):
            self.logger.info("Callback holds %s until released", response.url)
            while not os.path.exists(self.release):
                await asyncio.sleep(0.2)
            self.logger.info("Callback released %s", response.url)
        yield {"url": response.url}
