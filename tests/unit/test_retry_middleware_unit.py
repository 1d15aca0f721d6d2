"""BackoffRetryMiddleware in process: delays, Retry-After, classification, settings, and the
failure store's retry rule on a scripted collection and a closed port (give-up records in a
real MongoDB and a real crawl: tests/integration/test_retry_middleware.py)."""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from asyncio import run
from datetime import UTC, datetime
from email.utils import format_datetime
from typing import Any

import pytest
from pymongo.errors import AutoReconnect, OperationFailure
from scrapy import Request
from scrapy.core.downloader.handlers.http11 import TunnelError
from scrapy.exceptions import (
    CannotResolveHostError,
    DownloadConnectionRefusedError,
    DownloadFailedError,
    DownloadTimeoutError,
    IgnoreRequest,
    NotConfigured,
    ResponseDataLossError,
)
from scrapy.http import Response
from scrapy.utils.misc import build_from_crawler
from scrapy.utils.test import get_crawler
from support.retry import KAFKA, OURS, STOCK, RetrySpider, make, stats
from twisted.internet import error as tx

from crawler.config.readers import SettingError
from crawler.frontier.delay import NOT_BEFORE_KEY
from crawler.localstack.stack import free_port
from crawler.middlewares.retry import (
    CLASS_KEY,
    BackoffRetryMiddleware,
    classify,
    strip_userinfo,
)
from crawler.storage.failures import Failure, FailureStore


def respond(middleware: BackoffRetryMiddleware, request: Request, status: int,
            headers: dict[str, str] | None = None) -> Request | Response:
    response = Response(request.url, status=status, headers=headers, request=request)
    return run(middleware.process_response(request, response))


def test_a_retry_waits_in_the_frontier_buffer_under_its_lease() -> None:
    middleware = make(**KAFKA, RETRY_BACKOFF_BASE=8, RETRY_BACKOFF_MAX=8)
    request = Request("https://example.com/a", meta={"crawler_lease": 7}, priority=3)
    before = time.time()
    retry = respond(middleware, request, 500)
    after = time.time()
    assert isinstance(retry, Request) and retry is not request
    delay = stats(middleware)["retry/delay_seconds"]
    assert 0 <= delay <= 8
    assert before + delay <= retry.meta[NOT_BEFORE_KEY] <= after + delay
    assert after - before < 1  # nothing slept: the scheduler holds it
    assert retry.meta["crawler_lease"] == 7 and retry.meta["retry_times"] == 1
    assert retry.dont_filter and retry.priority == 2 and retry.url == request.url
    assert stats(middleware)["retry/count"] == 1
    assert stats(middleware)["retry/reason_count/500 Internal Server Error"] == 1


def test_backoff_ceilings_double_up_to_the_cap() -> None:
    middleware = make(**KAFKA, RETRY_BACKOFF_BASE=1, RETRY_BACKOFF_MAX=6, RETRY_TIMES=20)
    for attempt in range(8):
        for _ in range(20):
            request = Request("https://example.com/", meta={"retry_times": attempt})
            before = time.time()
            retry = respond(middleware, request, 502)
            after = time.time()
            assert isinstance(retry, Request)
            assert before <= retry.meta[NOT_BEFORE_KEY] <= after + min(6, 2**attempt)


def test_retry_after_is_honoured_and_capped() -> None:
    middleware = make(**KAFKA, RETRY_AFTER_MAX=120)
    before = time.time()
    in_30s = respond(middleware, Request("https://example.com/1"), 503, {"Retry-After": "30"})
    date = format_datetime(datetime.fromtimestamp(before + 1000, UTC), usegmt=True)
    capped = respond(middleware, Request("https://example.com/2"), 429, {"Retry-After": date})
    after = time.time()
    assert isinstance(in_30s, Request) and isinstance(capped, Request)
    assert before + 30 <= in_30s.meta[NOT_BEFORE_KEY] <= after + 30
    assert before + 120 <= capped.meta[NOT_BEFORE_KEY] <= after + 120
    assert stats(middleware)["retry/delay_seconds"] == pytest.approx(150)
    assert stats(middleware)["retry/reason_count/429 Unknown Status"] == 1


def test_garbage_retry_after_falls_back_to_backoff() -> None:
    middleware = make(**KAFKA, RETRY_BACKOFF_BASE=0.5)
    retry = respond(middleware, Request("https://example.com/"), 503, {"Retry-After": "later"})
    assert isinstance(retry, Request) and stats(middleware)["retry/delay_seconds"] <= 0.5


