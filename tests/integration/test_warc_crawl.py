"""WARC output of a real crawl (single node: no service), and the repair of a torn file.

- A ``scrapy runspider`` of a small local site with ``WARC_ENABLED``: every file passes
  ``warcio check`` and is whole; one response or revisit record per page the spider got
  (robots.txt and the redirect itself are not pages), a gzip page stored decoded, an
  unchanged page fetched again stored as a revisit, files rotated by size.
- Pages rendered in Chromium: what the browser rendered is stored, one record a page.
- Workers share the payload digests in Redis, a moment's look-ups in one call; a Redis
  that does not answer costs a revisit, not a page.
- A writer killed with its last record half on disk (as a crash leaves it): while it lives
  nothing touches its file; the next worker to open on this host cuts the torn record off,
  logs it, and closes the file, which then passes ``warcio check``.
"""

from __future__ import annotations

import asyncio
import gzip
import importlib.util
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest
from helpers import http_site, require
from scrapy import Spider
from scrapy.utils.test import get_crawler
from warcio.archiveiterator import ArchiveIterator

from crawler.archive import (
    DigestBook,
    RedisDigests,
    Seen,
    WriterId,
    prepare_directory,
    verify_file,
)
from crawler.config.keys import CrawlKeys
from crawler.connections.clients import redis_client

pytestmark = pytest.mark.timeout(180)
TESTS = Path(__file__).resolve().parents[1]
WARCIO = Path(sys.executable).with_name("warcio")
PAGES = 12


