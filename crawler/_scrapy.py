"""The one place that reaches into Scrapy's engine.

A lease ends when the engine lets go of its request. Scrapy signals no such
event, but every request the engine takes from the scheduler leaves through its
slot's ``remove_request`` once it is fully handled: the callback ran and its
items left the pipelines, or the download failed, was ignored or was replaced
by a redirect. This wraps that method. Supported: Scrapy 2.13 to 2.19.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from scrapy import Request
from scrapy.crawler import Crawler


def on_request_left(crawler: Crawler, callback: Callable[[Request], None]) -> Any:
    """Call *callback(request)* whenever the engine lets go of a request.

    Returns the engine slot, whose ``nextcall.schedule()`` wakes the engine up.
    """
    slot = getattr(crawler.engine, "_slot", None)
    if slot is None or not callable(getattr(slot, "remove_request", None)) or not hasattr(
        slot, "nextcall"
    ):
        raise RuntimeError("the Kafka frontier needs Scrapy 2.13-2.19 (engine slot not found)")
    original = slot.remove_request

    def remove_request(request: Request) -> None:
        original(request)
        callback(request)

    slot.remove_request = remove_request
    return slot
