"""MongoPipeline against a real mongod: keys, batching, durability, rejections, outages.

The failure tests at the end inject real errors into a real single-node replica set with the
server's ``failCommand`` fail point (:mod:`tests.mongo_failpoints`).
"""

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
from scrapy import Request
from scrapy.exceptions import DropItem
from support.mongo import make_pipeline

from crawler.connections.clients import ServiceUnavailable
from crawler.localstack.stack import Stack
from crawler.pipelines.mongo import MongoPipeline
from tests.mongo_failpoints import ReplicaSet, until

Docs = Callable[[], list[dict[str, Any]]]


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


# --- failures injected into a real replica set ---------------------------------------------

# How long a "hanging" command blocks: longer than the test's timeouts, and short, because
# switching a fail point off waits until the commands blocked in it are released.
HANG_MS = 5000

@pytest.fixture(scope="module")
def replica(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ReplicaSet]:
    """A single-node replica set with test commands on: w=majority as in production."""
    replica_set = ReplicaSet(tmp_path_factory.mktemp("replica"))
    try:
        replica_set.start()
        yield replica_set
    finally:
        replica_set.stop()


@pytest.fixture
def failpoints(replica: ReplicaSet) -> Iterator[ReplicaSet]:
    """The replica set, with ``failCommand`` switched off again after the test."""
    yield replica
    replica.fail("off")


def stored_urls(replica: ReplicaSet, crawl_id: str) -> list[str]:
    assert replica.admin is not None
    return sorted(d["url"] for d in replica.admin["crawler"][crawl_id].find())


def started(pipeline: MongoPipeline, items: list[dict[str, Any]]) -> list[asyncio.Task[Any]]:
    return [asyncio.ensure_future(pipeline.process_item(item)) for item in items]


def messages(caplog: pytest.LogCaptureFixture, level: int) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == level]


@pytest.mark.parametrize("failure", [
    {"closeConnection": True},  # a network error: the server drops the connection
    {"errorCode": 91},  # ShutdownInProgress, labelled RetryableWriteError
    {"errorCode": 262},  # ExceededTimeLimit, which the driver does not retry itself
], ids=["network", "shutdown", "time-limit"])
def test_a_transient_error_mid_crawl_is_retried_and_each_item_stored_once(
    failpoints: ReplicaSet, crawl_id: str, failure: dict[str, Any],
    caplog: pytest.LogCaptureFixture,
) -> None:
    pipeline = make_pipeline(failpoints.uri, crawl_id, MONGO_BATCH_SIZE=5)
    items = [page(n) for n in range(20)]

    async def body() -> None:
        await asyncio.gather(*(pipeline.process_item(item) for item in items[:5]))
        failpoints.fail("alwaysOn", failCommands=["update"], **failure)
        tasks = started(pipeline, items[5:])
        await until(lambda: stats(pipeline).get("mongo/retries", 0) >= 2, "two retries")
        assert not any(task.done() for task in tasks)  # stalled, not dropped
        assert stats(pipeline)["mongo/stalled"] == 1
        failpoints.fail("off")
        assert await asyncio.wait_for(asyncio.gather(*tasks), timeout=120) == items[5:]

    caplog.set_level(logging.INFO, logger="crawler.pipelines.mongo")
    run(pipeline, body)
    assert stored_urls(failpoints, crawl_id) == sorted(item["url"] for item in items)
    assert stats(pipeline)["mongo/stored"] == 20  # each once: no batch is counted twice
    assert stats(pipeline)["mongo/stalled"] == 0
    assert "mongo/rejected" not in stats(pipeline)
    assert any("retrying until they succeed" in m for m in messages(caplog, logging.WARNING))


