"""MongoPipeline against a real mongod: keys, batching, durability, rejections, outages."""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import subprocess
import sys
import textwrap
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from pymongo import MongoClient
from pymongo.errors import AutoReconnect, BulkWriteError
from pymongo.results import BulkWriteResult
from scrapy import Request, Spider
from scrapy.exceptions import DropItem, NotConfigured
from scrapy.utils.misc import build_from_crawler
from scrapy.utils.test import get_crawler

from crawler.config import SettingError
from crawler.connection import ServiceUnavailable
from crawler.pipelines.mongo import MongoPipeline, retry_delay
from crawler.stack import Stack, free_port

Docs = Callable[[], list[dict[str, Any]]]


class ItemsSpider(Spider):
    name = "items"


def make_pipeline(uri: str, crawl_id: str, **settings: Any) -> MongoPipeline:
    crawler = get_crawler(ItemsSpider, {"MONGO_URI": uri, "CRAWL_ID": crawl_id, **settings})
    pipeline: MongoPipeline = build_from_crawler(MongoPipeline, crawler)
    pipeline.crawler = crawler  # type: ignore[attr-defined]  # for the tests' stats
    return pipeline


def stats(pipeline: MongoPipeline) -> dict[str, Any]:
    return pipeline.crawler.stats.get_stats()  # type: ignore[attr-defined, no-any-return]


def run(pipeline: MongoPipeline, body: Callable[[], Awaitable[None]]) -> None:
    """Open *pipeline*, run *body*, close it: all on one asyncio loop, no Twisted reactor."""

    async def main() -> None:
        await pipeline.open_spider()
        try:
            await body()
        finally:
            await pipeline.close_spider()

    asyncio.run(main())


def page(n: int, **fields: Any) -> dict[str, Any]:
    return {"url": f"https://example.com/page/{n}", "title": f"Page {n}", **fields}


@pytest.fixture
def mongo(mongo_uri: str) -> Iterator[MongoClient[dict[str, Any]]]:
    client: MongoClient[dict[str, Any]] = MongoClient(mongo_uri)
    yield client
    client.close()


@pytest.fixture
def docs(mongo: MongoClient[dict[str, Any]], crawl_id: str) -> Docs:
    return lambda: list(mongo["crawler"][crawl_id].find().sort("_id"))


def test_items_are_stored_under_their_url_fingerprint(
    mongo_uri: str, crawl_id: str, docs: Docs
) -> None:
    pipeline = make_pipeline(mongo_uri, crawl_id, MONGO_BATCH_SIZE=2)

    async def body() -> None:
        stored = await asyncio.gather(*(pipeline.process_item(page(n)) for n in range(3)))
        assert stored == [page(n) for n in range(3)]

    run(pipeline, body)
    fingerprint = pipeline.crawler.request_fingerprinter.fingerprint  # type: ignore[attr-defined]
    expected = {fingerprint(Request(page(n)["url"])).hex(): page(n) for n in range(3)}
    assert {d.pop("_id"): d for d in docs()} == expected
    assert stats(pipeline)["mongo/stored"] == 3
    assert stats(pipeline)["mongo/batches"] == 2  # one full batch of 2, one partial of 1


def test_process_item_returns_only_once_the_document_is_stored(
    mongo_uri: str, crawl_id: str, docs: Docs
) -> None:
    pipeline = make_pipeline(mongo_uri, crawl_id, MONGO_BATCH_SIZE=100, MONGO_BATCH_TIMEOUT=0.3)

    async def body() -> None:
        started = time.monotonic()
        task = asyncio.ensure_future(pipeline.process_item(page(1)))
        await asyncio.sleep(0.15)
        assert not task.done()  # the partial batch waits for its timeout
        assert docs() == []
        await task
        assert 0.3 <= time.monotonic() - started < 2
        assert [d["url"] for d in docs()] == [page(1)["url"]]  # right after it returned

    run(pipeline, body)


def test_a_full_batch_is_written_without_waiting_for_the_timeout(
    mongo_uri: str, crawl_id: str, docs: Docs
) -> None:
    pipeline = make_pipeline(mongo_uri, crawl_id, MONGO_BATCH_SIZE=5, MONGO_BATCH_TIMEOUT=60)

    async def body() -> None:
        items = [pipeline.process_item(page(n)) for n in range(5)]
        await asyncio.wait_for(asyncio.gather(*items), timeout=5)
        assert len(docs()) == 5

    run(pipeline, body)
    assert stats(pipeline)["mongo/batches"] == 1


