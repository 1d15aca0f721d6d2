"""The worker's browser pages (crawler.browser.pages): at most BROWSER_CONCURRENCY open, each
closed when its request leaves the engine, never handed to a retry after that; and the
scrapy-playwright method the handler overrides is still there."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable
from typing import Any

import pytest
from helpers import module_or_missing
from scrapy import Request, Spider, signals
from scrapy.statscollectors import MemoryStatsCollector
from scrapy.utils.test import get_crawler

from crawler.browser.pages import PAGE_META, BrowserPages, pages_of


class FakePage:
    """A Playwright page's is_closed, close and on: close fires the "close" listeners."""

    def __init__(self) -> None:
        self.listeners: dict[str, list[Callable[..., Any]]] = {}
        self.closed = False
        self.closes = 0

    def is_closed(self) -> bool:
        return self.closed

    async def close(self) -> None:
        self.closes += 1
        if not self.closed:
            self.closed = True
            self.fire("close")

    def on(self, event: str, f: Callable[..., Any]) -> None:
        self.listeners.setdefault(event, []).append(f)

    def fire(self, event: str) -> None:
        for listener in self.listeners.get(event, []):
            listener(self)


async def new_page() -> FakePage:
    return FakePage()


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def test_no_more_pages_than_the_concurrency_are_open_at_once() -> None:
    async def scenario() -> tuple[bool, bool]:
        pages = BrowserPages(2)
        first = await pages.open(Request("http://a/1"), new_page)
        await pages.open(Request("http://a/2"), new_page)
        third = asyncio.ensure_future(pages.open(Request("http://a/3"), new_page))
        await asyncio.sleep(0.01)
        waited = not third.done()
        await first.close()  # type: ignore[attr-defined]
        await asyncio.wait_for(third, 1)
        return waited, pages.open_pages == 2

    assert run(scenario()) == (True, True)


def test_a_page_that_could_not_be_created_frees_its_place() -> None:
    async def failing() -> FakePage:
        raise RuntimeError("target closed")

    async def scenario() -> int:
        pages = BrowserPages(1)
        with pytest.raises(RuntimeError):
            await pages.open(Request("http://a/"), failing)
        await asyncio.wait_for(pages.open(Request("http://a/"), new_page), 1)
        return pages.open_pages

    assert run(scenario()) == 1


def test_a_crashed_page_frees_its_place_once() -> None:
    async def scenario() -> bool:
        pages = BrowserPages(1)
        page = await pages.open(Request("http://a/"), new_page)
        page.fire("crash")  # type: ignore[attr-defined]
        await page.close()  # the crash already freed it: not a second time
        await pages.open(Request("http://a/2"), new_page)
        third = asyncio.ensure_future(pages.open(Request("http://a/3"), new_page))
        await asyncio.sleep(0.01)
        waiting = not third.done()  # a second release would have let it through
        third.cancel()
        return waiting and pages.open_pages == 1

    assert run(scenario())


def test_a_request_that_leaves_closes_its_open_pages_and_only_its_own() -> None:
    async def scenario() -> tuple[list[int], list[int], Any]:
        stats = MemoryStatsCollector(get_crawler(Spider))
        pages = BrowserPages(4, stats)
        mine, other, done = Request("http://a/1"), Request("http://a/2"), Request("http://a/3")
        kept = [await pages.open(mine, new_page), await pages.open(mine, new_page)]
        theirs = await pages.open(other, new_page)
        closed_by_callback = await pages.open(done, new_page)
        await closed_by_callback.close()
        pages.left(mine)
        pages.left(done)
        await pages.settle()
        return ([p.closes for p in kept], [theirs.closes, closed_by_callback.closes],  # type: ignore[attr-defined]
                stats.get_value("browser/pages_closed_after_request"))

    assert run(scenario()) == ([1, 1], [0, 1], 2)


def test_a_page_whose_request_left_is_not_handed_to_a_retry() -> None:
    async def scenario() -> tuple[bool, bool]:
        pages = BrowserPages(2)
        original = Request("http://a/", meta={"playwright_include_page": True})
        page = await pages.open(original, new_page)
        original.meta[PAGE_META] = page
        retry = original.replace(dont_filter=True)  # the meta is copied, the page with it
        unrelated = Request("http://a/", meta={PAGE_META: FakePage()})
        pages.left(original)
        pages.forget_released_page(retry)
        pages.forget_released_page(unrelated)
        await pages.settle()
        return PAGE_META in retry.meta, PAGE_META in unrelated.meta

    assert run(scenario()) == (False, True)


def test_a_closing_error_is_not_raised() -> None:
    class Gone(FakePage):
        async def close(self) -> None:
            raise RuntimeError("Target page, context or browser has been closed")

    async def scenario() -> None:
        pages = BrowserPages(1)
        request = Request("http://a/")
        async def gone() -> Gone:
            return Gone()

        await pages.open(request, gone)
        pages.left(request)
        await pages.settle()

    run(scenario())


class Slot:
    """What crawler._scrapy.on_request_left uses of Scrapy's engine slot."""

    def __init__(self) -> None:
        self.removed: list[Request] = []
        self.nextcall = None

    def remove_request(self, request: Request) -> None:
        self.removed.append(request)


class Engine:
    def __init__(self) -> None:
        self._slot = Slot()


def test_the_pages_hear_every_request_leave_from_the_moment_the_spider_opens() -> None:
    crawler = get_crawler(Spider)
    crawler.engine = Engine()  # type: ignore[assignment]
    pages = pages_of(crawler, 2)
    assert pages_of(crawler, 2) is pages  # one per crawler: the http and https handlers
    request = Request("http://a/")

    async def scenario() -> int:
        page = await pages.open(request, new_page)
        crawler.signals.send_catch_log(signals.spider_opened, spider=Spider("s"))
        crawler.engine._slot.remove_request(request)  # type: ignore[union-attr]
        await pages.settle()
        return page.closes  # type: ignore[attr-defined]

    assert run(scenario()) == 1
    assert crawler.engine._slot.removed == [request]  # type: ignore[union-attr]


def test_the_method_the_handler_overrides_is_still_scrapy_playwrights() -> None:
    handler = module_or_missing("scrapy_playwright.handler",
                                "scrapy-playwright (the browser extra)")
    base = handler.ScrapyPlaywrightDownloadHandler
    assert inspect.iscoroutinefunction(base._create_page)
    assert list(inspect.signature(base._create_page).parameters) == ["self", "request", "spider"]
    # the page a request asked for is in its meta under this key
    assert f'request.meta["{PAGE_META}"] = page' in inspect.getsource(base)
    from crawler.browser.handler import BrowserDownloadHandler

    assert issubclass(BrowserDownloadHandler, base)
    assert inspect.iscoroutinefunction(BrowserDownloadHandler.download_request)