def test_unauthorized_stalls_the_batch_until_it_clears(
    failpoints: ReplicaSet, crawl_id: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A role change makes every write fail with Unauthorized: items wait, none is dropped."""
    pipeline = make_pipeline(failpoints.uri, crawl_id, MONGO_BATCH_SIZE=5)
    items = [page(n) for n in range(12)]

    async def body() -> None:
        failpoints.fail("alwaysOn", failCommands=["update"], errorCode=13)
        tasks = started(pipeline, items)
        await until(lambda: stats(pipeline).get("mongo/retries", 0) >= 3
                    or any(task.done() for task in tasks), "three retries")
        done = [task for task in tasks if task.done()]
        assert not done, f"{len(done)} items finished while MongoDB refused writes: " + \
            repr(done[0].exception())
        assert stats(pipeline)["mongo/stalled"] == 1
        failpoints.fail("off")
        assert await asyncio.wait_for(asyncio.gather(*tasks), timeout=120) == items

    caplog.set_level(logging.INFO, logger="crawler.pipelines.mongo")
    run(pipeline, body)
    assert stored_urls(failpoints, crawl_id) == sorted(item["url"] for item in items)
    assert stats(pipeline)["mongo/stored"] == 12
    assert stats(pipeline)["mongo/stalled"] == 0 and stats(pipeline)["mongo/stalls"] == 1
    errors = messages(caplog, logging.ERROR)
    assert len(errors) >= 3 and all("stalled" in m and "Unauthorized" in m for m in errors)
    assert any("succeed again" in m for m in messages(caplog, logging.INFO))


def test_a_write_concern_error_is_retried_and_each_item_stored_once(
    failpoints: ReplicaSet, crawl_id: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The writes are applied but not confirmed (wtimeout): written again until confirmed."""
    pipeline = make_pipeline(failpoints.uri, crawl_id, MONGO_BATCH_SIZE=4)
    items = [page(n) for n in range(8)]
    timeout = {"code": 64, "codeName": "WriteConcernFailed", "errInfo": {"wtimeout": True},
               "errmsg": "waiting for replication timed out"}

    async def body() -> None:
        failpoints.fail("alwaysOn", failCommands=["update"], writeConcernError=timeout)
        tasks = started(pipeline, items)
        await until(lambda: stats(pipeline).get("mongo/retries", 0) >= 2, "two retries")
        assert not any(task.done() for task in tasks)
        assert len(stored_urls(failpoints, crawl_id)) > 0  # applied, yet not acknowledged
        failpoints.fail("off")
        assert await asyncio.wait_for(asyncio.gather(*tasks), timeout=120) == items

    caplog.set_level(logging.INFO, logger="crawler.pipelines.mongo")
    run(pipeline, body)
    assert stored_urls(failpoints, crawl_id) == sorted(item["url"] for item in items)
    assert stats(pipeline)["mongo/stored"] == 8
    assert any("waiting for replication timed out" in m
               for m in messages(caplog, logging.WARNING))


def test_a_write_concern_that_cannot_be_met_stalls_with_an_error(
    failpoints: ReplicaSet, crawl_id: str, caplog: pytest.LogCaptureFixture
) -> None:
    # MONGO_WRITE_CONCERN=2 on a one-node set: a write concern that can never be met; no
    # MONGO_INDEXES, whose creation would fail open_spider already (with a clear error)
    pipeline = make_pipeline(failpoints.uri, crawl_id, MONGO_WRITE_CONCERN=2, MONGO_INDEXES=[])
    caplog.set_level(logging.INFO, logger="crawler.pipelines.mongo")

    async def main() -> None:
        await pipeline.open_spider()
        task = asyncio.ensure_future(pipeline.process_item(page(1)))
        await until(lambda: stats(pipeline).get("mongo/retries", 0) >= 2, "two retries")
        assert not task.done()
        writer = pipeline._writer._task  # the test ends the stall that nothing else would
        assert writer is not None
        writer.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert pipeline._client is not None
        await pipeline._client.close()

    asyncio.run(main())
    errors = messages(caplog, logging.ERROR)
    assert any("UnsatisfiableWriteConcern" in m and "stalled" in m for m in errors), errors
    assert stats(pipeline)["mongo/stalled"] == 1


def test_a_write_that_hangs_times_out_and_is_retried(
    failpoints: ReplicaSet, crawl_id: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Without MONGO_TIMEOUT a write the server never answers would wait for ever, silently."""
    # MONGO_TIMEOUT=2 instead of the default 30 s (and MONGO_WRITE_TIMEOUT=1, which must be
    # shorter), so that the test waits less
    pipeline = make_pipeline(failpoints.uri, crawl_id, MONGO_BATCH_SIZE=3, MONGO_TIMEOUT=2,
                             MONGO_WRITE_TIMEOUT=1)
    items = [page(n) for n in range(3)]

    async def body() -> None:
        # each update waits 5 s before it runs, longer than MONGO_TIMEOUT
        failpoints.fail("alwaysOn", failCommands=["update"], blockConnection=True,
                        blockTimeMS=HANG_MS)
        tasks = started(pipeline, items)
        await until(lambda: stats(pipeline).get("mongo/retries", 0) >= 1
                    or any(task.done() for task in tasks), "a retry")
        assert stats(pipeline).get("mongo/retries", 0) >= 1  # the write timed out
        assert not any(task.done() for task in tasks)
        failpoints.fail("off")
        assert await asyncio.wait_for(asyncio.gather(*tasks), timeout=120) == items

    caplog.set_level(logging.INFO, logger="crawler.pipelines.mongo")
    run(pipeline, body)
    assert stored_urls(failpoints, crawl_id) == sorted(item["url"] for item in items)
    assert any("timed out" in m for m in messages(caplog, logging.WARNING))


def test_index_creation_that_hangs_fails_open_with_one_clear_error(
    failpoints: ReplicaSet, crawl_id: str
) -> None:
    # MONGO_INDEX_TIMEOUT=1 instead of the default 300 s, so that the test waits less
    pipeline = make_pipeline(failpoints.uri, crawl_id, MONGO_INDEX_TIMEOUT=1)
    failpoints.fail("alwaysOn", failCommands=["createIndexes"], blockConnection=True,
                    blockTimeMS=HANG_MS)
    with pytest.raises(ServiceUnavailable) as error:
        asyncio.run(pipeline.open_spider())
    message = str(error.value)
    assert "MONGO_INDEXES" in message and "MONGO_INDEX_TIMEOUT=1" in message, message
    assert "\n" not in message


def test_a_duplicate_on_a_unique_index_is_rejected_and_the_rest_stored(
    failpoints: ReplicaSet, crawl_id: str
) -> None:
    """A per-document error that no retry can fix: that item is dropped with its reason."""
    assert failpoints.admin is not None
    failpoints.admin["crawler"][crawl_id].create_index("sku", unique=True)
    pipeline = make_pipeline(failpoints.uri, crawl_id, MONGO_BATCH_SIZE=3)
    items = [page(0, sku=1), page(1, sku=2), page(2, sku=1), page(3, sku=3)]

    async def body() -> None:
        assert await pipeline.process_item(items[0]) == items[0]
        results = await asyncio.gather(*(pipeline.process_item(i) for i in items[1:]),
                                       return_exceptions=True)
        assert results[0] == items[1] and results[2] == items[3]
        assert isinstance(results[1], DropItem), results[1]
        assert "duplicate key" in str(results[1]) and "code 11000" in str(results[1])

    run(pipeline, body)
    assert stored_urls(failpoints, crawl_id) == sorted(items[n]["url"] for n in (0, 1, 3))
    assert stats(pipeline)["mongo/rejected"] == 1
    assert "mongo/retries" not in stats(pipeline)


class _Flaky:
    """The writer's collection, whose first *failures* bulk writes raise an error that is not
    MongoDB's (a bug in a driver or an encoder); every other call is the real collection's."""

    def __init__(self, collection: Any, failures: int) -> None:
        self.collection, self.failures, self.calls = collection, failures, 0

    async def bulk_write(self, *args: Any, **kwargs: Any) -> Any:
        self.calls += 1
        if self.calls <= self.failures:
            raise RuntimeError("injected: not a MongoDB error")
        return await self.collection.bulk_write(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.collection, name)


def test_an_error_that_is_not_mongodbs_stalls_the_batch_and_each_item_is_stored_once(
    mongo_uri: str, crawl_id: str, docs: Docs, caplog: pytest.LogCaptureFixture
) -> None:
    """Any exception from the write path keeps the batch's items waiting (their requests
    unacknowledged) and retries it with backoff; none is dropped."""
    pipeline = make_pipeline(mongo_uri, crawl_id, MONGO_BATCH_SIZE=5,
                             MONGO_RETRY_BACKOFF=0.05, MONGO_RETRY_BACKOFF_MAX=0.2)
    items = [page(n) for n in range(5)]

    async def body() -> None:
        flaky = _Flaky(pipeline._writer.collection, failures=3)
        pipeline._writer.collection = flaky  # type: ignore[assignment]
        tasks = started(pipeline, items)
        await until(lambda: flaky.calls >= 2 or any(task.done() for task in tasks), "a retry")
        assert not any(task.done() for task in tasks), "an item finished after a failed write"
        assert stats(pipeline)["mongo/stalled"] == 1
        assert await asyncio.wait_for(asyncio.gather(*tasks), timeout=30) == items
        assert flaky.calls == 4  # three failures, then the write that stored them

    caplog.set_level(logging.INFO, logger="crawler.pipelines.mongo")
    run(pipeline, body)
    assert sorted(d["url"] for d in docs()) == sorted(item["url"] for item in items)
    assert stats(pipeline)["mongo/stored"] == 5 and stats(pipeline)["mongo/retries"] == 3
    assert stats(pipeline)["mongo/stalled"] == 0 and "mongo/rejected" not in stats(pipeline)
    errors = messages(caplog, logging.ERROR)
    assert errors and all("RuntimeError: injected" in m for m in errors), errors