def test_close_spider_writes_the_partial_batch(mongo_uri: str, crawl_id: str, docs: Docs) -> None:
    pipeline = make_pipeline(mongo_uri, crawl_id, MONGO_BATCH_SIZE=100, MONGO_BATCH_TIMEOUT=60)

    async def main() -> None:
        await pipeline.open_spider()
        tasks = [asyncio.ensure_future(pipeline.process_item(page(n))) for n in range(3)]
        await asyncio.sleep(0)
        await asyncio.wait_for(pipeline.close_spider(), timeout=5)
        assert all(task.done() and task.exception() is None for task in tasks)

    asyncio.run(main())
    assert len(docs()) == 3


def test_upserts_are_idempotent_and_the_latest_content_wins(
    mongo_uri: str, crawl_id: str, docs: Docs
) -> None:
    pipeline = make_pipeline(mongo_uri, crawl_id, MONGO_BATCH_SIZE=3, MONGO_BATCH_TIMEOUT=0.05)

    async def body() -> None:
        for version in (1, 2):  # a redelivered page, processed again later
            await asyncio.gather(*(pipeline.process_item(page(n, v=version)) for n in range(4)))
        # concurrently: pages 0-2 in three consecutive batches, page 3 twice in one batch
        await asyncio.gather(*(pipeline.process_item(page(i % 3, v=10 + i)) for i in range(9)))
        await asyncio.gather(pipeline.process_item(page(3, v=20)),
                             pipeline.process_item(page(3, v=21)))

    run(pipeline, body)
    assert sorted((d["url"], d["v"]) for d in docs()) == [
        (page(0)["url"], 16), (page(1)["url"], 17), (page(2)["url"], 18), (page(3)["url"], 21)]
    again = make_pipeline(mongo_uri, crawl_id)  # another worker processes a page again

    async def redelivery() -> None:
        await again.process_item(page(1, v=2))

    run(again, redelivery)
    assert len(docs()) == 4


def test_indexes_exist_after_open(mongo: MongoClient[dict[str, Any]], mongo_uri: str,
                                  crawl_id: str) -> None:
    pipeline = make_pipeline(mongo_uri, crawl_id, MONGO_INDEXES=["url", "fetched_at", "site"])

    async def body() -> None:
        indexes = mongo["crawler"][crawl_id].index_information()
        for name in ("url", "fetched_at", "site"):
            assert indexes[f"{name}_1"]["key"] == [(name, 1)]
            assert not indexes[f"{name}_1"].get("unique")

    run(pipeline, body)


def test_an_item_without_its_key_field_is_dropped(mongo_uri: str, crawl_id: str,
                                                  docs: Docs) -> None:
    pipeline = make_pipeline(mongo_uri, crawl_id)

    async def body() -> None:
        with pytest.raises(DropItem, match=r"no url.*MONGO_KEY_FIELDS"):
            await pipeline.process_item({"title": "no url"})
        with pytest.raises(DropItem, match="not a valid URL"):
            await pipeline.process_item({"url": "not a url"})

    run(pipeline, body)
    assert docs() == []


def test_custom_key_fields(mongo_uri: str, crawl_id: str, docs: Docs) -> None:
    pipeline = make_pipeline(mongo_uri, crawl_id, MONGO_KEY_FIELDS="site,sku")

    async def body() -> None:
        for url in ("https://a.example/1", "https://a.example/1?ref=x"):
            await pipeline.process_item({"url": url, "site": "a", "sku": 7})
        with pytest.raises(DropItem, match="no sku"):
            await pipeline.process_item({"url": "https://a.example/2", "site": "a"})

    run(pipeline, body)
    key = hashlib.sha1(json.dumps({"site": "a", "sku": 7}, separators=(",", ":")).encode())
    assert [(d["_id"], d["url"]) for d in docs()] == [(key.hexdigest(), "https://a.example/1?ref=x")]


def test_rejected_documents_are_dropped_and_the_rest_of_the_batch_is_stored(
    mongo: MongoClient[dict[str, Any]], mongo_uri: str, crawl_id: str, docs: Docs
) -> None:
    mongo["crawler"].create_collection(  # the server rejects a price that is not a number
        crawl_id, validator={"$jsonSchema": {"properties": {"price": {"bsonType": "number"}}}})
    # too large: dropped before batching; a bad price: rejected by the server in the batch
    pipeline = make_pipeline(mongo_uri, crawl_id, MONGO_BATCH_SIZE=3, MONGO_BATCH_TIMEOUT=60)
    items = [page(0), page(1, body="x" * (17 * 1024 * 1024)), page(2, price="n/a"), page(3)]

    async def body() -> None:
        results = await asyncio.gather(*(pipeline.process_item(i) for i in items),
                                       return_exceptions=True)
        assert results[0] == items[0] and results[3] == items[3]
        assert isinstance(results[1], DropItem) and "over the limit" in str(results[1])
        assert isinstance(results[2], DropItem) and "validation" in str(results[2]).lower()
        assert "code 121" in str(results[2])

    run(pipeline, body)
    assert sorted(d["url"] for d in docs()) == [page(0)["url"], page(3)["url"]]
    assert stats(pipeline)["mongo/rejected"] == 2
    assert stats(pipeline)["mongo/stored"] == 2


