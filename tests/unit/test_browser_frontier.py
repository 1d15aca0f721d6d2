"""A request rendered in the browser travels through the frontier whole: one worker's
callback yields it with its page methods and context, another worker takes it from the log
(the in-memory transport) with the same meta, and the page that yielded it is acknowledged
only once the follow-up is in the log and the page has left the engine."""

from __future__ import annotations

import asyncio

from conftest import REQUESTS, MakeWorker, put, settle
from helpers import module_or_missing
from scrapy import Request

PageMethod = module_or_missing("scrapy_playwright.page",
                               "scrapy-playwright (the browser extra)").PageMethod


def rendered(url: str) -> Request:
    return Request(url, meta={
        "playwright": True, "playwright_context": "shop",
        "playwright_context_kwargs": {"java_script_enabled": True, "locale": "fr-FR"},
        "playwright_page_methods": [
            PageMethod("wait_for_selector", "#ready", state="attached", timeout=5000),
            PageMethod("evaluate", "window.scrollBy(0, document.body.scrollHeight)"),
            PageMethod("screenshot", full_page=True, type="png")]})


def test_a_playwright_request_reaches_another_worker_with_its_page_methods(
        make_worker: MakeWorker) -> None:
    async def scenario() -> Request:
        a = make_worker(assign=[(REQUESTS, 0)])
        put(a.log, "https://shop.test/", partition=0, meta={"playwright": True})
        assert a.consumer.poll() == 1
        [page] = a.take()
        assert page.meta["playwright"] is True
        a.scraped(page)
        assert a.scheduler.enqueue_request(rendered("https://shop.test/list?page=2"))
        await settle()
        a.left(page)  # the callback ran; its follow-up is not in the log yet
        assert a.committed(REQUESTS, 0) == 0
        a.producer.acknowledge()
        assert a.committed(REQUESTS, 0) == 1
        b = make_worker(log=a.log)  # from the committed offsets, wherever the URL's key went
        b.consumer.poll()
        [taken] = b.take()
        return taken

    taken = asyncio.run(scenario())
    sent = rendered("https://shop.test/list?page=2")
    assert taken.url == sent.url
    for key in ("playwright", "playwright_context", "playwright_context_kwargs"):
        assert taken.meta[key] == sent.meta[key], key
    methods = taken.meta["playwright_page_methods"]
    assert all(type(m) is PageMethod for m in methods), methods
    assert [(m.method, m.args, m.kwargs) for m in methods] == [
        (m.method, m.args, m.kwargs) for m in sent.meta["playwright_page_methods"]]
