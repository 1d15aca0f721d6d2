"""MongoPipeline without a mongod: its settings, a closed port, and which errors reject a
document, stall a batch or are retried (against a real mongod:
tests/integration/test_mongo_pipeline.py)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from pymongo.errors import AutoReconnect, OperationFailure
from scrapy.exceptions import NotConfigured
from support.mongo import make_pipeline

from crawler.config.readers import SettingError
from crawler.connections.clients import ServiceUnavailable
from crawler.localstack.stack import free_port
from crawler.pipelines.mongo import is_transient, rejects_document, retry_delay
from crawler.storage.errors import describe


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
     ("MONGO_RETRY_BACKOFF", 0), ("MONGO_DATABASE", "a.b"), ("CONNECT_TIMEOUT", "soon"),
     ("MONGO_TIMEOUT", 0), ("MONGO_WRITE_TIMEOUT", 30), ("MONGO_INDEX_TIMEOUT", -1)],
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


@pytest.mark.parametrize(("error", "rejected"), [
    ({"code": 121, "errmsg": "Document failed validation"}, True),
    ({"code": 11000, "errmsg": "E11000 index: sku_1 dup key", "keyPattern": {"sku": 1}}, True),
    ({"code": 10334, "errmsg": "object too large"}, True),
    ({"code": 11000, "errmsg": "E11000 index: _id_ dup key", "keyPattern": {"_id": 1}}, False),
    ({"code": 11000, "errmsg": "E11000 collection: c index: _id_ dup key"}, False),
    ({"code": 13, "errmsg": "not authorized"}, False),
    ({"code": 14031, "errmsg": "out of disk space"}, False),
    ({"code": 91, "errmsg": "shutting down"}, False),
    ({"code": 424242, "errmsg": "a code nobody knows"}, False),
])
def test_only_errors_of_the_document_itself_reject_it(error: dict[str, Any],
                                                       rejected: bool) -> None:
    assert rejects_document(error) is rejected


def test_transient_errors_and_stalls_are_told_apart() -> None:
    assert is_transient(AutoReconnect("connection reset"))
    assert is_transient(OperationFailure("primary stepped down", 189))
    assert is_transient(OperationFailure("x", 1, {"errorLabels": ["RetryableWriteError"]}))
    assert not is_transient(OperationFailure("not authorized", 13))
    assert not is_transient(OperationFailure("auth failed", 18))
    line = describe(OperationFailure("x", 13, {"errmsg": "not authorized on crawler"}))
    assert line == "not authorized on crawler (code 13 Unauthorized)"


def test_retry_delay_doubles_up_to_the_cap() -> None:
    assert [retry_delay(n, 0.5, 3.0) for n in range(5)] == [0.5, 1.0, 2.0, 3.0, 3.0]
    assert retry_delay(10_000, 0.5, 30.0) == 30.0
