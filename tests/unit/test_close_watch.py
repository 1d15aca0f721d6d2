"""The close watch: what a slow close waits on."""

from __future__ import annotations

import asyncio
import logging
from types import SimpleNamespace

from scrapy import Request
from scrapy.utils.test import get_crawler
from twisted.internet.defer import Deferred

from crawler.frontier import closewatch
from crawler.frontier.closewatch import CloseWatch


def _closing_engine(held: list[Request]):
    crawler = get_crawler()
    # the engine's slot, downloader and scraper as read (test_scrapy_contract.py checks
    # these attributes against Scrapy's classes)
    engine = SimpleNamespace(downloader=SimpleNamespace(active=set(held[:1]), slots={
        "a.test": SimpleNamespace(queue=[], active=set(held[:1]), transferring=set())}),
        scraper=SimpleNamespace(slot=SimpleNamespace(active=set(), queue=[])))
    slot = SimpleNamespace(closing=None, inprogress=set(held))
    engine._slot = slot
    crawler.engine = engine
    return crawler, slot


async def _stuck(event: asyncio.Event) -> None:
    await event.wait()


def test_nothing_is_reported_until_the_close_has_waited(caplog) -> None:
    crawler, slot = _closing_engine([Request("http://a.test/held")])
    watch = CloseWatch(crawler, after=30)
    assert watch.check(now=100.0) is None  # not closing
    slot.closing = Deferred()
    assert watch.check(now=101.0) is None  # closing from now on
    assert watch.check(now=130.0) is None
    with caplog.at_level(logging.WARNING, logger="crawler.frontier.closewatch"):
        report = watch.check(now=131.5)
    assert report is not None and report in caplog.text
    assert report.startswith(
        "Closing for 30 s: 1 request(s) still in the engine: http://a.test/held; downloader: "
        "1 active (a.test: 0 queued, 1 active, 0 transferring); scraper: 0 active, 0 queued; "
        "tasks: ")
    assert watch.check(now=140.0) is None  # the next one after 30 s more
    assert watch.check(now=161.5) is not None


def test_the_report_names_where_each_pending_task_waits() -> None:
    crawler, slot = _closing_engine([])
    slot.closing = Deferred()

    async def watched() -> str | None:
        event = asyncio.Event()
        task = asyncio.ensure_future(_stuck(event))
        await asyncio.sleep(0)
        report = CloseWatch(crawler, after=0).check(now=1.0)
        event.set()
        await task
        return report

    report = asyncio.run(watched())
    assert report is not None and "0 request(s) still in the engine;" in report
    assert "Event.wait (locks.py:" in report and "< _stuck (test_close_watch.py:" in report


def test_the_watch_looks_by_itself_until_stopped(monkeypatch, caplog) -> None:
    monkeypatch.setattr(closewatch, "LOOK", 0.01)
    crawler, slot = _closing_engine([Request("http://a.test/held")])
    slot.closing = Deferred()
    watch = CloseWatch(crawler, after=0)

    async def watched() -> tuple[int, int]:
        watch.start()
        deadline = asyncio.get_running_loop().time() + 10  # two looks: 0.02 s, unless loaded
        while len(caplog.records) < 2 and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.01)
        watch.stop()
        running = len(caplog.records)
        await asyncio.sleep(0.05)
        return running, len(caplog.records) - running

    with caplog.at_level(logging.WARNING, logger="crawler.frontier.closewatch"):
        running, stopped = asyncio.run(watched())
    assert running >= 2 and "http://a.test/held" in caplog.records[0].getMessage()
    assert stopped == 0


def test_the_watch_ends_by_itself_once_the_close_is_over(monkeypatch) -> None:
    monkeypatch.setattr(closewatch, "LOOK", 0.01)
    crawler, slot = _closing_engine([])
    watch = CloseWatch(crawler, after=30)

    async def watched() -> tuple[bool, bool]:
        watch.start()
        task = watch._task
        assert task is not None
        await asyncio.sleep(0.05)
        running_before = not task.done()  # not closing yet: it keeps looking
        slot.closing = Deferred()
        await asyncio.sleep(0.05)
        crawler.engine._slot = None  # the engine's close is over
        await asyncio.sleep(0.05)
        return running_before, task.done() and not task.cancelled()

    assert asyncio.run(watched()) == (True, True)