@pytest.mark.parametrize("status", [200, 301, 400, 403, 404, 410])
def test_other_statuses_are_not_retried(status: int) -> None:
    middleware = make(**KAFKA)
    request = Request("https://example.com/")
    response = Response(request.url, status=status, request=request)
    assert run(middleware.process_response(request, response)) is response
    assert "retry/count" not in stats(middleware) and "retry/failed" not in stats(middleware)


def test_status_overrides() -> None:
    middleware = make(**KAFKA, RETRY_STATUS_OVERRIDES='{"404": "backoff", "503": "none"}')
    assert isinstance(respond(middleware, Request("https://example.com/"), 404), Request)
    gone = respond(middleware, Request("https://example.com/"), 503, {"Retry-After": "1"})
    assert isinstance(gone, Response) and gone.status == 503


@pytest.mark.parametrize(
    ("exception", "category"),
    [(DownloadTimeoutError(), "timeout"), (tx.TimeoutError(), "timeout"),
     (tx.TCPTimedOutError(), "timeout"), (TimeoutError(), "timeout"),
     (CannotResolveHostError(), "dns"), (tx.DNSLookupError(), "dns"),
     (socket.gaierror(), "dns"), (DownloadConnectionRefusedError(), "connection_refused"),
     (tx.ConnectionRefusedError(), "connection_refused"),
     (ConnectionRefusedError(), "connection_refused"), (tx.ConnectionLost(), "connection_lost"),
     (tx.ConnectionDone(), "connection_lost"), (ConnectionResetError(), "connection_lost"),
     (ResponseDataLossError(), "connection_lost"), (DownloadFailedError(), "connection_lost"),
     (tx.NoRouteError(), "connect_error"), (TunnelError(), "connect_error"),
     (OSError("empty gzip"), "io_error"), (ValueError(), None), (IgnoreRequest(), None)],
)
def test_exceptions_are_classified(exception: Exception, category: str | None) -> None:
    assert classify(exception) == category
    middleware = make(**KAFKA)
    result = run(middleware.process_exception(Request("https://example.com/"), exception))
    if category is None:
        assert result is None and "retry/count" not in stats(middleware)
    else:
        assert isinstance(result, Request) and NOT_BEFORE_KEY in result.meta
        name = f"{type(exception).__module__}.{type(exception).__qualname__}"
        assert stats(middleware)[f"retry/reason_count/{name}"] == 1


def test_an_overridden_category_is_not_retried() -> None:
    middleware = make(RETRY_STATUS_OVERRIDES={"dns": "none"})
    assert run(middleware.process_exception(Request("https://x.invalid/"),
                                             CannotResolveHostError())) is None


def test_priority_adjust_from_the_setting_and_the_meta() -> None:
    middleware = make(**KAFKA, RETRY_PRIORITY_ADJUST=-3)
    retry = respond(middleware, Request("https://example.com/", priority=5), 500)
    assert isinstance(retry, Request) and retry.priority == 2
    request = Request("https://example.com/", priority=5, meta={"priority_adjust": 4})
    retry = respond(middleware, request, 500)
    assert isinstance(retry, Request) and retry.priority == 9


def test_dont_retry() -> None:
    middleware = make(**KAFKA)
    request = Request("https://example.com/", meta={"dont_retry": True})
    assert isinstance(respond(middleware, request, 503), Response)
    assert run(middleware.process_exception(request, DownloadTimeoutError())) is None
    assert stats(middleware).get("retry/count") is None


def test_single_node_sleeps_before_returning_the_retry() -> None:
    middleware = make(RETRY_BACKOFF_BASE=0.3, RETRY_BACKOFF_MAX=0.3)  # Scrapy's scheduler
    assert not middleware.delay_in_scheduler
    started = time.monotonic()
    retry = respond(middleware, Request("https://example.com/"), 500)
    elapsed = time.monotonic() - started
    assert isinstance(retry, Request) and NOT_BEFORE_KEY not in retry.meta
    delay = stats(middleware)["retry/delay_seconds"]
    # it slept the delay (a lower bound); the ceiling only catches a wrong unit
    assert delay - 0.01 <= elapsed < delay + 10


def test_giving_up_without_mongodb_logs_and_counts(caplog: pytest.LogCaptureFixture) -> None:
    middleware = make(**KAFKA, RETRY_LATER_TIMES=1)
    assert middleware.failures is None
    request = Request("https://user:secret@example.com/p?q=1",
                      meta={"retry_times": 1, CLASS_KEY: {"later": 1}})
    response = Response(request.url, status=503, request=request)
    with caplog.at_level(logging.DEBUG):
        assert run(middleware.process_response(request, response)) is response
    assert stats(middleware)["retry/max_reached"] == 1
    assert stats(middleware)["retry/failed"] == 1
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == [
        "Gave up on https://example.com/p?q=1 after 2 attempts: 503 Service Unavailable "
        "(later budget (1) spent)"]
    assert not any("secret" in r.getMessage() for r in caplog.records)


