"""Tracing against a real OTLP/HTTP receiver: a single-node crawl of a small local site in a
subprocess, its spans decoded from what the exporter POSTed (tests/support/otlp_receiver.py).

No service: single-node mode. The site has pages that succeed, two whose callback raises (a
generator as it runs, a function at once), a 404, one whose item is dropped, one whose item
fails in the pipelines, a link with credentials (Scrapy cannot download it), a URL with a
secret in its query, and a link to a closed port (refused; retried twice by Scrapy).
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest
from helpers import http_site
from scrapy import Request
from scrapy.utils.test import get_crawler
from support.otlp_receiver import ReceivedSpan, otlp_receiver

from crawler.localstack.stack import free_port

pytestmark = pytest.mark.integration

CRAWL_ID = "otel-site"
SECRET = "hunter2"
LEAVES = ("/a", "/b", "/boom", "/now", "/missing", "/odd", f"/q?api_key={SECRET}")
SERVICES = ("KAFKA_BOOTSTRAP_SERVERS", "REDIS_URL", "MONGO_URI", "CRAWL_ID", "OTEL_SERVICE_NAME",
            "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
SPIDER = textwrap.dedent("""
    from urllib.parse import urlsplit

    import scrapy


    class NotAnItem:  # no item adapter knows it: the clean pipeline fails on it (item_error)
        pass


    class SiteSpider(scrapy.Spider):
        name = "otelsite"

        def __init__(self, start="", **kwargs):
            super().__init__(**kwargs)
            self.start_urls = [start]

        def parse(self, response):
            yield {"url": response.url, "kind": "home"}
            for href in response.css("a::attr(href)").getall():
                callback = self.parse_now if href == "/now" else self.parse_leaf
                yield response.follow(href, callback=callback)

        def parse_now(self, response):  # not a generator: raises before any output
            raise KeyError("the callback failed at once")

        def parse_leaf(self, response):
            path = urlsplit(response.url).path
            if path == "/boom":
                raise ValueError("the callback failed on purpose")
            if path == "/b":
                yield {"url": ""}  # dropped by the clean pipeline: no url
            elif path == "/odd":
                yield NotAnItem()
            else:
                yield {"url": response.url, "kind": "leaf"}
""")


class _Site(BaseHTTPRequestHandler):
    closed_port = 0

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        port = self.server.server_address[1]
        if self.path == "/":
            links = [*LEAVES, f"http://user:{SECRET}@127.0.0.1:{port}/cred",
                     f"http://127.0.0.1:{self.closed_port}/refused"]
            self._send(200, "".join(f'<a href="{link}">x</a>' for link in links))
        else:
            self._send(404 if self.path == "/missing" else 200, "<html>a page</html>")

    def _send(self, status: int, text: str) -> None:
        data = text.encode()
        self.send_response(status)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@contextmanager
def serving() -> Iterator[str]:
    """The site on a free port: its base URL."""
    _Site.closed_port = free_port()
    with http_site(_Site) as base:
        yield base


def crawl(tmp_path: Path, start: str, endpoint: str,
          **environment: str) -> subprocess.CompletedProcess[str]:
    """``scrapy runspider`` of the site's spider, in the project (the add-on), single node."""
    spider = tmp_path / "site_spider.py"
    spider.write_text(SPIDER)
    env = {k: v for k, v in os.environ.items() if k not in SERVICES}
    env.update(SCRAPY_SETTINGS_MODULE="crawler.settings", OTEL_EXPORTER_OTLP_ENDPOINT=endpoint,
               **environment)
    command = [sys.executable, "-m", "scrapy", "runspider", str(spider), "-a", f"start={start}",
               "-s", f"CRAWL_ID={CRAWL_ID}", "-s", "ROBOTSTXT_OBEY=False",
               "-s", "LOG_LEVEL=INFO"]
    done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "'finish_reason': 'finished'" in done.stderr, done.stderr[-3000:]
    return done


def fingerprint(url: str) -> str:
    return get_crawler().request_fingerprinter.fingerprint(Request(url)).hex()


def by_url(spans: list[ReceivedSpan], name: str, base: str) -> dict[str, list[ReceivedSpan]]:
    """The spans called *name*, by their URL's path on the site (or their whole URL)."""
    found: dict[str, list[ReceivedSpan]] = {}
    for span in spans:
        if span.name == name:
            found.setdefault(span.attributes["url.full"].removeprefix(base), []).append(span)
    return found


Traced = tuple[str, list[ReceivedSpan], str]


@pytest.fixture(scope="module")
def traced(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Traced]:
    """One crawl of the site, traced: (the site's base URL, the spans, the crawl's log)."""
    with serving() as base, otlp_receiver() as receiver:
        done = crawl(tmp_path_factory.mktemp("otel"), base + "/", receiver.endpoint)
        yield base, receiver.received(), done.stderr


def test_a_fetch_span_per_page_with_the_crawl_and_the_fingerprint(traced: Traced) -> None:
    base, spans, log = traced
    fetches = by_url(spans, "fetch", base)
    pages = ["/", "/a", "/b", "/boom", "/now", "/missing", "/odd", "/q?api_key=***", "/cred"]
    for page in pages:
        assert len(fetches.get(page, [])) == 1, (page, sorted(fetches))
    worker = fetches["/"][0].attributes["worker.id"]
    assert re.fullmatch(r"[^:]+:\d+:[0-9a-f]{6}", worker)
    for page, (span,) in ((p, fetches[p]) for p in pages):
        url = {"/q?api_key=***": f"{base}/q?api_key={SECRET}",  # what was fetched
               "/cred": base.replace("//", f"//user:{SECRET}@") + "/cred"}.get(page, base + page)
        assert span.attributes["crawl.id"] == CRAWL_ID
        assert span.attributes["url.fingerprint"] == fingerprint(url), page
        assert span.attributes["worker.id"] == worker
        assert span.attributes["http.request.method"] == "GET"
        assert span.parent_span_id == "" and span.kind == 3  # a root, SPAN_KIND_CLIENT
        assert span.resource["service.name"] == "scrapy-fleet"
    assert "'otel/export_failed': 0" in log
    assert "'otel/unfinished': 0" in log  # every span ended by its own event


