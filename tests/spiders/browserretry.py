"""A spider that renders each of its ``-a urls`` (comma-separated) in the browser once and
writes, at its close, what became of each: the status it ended with or the error that failed
it, and how many retries it took; with the retry stats.

``scrapy runspider tests/spiders/browserretry.py -a urls=URL,URL -a report=PATH
-s BROWSER_ENABLED=True``
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from scrapy import Request, Spider, signals
from scrapy.crawler import Crawler
from scrapy.http import Response
from twisted.python.failure import Failure

STATS = ("retry/class/network", "retry/exhausted/network", "retry/max_reached")


class BrowserRetrySpider(Spider):
    name = "browserretry"

    def __init__(self, urls: str = "", report: str = "", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.urls, self.report = urls.split(","), report
        self.outcomes: dict[str, dict[str, Any]] = {}

    @classmethod
    def from_crawler(cls, crawler: Crawler, *args: Any, **kwargs: Any) -> BrowserRetrySpider:
        spider: BrowserRetrySpider = super().from_crawler(crawler, *args, **kwargs)
        crawler.signals.connect(spider.write_report, signal=signals.spider_closed)
        return spider

    async def start(self) -> Any:
        for url in self.urls:
            yield Request(url, meta={"playwright": True}, errback=self.failed, dont_filter=True)

    def parse(self, response: Response) -> None:
        self.outcomes[response.request.url] = {  # type: ignore[union-attr]
            "status": response.status, "retries": response.meta.get("retry_times", 0)}

    def failed(self, failure: Failure) -> None:
        request = failure.request  # type: ignore[attr-defined]
        self.outcomes[request.url] = {"error": type(failure.value).__name__,
                                      "retries": request.meta.get("retry_times", 0)}

    def write_report(self) -> None:
        stats = self.crawler.stats.get_stats() if self.crawler.stats else {}
        report = {"outcomes": self.outcomes, "stats": {k: stats.get(k, 0) for k in STATS}}
        Path(self.report).write_text(json.dumps(report))
