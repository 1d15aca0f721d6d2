"""A dropped item is kept once per page and item, however often its page is processed: the
rejected document's ``_id`` ignores fields that change from one fetch to the next."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from scrapy.http import HtmlResponse
from scrapy.utils.test import get_crawler

from crawler.storage.rejected import Rejected, RejectedItems, identity

pytestmark = pytest.mark.unit


class _Store:
    def __init__(self) -> None:
        self.documents: list[dict[str, Any]] = []

    async def record(self, rejected: Rejected) -> bool:
        self.documents.append(rejected.document())
        return True


def _dropped(extension: RejectedItems, item: dict[str, Any], page: str) -> None:
    response = HtmlResponse(page, body=b"<html></html>")
    asyncio.run(extension.item_dropped(item, response, ValueError("bad title")))


def _extension(**settings: Any) -> tuple[RejectedItems, _Store]:
    crawler = get_crawler(settings_dict={"MONGO_URI": "mongodb://127.0.0.1:1", **settings})
    extension = RejectedItems.from_crawler(crawler)
    store = _Store()
    extension.store = store  # type: ignore[assignment]
    return extension, store


def test_a_redelivered_page_replaces_its_rejected_item_despite_a_new_timestamp() -> None:
    extension, store = _extension()
    page = "http://127.0.0.1/odd"
    _dropped(extension, {"url": page, "fetched_at": "2026-12-02T10:00:00"}, page)
    _dropped(extension, {"url": page, "fetched_at": "2026-12-02T10:05:00"}, page)
    _dropped(extension, {"url": page + "/other", "fetched_at": "2026-12-02T10:05:00"}, page)
    ids = [document["_id"] for document in store.documents]
    assert ids[0] == ids[1] != ids[2]


def test_the_key_fields_are_the_storage_ones() -> None:
    extension, store = _extension(MONGO_KEY_FIELDS="sku")
    page = "http://127.0.0.1/list"
    _dropped(extension, {"url": page, "sku": "a", "seen": 1}, page)
    _dropped(extension, {"url": page, "sku": "a", "seen": 2}, page)
    _dropped(extension, {"url": page, "sku": "b", "seen": 2}, page)
    ids = [document["_id"] for document in store.documents]
    assert ids[0] == ids[1] != ids[2]


def test_an_item_without_its_key_fields_is_keyed_by_its_whole_preview() -> None:
    assert identity({"title": "x"}, ["url"]) is None
    assert identity({"url": ""}, ["url"]) is None
    assert identity(object(), ["url"]) is None
    a = Rejected("http://h/p", "no url", '{"title": "x"}', False, "s").document()
    b = Rejected("http://h/p", "no url", '{"title": "y"}', False, "s").document()
    assert a["_id"] != b["_id"]