class _Site(BaseHTTPRequestHandler):
    changing = 0

    def do_GET(self) -> None:
        path = self.path
        if path == "/robots.txt":
            return self._send(200, b"User-agent: *\nAllow: /\n", "text/plain")
        if path == "/":
            links = [f"/p/{n}" for n in range(PAGES)] + ["/gz", "/redirect", "/missing"]
            return self._send(200, "".join(f'<a href="{u}">{u}</a>' for u in links).encode())
        if path == "/gz":
            body = gzip.compress(b"<html>" + b"zipped " * 500 + b"</html>")
            return self._send(200, body, extra={"Content-Encoding": "gzip"})
        if path == "/redirect":
            return self._send(302, b"", extra={"Location": "/target"})
        if path == "/changing":
            _Site.changing += 1
            return self._send(200, b"<html>visit %d</html>" % _Site.changing)
        if path in ("/target", "/same") or path.startswith("/p/"):
            return self._send(200, b"<html>" + path.encode() * 300 + b"</html>")
        return self._send(404, b"<html>not here</html>")

    def _send(self, status: int, body: bytes, kind: str = "text/html",
              extra: dict[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        for name, value in (extra or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def site() -> Iterator[str]:
    _Site.changing = 0
    with http_site(_Site) as base:
        yield base


SPIDER = """
import scrapy

class WarcSite(scrapy.Spider):
    name = "warcsite"
    custom_settings = {{"HTTPERROR_ALLOW_ALL": True}}

    async def start(self):
        for path in ("/", "/same", "/changing"):
            yield scrapy.Request("{base}" + path)

    def parse(self, response):
        yield {{"url": response.url, "status": response.status}}
        if response.url.endswith(("/same", "/changing")) and not response.meta.get("again"):
            # fetched again once its records are written: unchanged (a revisit), changed
            yield response.request.replace(dont_filter=True, meta={{"again": True}})
        yield from response.follow_all(css="a")
"""


def crawl(tmp_path: Path, base: str, *settings: str,
          spider: Path | None = None) -> subprocess.CompletedProcess[str]:
    if spider is None:
        spider = tmp_path / "warcsite.py"
        spider.write_text(textwrap.dedent(SPIDER.format(base=base)))
    env = {k: v for k, v in os.environ.items()
           if k not in ("KAFKA_BOOTSTRAP_SERVERS", "REDIS_URL", "MONGO_URI", "CRAWL_ID")}
    env.update(SCRAPY_SETTINGS_MODULE="crawler.settings", PYTHONPATH=str(TESTS))
    command = [sys.executable, "-m", "scrapy", "runspider", str(spider), "-o", "items.jsonl",
               "-a", f"base={base}", "-s", "WARC_ENABLED=True", "-s", "LOG_LEVEL=INFO",
               *settings]
    done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    return done


def check_all(directory: Path) -> list[Path]:
    """Every file of *directory*: closed, whole, and passing ``warcio check``."""
    assert not list(directory.glob("*.open"))
    files = sorted(directory.glob("*.warc.gz"))
    for path in files:
        assert not verify_file(path)[1], path.name
        done = subprocess.run([str(WARCIO), "check", str(path)], capture_output=True,
                              text=True, timeout=60)
        assert done.returncode == 0, done.stdout + done.stderr
    return files


def read_records(files: list[Path]) -> list[tuple[str, str, Any, bytes]]:
    found = []
    for path in files:
        with open(path, "rb") as fh:
            for r in ArchiveIterator(fh):
                found.append((r.rec_type, r.rec_headers.get_header("WARC-Target-URI"),
                              r.http_headers, r.content_stream().read()))
    return found


def test_a_crawl_writes_one_response_or_revisit_record_per_page(
        tmp_path: Path, site: str) -> None:
    done = crawl(tmp_path, site, "-s", "WARC_MAX_SIZE=4000")
    files = check_all(tmp_path / "warc")
    records = read_records(files)
    pages = [json.loads(line) for line in (tmp_path / "items.jsonl").read_text().splitlines()]
    stored = sorted(url for kind, url, _, _ in records if kind in ("response", "revisit"))
    assert stored == sorted(p["url"] for p in pages)
    assert len(pages) == PAGES + 8  # /, the pages, /gz, /target, /missing, 2 x 2 fetched twice
    requests = sorted(url for kind, url, _, _ in records if kind == "request")
    assert requests == stored  # each with its request record
    assert [kind for kind, url, _, _ in records if url == f"{site}/same"] == [
        "response", "request", "revisit", "request"]
    assert [kind for kind, url, _, _ in records if url == f"{site}/changing"] == [
        "response", "request", "response", "request"]
    assert not [url for _, url, _, _ in records if (url or "").endswith(("/robots.txt",
                                                                         "/redirect"))]
    [(_, _, http, body)] = [r for r in records if r[0] == "response" and r[1] == f"{site}/gz"]
    assert body.startswith(b"<html>zipped") and http.get_header("Content-Encoding") is None
    assert http.get_header("Content-Length") == str(len(body))
    assert http.get_header("X-Archive-Orig-Content-Length") is not None
    assert len(files) > 3 and re.search(r"'warc/revisits': 1\b", done.stderr)
    # fetched, not stored; and fetched at all: the start requests' host (127.0.0.1, closed by
    # the SSRF guard's default) is trusted before robots.txt asks for it (it was refused)
    assert "'robotstxt/response_status_count/200': 1," in done.stderr
    assert sum(kind == "warcinfo" for kind, _, _, _ in records) == len(files)


def test_rendered_pages_store_what_the_browser_rendered(tmp_path: Path) -> None:
    require(importlib.util.find_spec("scrapy_playwright"), "scrapy-playwright (browser extra)")
    require(shutil.which("chromium"), "chromium (Debian's package)")
    from servers.jssite import JsSite

    site = JsSite(pages=13).start()
    try:
        crawl(tmp_path, site.base, "-s", "BROWSER_ENABLED=True",
              spider=TESTS / "spiders" / "jsrender.py")
    finally:
        site.stop()
    records = read_records(check_all(tmp_path / "warc"))
    pages = [json.loads(line) for line in (tmp_path / "items.jsonl").read_text().splitlines()]
    responses = {url: body for kind, url, _, body in records if kind == "response"}
    assert len(pages) == 13 and sorted(responses) == sorted(p["url"] for p in pages)
    assert all(b'id="ready"' in body for body in responses.values())  # the rendered DOM


WRITER = """
import os, sys, time
from pathlib import Path
from crawler.archive import Capture, WarcFile, WriterId, capture_records, payload_digest
from crawler.archive import warc_date, warcfile
from crawler.config.keys import worker_id

def records(n):
    c = Capture(f"http://x.example/{n}", f"http://x.example/{n}", f"GET /{n} HTTP/1.1",
                [("Host", "x.example")], b"", "HTTP/1.1 200 OK", [], os.urandom(3000))
    return capture_records(c, digest=payload_digest(c.body), date=warc_date(), previous=None)

file = WarcFile(Path(sys.argv[1]), "crawl", WriterId.of_worker(worker_id()),
                max_size=10**9, info={})
for n in range(20):
    file.write(records(n))
real_write = os.write

def torn(fd, data):  # the next record reaches the disk in part, as a crash leaves it
    real_write(fd, bytes(data[:len(data) // 2]))
    print("torn", len(data) // 2, flush=True)
    time.sleep(600)

warcfile.os.write = torn
file.write(records(20))
"""


def test_the_next_open_repairs_the_file_a_killed_writer_tore(tmp_path: Path, site: str) -> None:
    directory = tmp_path / "warc"
    directory.mkdir()
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(directory)],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert writer.stdout is not None
        line = writer.stdout.readline()
        torn = int(line.split()[1])
        [path] = directory.glob("*.warc.gz.open")
        size = path.stat().st_size
        me = WriterId.of_worker(f"{os.uname().nodename}:{os.getpid()}:test00")
        assert prepare_directory(directory, me) == []  # alive: not touched
        assert path.stat().st_size == size and verify_file(path)[1]  # torn
    finally:
        writer.send_signal(signal.SIGKILL)
        writer.wait(timeout=30)
    done = crawl(tmp_path, site)
    repaired = re.findall(r"WARC file of a dead writer repaired: (\S+), (\d+) bytes cut "
                          r"after (\d+) complete records", done.stderr)
    closed = path.with_name(path.name.removesuffix(".open"))
    assert [(Path(p).name, cut, kept) for p, cut, kept in repaired] == [
        (closed.name, str(torn), "41")], done.stderr[-3000:]  # warcinfo + 20 pages
    assert re.search(r"'warc/repaired': 1\b", done.stderr)
    assert closed in check_all(directory)


class _Counted(RedisDigests):
    calls = 0

    async def lookup(self, fingerprints: Any) -> list[Seen | None]:
        _Counted.calls += 1
        return await super().lookup(fingerprints)


def test_workers_share_the_payload_digests_in_redis(own_redis: str) -> None:
    seen = Seen("sha1:ABC", "2026-12-07T08:00:00.123456Z")
    stats = get_crawler(Spider).stats
    assert stats is not None

    async def scenario() -> None:
        client = redis_client(own_redis)
        one = DigestBook(RedisDigests(client, "c-1"))
        assert await one.previous("aa") is None
        one.remember("aa", seen)
        await one.close()
        assert await client.hget(CrawlKeys("c-1").warc_digests, "aa") == seen.encode().encode()
        other = DigestBook(_Counted(client, "c-1"))  # another worker
        found = await asyncio.gather(*(other.previous(fp) for fp in ("aa", "bb", "cc")))
        assert found == [seen, None, None] and _Counted.calls == 1
        await other.close()
        await client.aclose()
        gone = redis_client("redis://127.0.0.1:1", connect_timeout=0.5)
        lost = DigestBook(RedisDigests(gone, "c-1"), stats)
        assert await lost.previous("aa") is None  # stored whole, not lost
        await lost.close()
        await gone.aclose()

    asyncio.run(scenario())
    assert stats.get_value("warc/digest_errors") == 1
