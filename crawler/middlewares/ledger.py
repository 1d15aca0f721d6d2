"""Tells the crawl ledger why a download did not give a response (``docs/ledger.md``).

Scrapy calls every downloader middleware's ``process_exception`` for an exception raised
by the download or by another middleware's ``process_request`` (robots.txt, the offsite
filter), innermost first: at order 990 this one hears each exception before the retry
middleware decides. A retry that follows has the last word.
"""

from __future__ import annotations

from typing import Self

from scrapy import Request
from scrapy.crawler import Crawler

from crawler.ledger import outcomes


class LedgerMiddleware:
    """Sends :data:`~crawler.ledger.outcomes.OUTCOME` for failed and ignored downloads."""

    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        return cls(crawler)

    def process_exception(self, request: Request, exception: Exception) -> None:
        outcomes.tell(self.crawler, request, outcomes.of_exception(exception))
