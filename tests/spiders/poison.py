"""A spider whose start page also yields one request no broker will take (2 MB of meta) and
one no record can hold (a meta value of a type that cannot travel: a threading.Event)."""

from __future__ import annotations

import threading
from typing import Any

from scrapy import Request, Spider

BIG_META_BYTES = 2 * 1024 * 1024  # twice kafka-python's max_request_size (1 MiB)


class PoisonSpider(Spider):
    name = "poison"
    allowed_domains = ["127.0.0.1"]

    def __init__(self, base: str = "", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.base = base

    async def start(self) -> Any:
        yield Request(f"{self.base}/")

    def parse(self, response: Any) -> Any:
        yield {"url": response.url}
        if response.url == f"{self.base}/":
            yield Request(f"{self.base}/too-big", meta={"blob": "x" * BIG_META_BYTES})
            yield Request(f"{self.base}/unencodable", meta={"depth": 1, "done": threading.Event()})
        for href in response.css("a::attr(href)").getall():
            yield Request(response.urljoin(href).split("#")[0])
