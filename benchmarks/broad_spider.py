"""The broad benchmark's spider: :class:`benchmarks.spider.BenchSpider` started from a file
of seeds, one URL a line (``-a seeds=PATH``), the way a broad crawl starts: every host's
``/``. Same parsing, items and name (``bench``) as the other benchmarks' spider."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from scrapy import Request, signals
from scrapy.crawler import Crawler
from scrapy.http import Response

from benchmarks.spider import BenchSpider


class BroadSpider(BenchSpider):
    """``-a seeds=PATH``: every URL of the file is a start request."""

    def __init__(self, seeds: str = "", **kwargs: Any) -> None:
        urls = Path(seeds).read_text().split() if seeds else []
        if not urls:
            raise ValueError("the broad spider needs -a seeds=PATH, a file of URLs")
        super().__init__(start_url=urls[0], **kwargs)
        self.seeds = urls

    async def start(self) -> AsyncIterator[Any]:
        for url in self.seeds:
            yield Request(url, callback=self.parse)


class TokenTrace:
    """``EXTENSIONS = {"benchmarks.broad_spider.TokenTrace": 0}`` with ``BENCH_TRACE_PATH``:
    per response (JSON lines), its URL, when its rate-limit token was taken (our workers'
    ``ratelimit`` meta, the limiter's clock) and when it reached Scrapy's downloader. Read
    against the origin's log, the time from the token to the origin (see
    :func:`benchmarks.broad_report.token_lag`). It records; it changes nothing."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.rows: list[dict[str, Any]] = []
        self.reached: dict[int, float] = {}

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> TokenTrace:
        trace = cls(Path(crawler.settings.get("BENCH_TRACE_PATH", "trace.jsonl")))
        crawler.signals.connect(trace.downloader, signals.request_reached_downloader)
        crawler.signals.connect(trace.response, signals.response_received)
        crawler.signals.connect(trace.closed, signals.spider_closed)
        return trace

    def downloader(self, request: Request) -> None:
        self.reached[id(request)] = time.time()

    def response(self, response: Response, request: Request) -> None:
        ticket = request.meta.get("ratelimit")
        taken = ticket.get("taken") if isinstance(ticket, dict) else None
        self.rows.append({"url": request.url, "taken": taken,
                          "reached": self.reached.pop(id(request), None)})

    def closed(self) -> None:
        self.path.write_text("".join(json.dumps(row) + "\n" for row in self.rows))