def test_max_retry_times_from_the_meta() -> None:
    middleware = make(**KAFKA, RETRY_TIMES=5)
    request = Request("https://example.com/", meta={"retry_times": 1, "max_retry_times": 1})
    assert isinstance(respond(middleware, request, 500), Response)
    assert stats(middleware)["retry/failed"] == 1


class ScriptedCollection:
    """Stands in for the failures collection: each call raises or succeeds from a script."""

    def __init__(self, script: list[Exception | None]) -> None:
        self.script, self.calls = script, 0

    async def replace_one(self, query: dict[str, Any], doc: dict[str, Any],
                          upsert: bool) -> None:
        assert upsert and query == {"_id": doc["_id"]}
        self.calls += 1
        outcome = self.script.pop(0)
        if outcome is not None:
            raise outcome


def scripted_store(script: list[Exception | None]) -> tuple[FailureStore, ScriptedCollection]:
    store = FailureStore(uri="mongodb://127.0.0.1:1/", database="crawler", collection="x",
                         retry_backoff=0.01, retry_backoff_max=0.01)
    collection = ScriptedCollection(script)
    store._collection = lambda: collection  # type: ignore[assignment,method-assign,return-value]
    return store, collection


FAILURE = Failure.now(fingerprint="ab", url="https://example.com/", reason="500",
                      attempts=3, last_status=500)


def test_transient_errors_are_retried_until_the_failure_is_stored() -> None:
    store, collection = scripted_store([
        AutoReconnect("down"), OperationFailure("primary stepped down", 189),
        OperationFailure("E11000 duplicate key", 11000), None])
    assert run(store.record(FAILURE)) is True
    assert collection.calls == 4