def test_an_unreachable_mongo_uri_fails_open_quickly(crawl_id: str) -> None:
    port = free_port()
    uri = f"mongodb://user:secret@127.0.0.1:{port}/"
    pipeline = make_pipeline(uri, crawl_id, CONNECT_TIMEOUT=1)
    started = time.monotonic()
    with pytest.raises(ServiceUnavailable) as error:
        asyncio.run(pipeline.open_spider())
    assert time.monotonic() - started < 5
    assert "MONGO_URI" in str(error.value) and f"127.0.0.1:{port}" in str(error.value)
    assert "secret" not in str(error.value)


@pytest.mark.parametrize(
    ("name", "value"),
    [("MONGO_BATCH_SIZE", 0), ("MONGO_BATCH_SIZE", "abc"), ("MONGO_BATCH_TIMEOUT", 0),
     ("MONGO_WRITE_CONCERN", "most"), ("MONGO_WRITE_CONCERN", -1), ("MONGO_KEY_FIELDS", []),
     ("MONGO_RETRY_BACKOFF", 0), ("MONGO_DATABASE", "a.b"), ("CONNECT_TIMEOUT", "soon")],
)
def test_a_bad_setting_is_named(crawl_id: str, name: str, value: Any) -> None:
    with pytest.raises(SettingError, match=name) as error:
        make_pipeline("mongodb://127.0.0.1:1/", crawl_id, **{name: value})
    assert error.value.setting == name


def test_write_concern_accepts_majority_and_numbers(crawl_id: str) -> None:
    uri = "mongodb://127.0.0.1:1/"
    assert make_pipeline(uri, crawl_id, MONGO_WRITE_CONCERN="Majority").write_concern == "majority"
    assert make_pipeline(uri, crawl_id, MONGO_WRITE_CONCERN="2").write_concern == 2
    with pytest.raises(SettingError, match="MONGO_WRITE_CONCERN"):
        make_pipeline(uri, crawl_id, MONGO_WRITE_CONCERN=0)  # with MONGO_JOURNAL=True
    assert make_pipeline(uri, crawl_id, MONGO_WRITE_CONCERN=0, MONGO_JOURNAL=False).journal is False


def test_no_mongo_uri_means_not_configured(monkeypatch: pytest.MonkeyPatch, crawl_id: str) -> None:
    monkeypatch.delenv("MONGO_URI", raising=False)
    with pytest.raises(NotConfigured):
        make_pipeline("", crawl_id)


def test_retry_delay_doubles_up_to_the_cap() -> None:
    assert [retry_delay(n, 0.5, 3.0) for n in range(5)] == [0.5, 1.0, 2.0, 3.0, 3.0]
    assert retry_delay(10_000, 0.5, 30.0) == 30.0


def test_an_outage_stalls_items_and_stores_each_exactly_once(
    tmp_path: Path, crawl_id: str, caplog: pytest.LogCaptureFixture
) -> None:
    stack = Stack(tmp_path / "stack")
    uri = stack.start(["mongo"])["MONGO_URI"]
    pipeline = make_pipeline(uri, crawl_id, MONGO_BATCH_SIZE=10, MONGO_BATCH_TIMEOUT=0.05,
                             CONNECT_TIMEOUT=1, MONGO_RETRY_BACKOFF=0.1,
                             MONGO_RETRY_BACKOFF_MAX=0.5)
    caplog.set_level(logging.INFO, logger="crawler.pipelines.mongo")

    async def body() -> None:
        await asyncio.gather(*(pipeline.process_item(page(n)) for n in range(5)))
        await asyncio.to_thread(stack.stop_service, "mongo", kill=True)
        tasks = [asyncio.ensure_future(pipeline.process_item(page(n))) for n in range(3, 28)]
        await asyncio.sleep(2)
        assert not any(task.done() for task in tasks)  # stalled, not dropped
        await asyncio.to_thread(stack.start_service, "mongo")
        await asyncio.wait_for(asyncio.gather(*tasks), timeout=30)

    try:
        run(pipeline, body)
        with MongoClient(uri) as client:
            urls = [d["url"] for d in client["crawler"][crawl_id].find()]
    finally:
        stack.stop()
    assert sorted(urls) == sorted(page(n)["url"] for n in range(28))
    assert stats(pipeline)["mongo/retries"] >= 1
    levels = [(r.levelno, r.getMessage()) for r in caplog.records]
    assert any(level == logging.WARNING and "retrying" in msg for level, msg in levels)
    assert any(level == logging.INFO and "succeed again" in msg for level, msg in levels)


