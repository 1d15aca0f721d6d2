"""What components tell the status index: a link dropped before the frontier, an item stored.

Both are Scrapy signals sent with ``send_catch_log``; with the index off nothing listens.
"""

from __future__ import annotations

from typing import Any

from scrapy import Request

#: signal ``(request, reason)``: *request*, a link or a start request, was dropped before it
#: reached the frontier (``offsite``, ``path_repeats``, ``depth``)
URL_FILTERED = object()
#: signal ``(item, collection, key)``: *item* is stored as document *key* of *collection*
ITEM_STORED = object()


def filtered(crawler: Any, request: Request, reason: str) -> None:
    """Tell the status index that *request* was dropped for *reason*."""
    crawler.signals.send_catch_log(URL_FILTERED, request=request, reason=reason)
