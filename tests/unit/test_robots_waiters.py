"""Every request waiting for a host's robots.txt gets its parser (Scrapy's own middleware
gives every waiter after the first ``None`` under the asyncio reactor, which allows them)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from scrapy import Request, Spider
from scrapy.downloadermiddlewares import robotstxt
from scrapy.downloadermiddlewares.robotstxt import RobotsTxtMiddleware
from scrapy.exceptions import IgnoreRequest
from scrapy.http import TextResponse
from scrapy.utils.test import get_crawler
from twisted.internet.defer import Deferred

from crawler.middlewares.robots import SharedRobotsTxtMiddleware


class _Spider(Spider):
    name = "robots"


class _Engine:
    """Answers robots.txt once every waiter is in line."""

    def __init__(self) -> None:
        self.release = asyncio.Event()

    async def download_async(self, request: Request) -> TextResponse:
        await self.release.wait()
        return TextResponse(request.url, body=b"User-agent: *\nDisallow: /private/\n",
                            request=request)


def _as_future(d: Deferred[Any]) -> Any:  # what Scrapy does under the asyncio reactor
    return d.asFuture(asyncio.get_running_loop())


async def _forbidden(middleware_class: type[RobotsTxtMiddleware]) -> list[bool]:
    crawler = get_crawler(_Spider, {"ROBOTSTXT_OBEY": True})
    crawler.spider = crawler._create_spider()
    engine = crawler.engine = _Engine()  # type: ignore[assignment]
    middleware = middleware_class.from_crawler(crawler)

    async def forbidden(path: str) -> bool:
        try:
            await middleware.process_request(Request(f"http://a.test{path}"))
        except IgnoreRequest:
            return True
        return False

    waiters = [asyncio.ensure_future(forbidden(f"/private/{n}")) for n in range(4)]
    await asyncio.sleep(0.01)
    engine.release.set()
    return list(await asyncio.gather(*waiters))


def test_every_waiter_is_refused_what_robots_txt_forbids(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(robotstxt, "maybe_deferred_to_future", _as_future)
    assert asyncio.run(_forbidden(SharedRobotsTxtMiddleware)) == [True] * 4
    # Scrapy's own: the first two (the downloader and the first waiter) only. When this
    # fails, Scrapy has fixed it and the subclass can go.
    assert asyncio.run(_forbidden(RobotsTxtMiddleware)) == [True, True, False, False]
