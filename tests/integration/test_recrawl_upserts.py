"""A page fetched again updates its one document in MongoDB: content_hash, previous_hash,
changed and changed_at, correct when a write or a fetch is delivered twice or late."""

from __future__ import annotations

import asyncio
from typing import Any

from pymongo import MongoClient
from support.mongo import make_pipeline


def fetch(at: str, body: str) -> dict[str, Any]:
    return {"url": "https://example.com/p", "fetched_at": at, "content_hash": body}


def test_recrawled_pages_say_whether_they_changed(mongo_uri: str, crawl_id: str) -> None:
    stored: list[dict[str, Any]] = []

    async def main() -> None:
        pipeline = make_pipeline(mongo_uri, crawl_id, MONGO_BATCH_TIMEOUT=0.01)
        await pipeline.open_spider()
        with MongoClient(mongo_uri) as client:
            collection = client["crawler"][crawl_id]
            for item in (fetch("2025-01-01T00:00:00.000001+00:00", "h1"),  # first fetch
                         fetch("2025-01-01T00:00:00.000001+00:00", "h1"),  # the write again
                         fetch("2025-01-02T00:00:00.000001+00:00", "h1"),  # same content
                         fetch("2025-01-03T00:00:00.000001+00:00", "h2"),  # changed
                         fetch("2025-01-03T00:00:00.000001+00:00", "h2"),  # the write again
                         fetch("2025-01-02T12:00:00.000001+00:00", "h9"),  # an older fetch, late
                         fetch("2025-01-04T00:00:00.000001+00:00", "h2")):  # a duplicate fetch
                await pipeline.process_item(item)
                stored.append(collection.find_one({}, {"_id": 0}) or {})
                assert collection.count_documents({}) == 1
        await pipeline.close_spider()

    asyncio.run(main())
    summary = [(d["content_hash"], d["previous_hash"], d["changed"], d["changed_at"][:10])
               for d in stored]
    assert summary == [
        ("h1", None, False, "2025-01-01"),
        ("h1", None, False, "2025-01-01"),
        ("h1", "h1", False, "2025-01-01"),
        ("h2", "h1", True, "2025-01-03"),
        ("h2", "h1", True, "2025-01-03"),
        ("h2", "h1", True, "2025-01-03"),
        ("h2", "h2", False, "2025-01-03"),
    ]
    assert stored[-1]["fetched_at"].startswith("2025-01-04")
