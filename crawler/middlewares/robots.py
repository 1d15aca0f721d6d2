"""Scrapy's robots.txt middleware, with every waiter given the host's parser.

In Scrapy 2.13 to 2.19, the requests that reach ``RobotsTxtMiddleware`` for a host while its
robots.txt is still downloading wait on one shared Deferred. Under the asyncio reactor each
waiter turns it into a future (``Deferred.asFuture``), whose callback returns ``None``: the
first waiter gets the parser and every later one ``None``, which allows its request. The
second, third... request to a new host is fetched whatever robots.txt says; in a distributed
crawl, where a worker takes many requests of a host at once, that is most of them (seen in
tests/e2e/test_ledger.py: a forbidden page fetched one run in three). Once the Deferred has
fired the middleware keeps the parser itself, so this one reads it there.
"""

from __future__ import annotations

from typing import Any

from scrapy import Request
from scrapy.downloadermiddlewares.robotstxt import RobotsTxtMiddleware

from crawler._scrapy import robots_parser_of


class SharedRobotsTxtMiddleware(RobotsTxtMiddleware):
    async def robot_parser(self, request: Request) -> Any:
        parser = await super().robot_parser(request)
        if parser is None:  # perhaps a late waiter given None: ask the middleware's store
            return robots_parser_of(self, request)
        return parser
