"""BackoffRetryMiddleware with a real MongoDB: give-up records, and a real crawl that retries.
In process (delays, Retry-After, classification): tests/unit/test_retry_middleware_unit.py."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import textwrap
import threading
import time
from asyncio import run
from collections.abc import Iterator
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from pymongo import MongoClient
from scrapy import Request
from scrapy.exceptions import DownloadTimeoutError
from scrapy.http import Response
from support.retry import KAFKA, OURS, STOCK, make, stats


@pytest.fixture(autouse=True)
def _no_services_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("MONGO_URI", "MONGO_DATABASE", "CRAWL_ID"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def mongo(mongo_uri: str) -> Iterator[MongoClient[dict[str, Any]]]:
    client: MongoClient[dict[str, Any]] = MongoClient(mongo_uri)
    yield client
    client.close()


def test_a_request_out_of_retries_is_stored_before_it_ends(
    mongo: MongoClient[dict[str, Any]], mongo_uri: str, crawl_id: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    middleware = make(**KAFKA, MONGO_URI=mongo_uri, CRAWL_ID=crawl_id, RETRY_TIMES=2)
    failures = mongo["crawler"][f"{crawl_id}.failures"]
    spent = {"later": 6, "network": 4, "other": 2}  # the default budgets, all spent
    page = Request("https://user:secret@example.com/page?id=1",
                   meta={"retry_times": 2, "retry_class_times": spent})
    timeout = Request("https://example.com/slow",
                      meta={"retry_times": 2, "retry_class_times": spent})

    async def main() -> None:
        response = Response(page.url, status=503, request=page)
        assert await middleware.process_response(page, response) is response
        assert failures.count_documents({}) == 1  # stored before the request may end
        assert await middleware.process_exception(timeout, DownloadTimeoutError()) is None
        again = Response(page.url, status=500, request=page)  # redelivered, fails again
        assert await middleware.process_response(page, again) is again
        await middleware.spider_closed()

    started = datetime.now(UTC)
    with caplog.at_level(logging.WARNING):
        run(main())
    fingerprint = middleware.crawler.request_fingerprinter.fingerprint
    docs = {d.pop("_id"): d for d in failures.find()}
    assert set(docs) == {fingerprint(page).hex(), fingerprint(timeout).hex()}
    stored = docs[fingerprint(page).hex()]
    assert {k: v for k, v in stored.items() if k != "failed_at"} == {
        "url": "https://example.com/page?id=1", "reason": "500 Internal Server Error",
        "attempts": 3, "last_status": 500}
    assert started <= datetime.fromisoformat(stored["failed_at"]) <= datetime.now(UTC)
    assert stored["failed_at"].endswith("+00:00")
    slow = docs[fingerprint(timeout).hex()]
    assert slow["reason"] == "scrapy.exceptions.DownloadTimeoutError"
    assert slow["last_status"] is None and slow["attempts"] == 3
    assert stats(middleware)["retry/failed"] == 3
    assert stats(middleware)["retry/max_reached"] == 3
    assert stats(middleware)["retry/failures_stored"] == 3
    assert "secret" not in caplog.text and "secret" not in json.dumps(docs, default=str)


class _Origin(BaseHTTPRequestHandler):
    hits: dict[str, int] = {}
    lock = threading.Lock()

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        with self.lock:
            count = self.hits[self.path] = self.hits.get(self.path, 0) + 1
        status = {"/flaky": 503 if count <= 2 else 200, "/down": 500, "/gone": 404}.get(
            self.path, 200)
        self.send_response(status)
        if status == 503:
            self.send_header("Retry-After", "1")
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")


@pytest.fixture
def origin() -> Iterator[str]:
    _Origin.hits = {}
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Origin)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()


def test_a_real_crawl_retries_and_records_what_failed(
    tmp_path: Path, origin: str, mongo: MongoClient[dict[str, Any]], mongo_uri: str,
    crawl_id: str,
) -> None:
    """Under Scrapy's engine (single node: sleeps on the event loop), end to end."""
    spider = tmp_path / "spider.py"
    spider.write_text(textwrap.dedent(f"""
        import scrapy

        class FlakySpider(scrapy.Spider):
            name = "flaky"
            start_urls = ["{origin}/flaky", "{origin}/down", "{origin}/gone"]

            def parse(self, response):
                yield {{"url": response.url, "status": response.status}}
    """))
    middlewares = {STOCK: None, OURS: 550}
    command = [sys.executable, "-W", "error::scrapy.exceptions.ScrapyDeprecationWarning",
               "-m", "scrapy", "runspider", str(spider), "-o", "items.jsonl",
               "-s", "RETRY_BACKOFF_ENABLED=True", "-s", "RETRY_BACKOFF_BASE=0.2",
               "-s", f"DOWNLOADER_MIDDLEWARES={json.dumps(middlewares)}",
               "-s", f"MONGO_URI={mongo_uri}", "-s", f"CRAWL_ID={crawl_id}",
               "-s", "LOG_LEVEL=INFO"]
    started = time.monotonic()
    result = subprocess.run(command, capture_output=True, text=True, timeout=60, cwd=tmp_path)
    elapsed = time.monotonic() - started
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    assert _Origin.hits == {"/flaky": 3, "/down": 3, "/gone": 1}
    items = [json.loads(line) for line in (tmp_path / "items.jsonl").read_text().splitlines()]
    assert items == [{"url": f"{origin}/flaky", "status": 200}]
    assert f"Gave up on {origin}/down after 3 attempts: 500 Internal Server Error" in (
        result.stderr)
    for key, value in (("retry/count", 4), ("retry/failed", 1), ("retry/failures_stored", 1)):
        assert f"'{key}': {value}" in result.stderr, result.stderr[-3000:]
    docs = list(mongo["crawler"][f"{crawl_id}.failures"].find())
    assert [(d["url"], d["attempts"], d["last_status"]) for d in docs] == [
        (f"{origin}/down", 3, 500)]
    assert elapsed >= 2.0  # /flaky honoured Retry-After: 1 twice