def test_status_codes_and_failures(traced: Traced) -> None:
    base, spans, _ = traced
    fetches = by_url(spans, "fetch", base)
    (home,), (missing,) = fetches["/"], fetches["/missing"]
    assert home.attributes["http.response.status_code"] == 200 and not home.error
    assert missing.attributes["http.response.status_code"] == 404
    assert missing.error and missing.attributes["error.type"] == "404"
    refused = [s for url, found in fetches.items() if url.endswith("/refused") for s in found]
    assert len(refused) == 3  # the first try and Scrapy's two retries, each its own span
    for span in refused:
        assert span.error and "http.response.status_code" not in span.attributes
        assert span.attributes["error.type"].endswith(".DownloadConnectionRefusedError")
    (cred,) = fetches["/cred"]  # a URL with user info: Scrapy's handler refuses it
    assert cred.error and cred.attributes["error.type"] == "builtins.ValueError"


def test_no_credentials_in_any_span(traced: Traced) -> None:
    _, spans, _ = traced
    for span in spans:
        assert SECRET not in json.dumps(span.attributes) + span.status_message, span
        assert "user" not in span.attributes["url.full"]


def test_parse_spans_are_children_of_their_fetch(traced: Traced) -> None:
    base, spans, _ = traced
    fetches, parses = by_url(spans, "fetch", base), by_url(spans, "parse", base)
    assert sorted(parses) == sorted(["/", "/a", "/b", "/boom", "/now", "/missing", "/odd",
                                     "/q?api_key=***"])
    for page, (parse,) in parses.items():
        (fetch,) = fetches[page]
        assert (parse.trace_id, parse.parent_span_id) == (fetch.trace_id, fetch.span_id), page
        assert parse.attributes["url.fingerprint"] == fetch.attributes["url.fingerprint"]
        assert parse.attributes["crawl.id"] == CRAWL_ID
    assert parses["/"][0].attributes["scrapy.callback"] == "parse"
    assert parses["/"][0].attributes["scrapy.requests"] == 9
    assert parses["/a"][0].attributes["scrapy.callback"] == "parse_leaf"
    (boom,) = parses["/boom"]  # raised while its output was read
    assert boom.error and boom.attributes["error.type"] == "builtins.ValueError"
    (now,) = parses["/now"]  # raised before any output
    assert now.error and now.attributes["error.type"] == "builtins.KeyError"
    assert not [p for page, (p,) in parses.items() if p.error and page not in ("/boom", "/now")]


def test_store_spans_are_children_of_their_fetch_with_the_outcome(traced: Traced) -> None:
    base, spans, _ = traced
    fetches, stores = by_url(spans, "fetch", base), by_url(spans, "store", base)
    outcomes = {page: [s.attributes["scrapy.item.outcome"] for s in found]
                for page, found in stores.items()}
    assert outcomes == {"/": ["scraped"], "/a": ["scraped"], "/q?api_key=***": ["scraped"],
                        "/b": ["dropped"], "/odd": ["error"]}
    for page, (store,) in stores.items():
        (fetch,) = fetches[page]
        assert (store.trace_id, store.parent_span_id) == (fetch.trace_id, fetch.span_id), page
        assert store.attributes["url.fingerprint"] == fetch.attributes["url.fingerprint"]
    (odd,) = stores["/odd"]
    assert odd.error and odd.attributes["error.type"] == "builtins.TypeError"
    assert not stores["/b"][0].error


def test_a_crawl_goes_on_when_the_collector_refuses_connections(tmp_path: Path) -> None:
    started = time.monotonic()
    with serving() as site:
        done = crawl(tmp_path, site + "/a", f"http://127.0.0.1:{free_port()}")
    elapsed = time.monotonic() - started
    items = (tmp_path / "output" / f"{CRAWL_ID}.jsonl").read_text().splitlines()
    assert [json.loads(line)["url"] for line in items] == [site + "/a"]
    warnings = [line for line in done.stderr.splitlines() if "WARNING" in line]
    assert len([w for w in warnings if "Tracing:" in w]) == 1, warnings
    assert "spans cannot be exported" in "\n".join(warnings)
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    assert not [line for line in done.stderr.splitlines() if "[opentelemetry" in line]
    assert re.search(r"'otel/export_failed': [1-9]", done.stderr), done.stderr[-3000:]
    assert "'otel/exported': 0" in done.stderr
    assert elapsed < 30, elapsed


def test_the_close_waits_five_seconds_at_most_for_a_receiver_that_never_answers(
    tmp_path: Path,
) -> None:
    """A receiver that takes the connection and never answers, and an export timeout longer
    than the flush's bound: the close gives up on the last spans after 5 s."""
    with socket.socket() as silent, serving() as site:
        silent.bind(("127.0.0.1", 0))
        silent.listen(16)  # the kernel completes the handshakes; nobody reads
        started = time.monotonic()
        done = crawl(tmp_path, site + "/a", f"http://127.0.0.1:{silent.getsockname()[1]}",
                     OTEL_EXPORTER_OTLP_TIMEOUT="120")
        elapsed = time.monotonic() - started
    assert "Tracing: the last spans were not exported within 5 s; dropped" in done.stderr
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    assert elapsed < 30, elapsed  # one page and the 5 s (~10 s); unbounded: 30 s more