def test_a_permanent_error_is_logged_and_does_not_stall(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store, collection = scripted_store([OperationFailure("Document failed validation", 121)])
    assert run(store.record(FAILURE)) is False
    assert collection.calls == 1
    assert "Cannot record the failure of https://example.com/" in caplog.text


def test_a_mongodb_outage_stalls_the_request(crawl_id: str,
                                             caplog: pytest.LogCaptureFixture) -> None:
    uri = f"mongodb://user:secret@127.0.0.1:{free_port()}/"
    middleware = make(**KAFKA, MONGO_URI=uri, CRAWL_ID=crawl_id, RETRY_NETWORK_TIMES=0,
                      CONNECT_TIMEOUT=0.2, MONGO_RETRY_BACKOFF=0.05,
                      MONGO_RETRY_BACKOFF_MAX=0.1)
    request = Request("https://example.com/")

    async def main() -> None:
        task = asyncio.ensure_future(middleware.process_exception(request, TimeoutError()))
        deadline = time.monotonic() + 30
        while stats(middleware).get("retry/failure_store_retries", 0) < 2:
            assert time.monotonic() < deadline, "the failure store never retried"
            await asyncio.sleep(0.02)
        assert not task.done()  # failed twice to record it, and still waits for MongoDB
        task.cancel()
        await middleware.spider_closed()

    with caplog.at_level(logging.WARNING):
        run(main())
    assert stats(middleware)["retry/failure_store_retries"] >= 2
    assert "retrying until it succeeds" in caplog.text and "secret" not in caplog.text


def test_not_configured_unless_enabled() -> None:
    crawler = get_crawler(RetrySpider)
    with pytest.raises(NotConfigured):
        build_from_crawler(BackoffRetryMiddleware, crawler)


@pytest.mark.parametrize(
    ("name", "value"),
    [("RETRY_BACKOFF_ENABLED", "maybe"), ("RETRY_BACKOFF_BASE", 0),
     ("RETRY_BACKOFF_BASE", "fast"), ("RETRY_BACKOFF_MAX", 0.5), ("RETRY_AFTER_MAX", -1),
     ("RETRY_STATUS_OVERRIDES", {"4044": "backoff"}), ("RETRY_STATUS_OVERRIDES", {"404": "x"}),
     ("RETRY_STATUS_OVERRIDES", '{"timeout": "retry_after"}'),
     ("RETRY_STATUS_OVERRIDES", "not json"), ("RETRY_STATUS_OVERRIDES", ["404"]),
     ("RETRY_TIMES", -1), ("RETRY_PRIORITY_ADJUST", "up")],
)
def test_a_bad_setting_is_named(name: str, value: Any) -> None:
    with pytest.raises(SettingError, match=name) as error:
        make(**{"RETRY_BACKOFF_BASE": 1, name: value})
    assert error.value.setting == name


def test_scrapy_retry_middleware_left_on_is_an_error() -> None:
    crawler = get_crawler(RetrySpider, {"RETRY_BACKOFF_ENABLED": True,
                                        "DOWNLOADER_MIDDLEWARES": {OURS: 550}})
    with pytest.raises(SettingError, match="DOWNLOADER_MIDDLEWARES") as error:
        build_from_crawler(BackoffRetryMiddleware, crawler)
    assert STOCK in str(error.value)
    crawler = get_crawler(RetrySpider, {"RETRY_BACKOFF_ENABLED": True, "RETRY_ENABLED": False,
                                        "DOWNLOADER_MIDDLEWARES": {OURS: 550}})
    build_from_crawler(BackoffRetryMiddleware, crawler)


def test_retries_that_can_outlast_the_lease_are_warned_about(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING):
        make(**KAFKA)  # the defaults fit: RETRY_MAX_TIME (300 s) bounds every budget
    assert "KAFKA_LEASE_TIMEOUT" not in caplog.text
    with caplog.at_level(logging.WARNING):
        make(**KAFKA, RETRY_MAX_TIME=900, RETRY_AFTER_MAX=300)
    assert "KAFKA_LEASE_TIMEOUT=600s" in caplog.text


def retry_through(middleware: BackoffRetryMiddleware, request: Request,
                  answers: list[int | Exception]) -> Request | Response | None:
    """Feed *answers* to the request and its retries; the last result."""
    result: Request | Response | None = request
    for answer in answers:
        assert isinstance(result, Request), f"given up before {answer!r}"
        if isinstance(answer, Exception):
            result = run(middleware.process_exception(result, answer))
        else:
            result = respond(middleware, result, answer)
    return result


def test_503_three_times_then_success_is_not_cut_short() -> None:
    middleware = make(**KAFKA)
    retry = retry_through(middleware, Request("https://example.com/"), [503, 503, 503])
    assert isinstance(retry, Request) and retry.meta[CLASS_KEY] == {"later": 3}
    assert stats(middleware)["retry/class/later"] == 3


@pytest.mark.parametrize(("answer", "kind", "budget"), [
    (429, "later", 6), (502, "later", 6), (504, "later", 6), (500, "other", 2),
    (DownloadFailedError("reset"), "network", 4), (DownloadTimeoutError("slow"), "network", 4),
])
def test_each_class_has_its_own_budget(answer: int | Exception, kind: str, budget: int) -> None:
    middleware = make(**KAFKA, RETRY_BACKOFF_BASE=0.01, RETRY_BACKOFF_MAX=0.01,
                      RETRY_AFTER_MAX=0)
    last = retry_through(middleware, Request("https://example.com/"), [answer] * budget)
    assert isinstance(last, Request) and last.meta[CLASS_KEY] == {kind: budget}
    final = retry_through(middleware, last, [answer])
    assert not isinstance(final, Request)  # the budget is spent
    assert stats(middleware)[f"retry/exhausted/{kind}"] == 1


def test_budgets_are_configurable_and_other_4xx_get_none() -> None:
    middleware = make(**KAFKA, RETRY_LATER_TIMES=1, RETRY_NETWORK_TIMES=0,
                      RETRY_LATER_STATUSES=[503])
    assert isinstance(respond(middleware, Request("https://example.com/"), 503), Request)
    assert not isinstance(retry_through(middleware, Request("https://example.com/"),
                                        [503, 503]), Request)
    assert not isinstance(retry_through(middleware, Request("https://example.com/"),
                                        [DownloadFailedError("x")]), Request)
    # 502 is no longer "later": the other budget (RETRY_TIMES, 2)
    assert retry_through(middleware, Request("https://example.com/"),
                         [502, 502]).meta[CLASS_KEY] == {"other": 2}  # type: ignore[union-attr]
    for status in (400, 403, 404, 410):
        response = respond(middleware, Request("https://example.com/"), status)
        assert isinstance(response, Response) and response.status == status


def test_the_time_budget_bounds_every_class() -> None:
    middleware = make(**KAFKA, RETRY_MAX_TIME=100)
    old = Request("https://example.com/", meta={"retry_started": time.time() - 101})
    assert not isinstance(respond(middleware, old, 503), Request)
    assert stats(middleware)["retry/exhausted/later"] == 1


def test_strip_userinfo() -> None:
    assert strip_userinfo("http://u:p@h.example:8080/a?b#c") == "http://h.example:8080/a?b#c"
    assert strip_userinfo("http://u@[::1]/") == "http://[::1]/"
    assert strip_userinfo("https://example.com/@x") == "https://example.com/@x"