def test_a_real_crawl_stores_its_items(tmp_path: Path, mongo_uri: str, crawl_id: str,
                                       docs: Docs) -> None:
    """Under Scrapy's asyncio reactor, through CleanPipeline, without deprecation warnings."""
    spider = tmp_path / "spider.py"
    spider.write_text(textwrap.dedent("""
        import scrapy

        class PagesSpider(scrapy.Spider):
            name = "pages"
            start_urls = ["data:,hello"]

            def parse(self, response):
                for n in range(30):
                    yield {"url": f"https://example.com/{n}", "title": f"  Page \\n {n} "}
    """))
    pipelines = {"crawler.pipelines.clean.CleanPipeline": 100,
                 "crawler.pipelines.mongo.MongoPipeline": 800}
    command = [sys.executable, "-W", "error::scrapy.exceptions.ScrapyDeprecationWarning",
               "-m", "scrapy", "runspider", str(spider), "-s", f"MONGO_URI={mongo_uri}",
               "-s", f"CRAWL_ID={crawl_id}", "-s", f"ITEM_PIPELINES={json.dumps(pipelines)}",
               "-s", "MONGO_BATCH_SIZE=8", "-s", "LOG_LEVEL=INFO"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "'mongo/stored': 30" in result.stderr, result.stderr[-3000:]
    assert "Traceback" not in result.stderr
    assert sorted(d["title"] for d in docs()) == sorted(f"Page {n}" for n in range(30))


class ScriptedCollection:
    """Stands in for the collection: each bulk_write raises or answers from a script."""

    def __init__(self, script: list[BaseException | None]) -> None:
        self.script, self.calls = script, []  # type: list[BaseException | None], list[list[str]]

    async def bulk_write(self, ops: list[Any], ordered: bool) -> Any:
        assert ordered is False
        self.calls.append([op._filter["_id"] for op in ops])
        outcome = self.script.pop(0)
        if outcome is not None:
            raise outcome
        return BulkWriteResult({"nUpserted": len(ops), "nMatched": 0}, acknowledged=True)


def bulk_error(write_errors: list[dict[str, Any]], *, upserted: int = 0,
               concern: bool = False) -> BulkWriteError:
    timeout = {"code": 64, "errmsg": "waiting for replication timed out"}
    return BulkWriteError({"writeErrors": write_errors, "nUpserted": upserted, "nMatched": 0,
                           "writeConcernErrors": [timeout] if concern else []})


def test_transient_and_permanent_failures_of_one_batch(crawl_id: str) -> None:
    """Retries keep the positions of a shrinking batch straight; only permanent errors drop."""
    pipeline = make_pipeline("mongodb://127.0.0.1:1/", crawl_id, MONGO_BATCH_SIZE=4,
                             MONGO_RETRY_BACKOFF=0.01, MONGO_RETRY_BACKOFF_MAX=0.01)
    collection = ScriptedCollection([
        AutoReconnect("connection reset"),
        bulk_error([{"index": 1, "code": 91, "errmsg": "shutting down"},
                    {"index": 2, "code": 121, "errmsg": "Document failed validation"}],
                   upserted=2),  # 0 and 3 stored, 1 to retry, 2 rejected
        bulk_error([{"index": 0, "code": 11000, "errmsg": "E11000 dup", "keyPattern": {"_id": 1}}],
                   concern=True),  # retrying 1: an upsert race, and the write concern timed out
        None,
    ])
    pipeline._collection = collection  # type: ignore[assignment]

    async def main() -> list[Any]:
        return await asyncio.gather(*(pipeline.process_item(page(n)) for n in range(4)),
                                    return_exceptions=True)

    results = asyncio.run(main())
    keys = collection.calls[0]
    assert collection.calls == [keys, keys, [keys[1]], [keys[1]]]
    assert results[0] == page(0) and results[1] == page(1) and results[3] == page(3)
    assert isinstance(results[2], DropItem) and "code 121" in str(results[2])
    assert stats(pipeline)["mongo/retries"] == 3
    assert stats(pipeline)["mongo/rejected"] == 1
    assert stats(pipeline)["mongo/stored"] == 3
    assert stats(pipeline)["mongo/batches"] == 1
