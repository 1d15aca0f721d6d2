"""WARC records of every page the crawl fetches (``WARC_ENABLED``, ``docs/warc.md``).

A downloader middleware at order 30 (the add-on puts it there), below Scrapy's retry (550)
and redirect (600) middlewares: its ``process_response`` sees the final response of each
request only. It writes a ``response`` record (or a ``revisit`` record when the page's
payload is the one of its last full capture, :mod:`crawler.archive.digests`) and a
``request`` record, and returns the response once both are on disk (fsync, grouped:
:class:`~crawler.archive.writer.DurableWriter`). The frontier acknowledges a request after
its response went through the spider and the pipelines: never before its records are
durable.

Not archived: robots.txt downloads and every other request downloaded outside the spider
(``callback=NO_CALLBACK``), and a response the retry middleware gave up on (the ledger's
``failed/retries``): the response and revisit records match the ledger's ``fetched/``.
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from functools import partial
from http import HTTPStatus
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any, Self

import scrapy
from scrapy import Request, signals
from scrapy.crawler import Crawler
from scrapy.exceptions import NotConfigured
from scrapy.http import Headers, Response
from scrapy.http.request import NO_CALLBACK
from scrapy.utils.httpobj import urlparse_cached

from crawler import _scrapy
from crawler.archive import (
    Capture,
    DigestBook,
    DurableWriter,
    MemoryDigests,
    RedisDigests,
    Seen,
    WarcConfig,
    WarcFile,
    WriterId,
    capture_records,
    check_directory,
    payload_digest,
    prepare_directory,
    warc_date,
)
from crawler.archive.warcfile import Written
from crawler.config import readers as config
from crawler.config.keys import worker_id
from crawler.connections import shared
from crawler.connections.retry import RetryStopped
from crawler.frontier.delay import delayed, scheduler_delays
from crawler.ledger import outcomes
from crawler.middlewares.retry import strip_userinfo
from crawler.middlewares.robots import ROBOTS_FETCH

logger = logging.getLogger(__name__)
AGAIN_AFTER = 30.0  # seconds before a request whose records could not be written comes back
SECRET_HEADERS = ("authorization", "proxy-authorization")  # their values are not stored


class WarcMiddleware:
    """Writes each final response and its request to this worker's WARC files."""

    def __init__(self, crawler: Crawler, cfg: WarcConfig, *, crawl_id: str, worker: str,
                 delays: bool) -> None:
        self.crawler, self.cfg, self.crawl_id, self.worker = crawler, cfg, crawl_id, worker
        self.delays = delays  # the scheduler keeps a request handed back, unacknowledged
        assert crawler.stats is not None
        self.stats = crawler.stats
        self.writer: DurableWriter | None = None
        self.book: DigestBook | None = None
        self._redis: Any = None
        self._opened = asyncio.Event()
        self._broken: Exception | None = None  # why the files could not be opened
        self._given_up: weakref.WeakSet[Request] = weakref.WeakSet()

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        s = crawler.settings
        if not config.get_bool(s, "WARC_ENABLED"):
            raise NotConfigured  # no message: Scrapy would log a warning in every crawl
        crawl = config.crawl_id(s, crawler.spidercls.name)
        cfg = WarcConfig.from_settings(s, crawl)
        check_directory(cfg.directory)
        middleware = cls(crawler, cfg, crawl_id=crawl, worker=worker_id(),
                         delays=scheduler_delays(crawler))
        crawler.signals.connect(middleware.spider_opened, signal=signals.spider_opened)
        crawler.signals.connect(middleware.spider_closed, signal=signals.spider_closed)
        crawler.signals.connect(middleware._told, signal=outcomes.OUTCOME)
        return middleware

    async def spider_opened(self) -> None:
        try:
            await self._open()
        except Exception as exc:  # a disk that fails already: no page may go unarchived
            self._broken = exc
            logger.error("WARC output cannot start in %s (WARC_DIR): %s; the crawl stops",
                         self.cfg.directory, exc)
            _scrapy.close_spider(self.crawler, "warc_unavailable")
        finally:
            self._opened.set()

    async def _open(self) -> None:
        me = WriterId.of_worker(self.worker)
        directory = Path(self.cfg.directory)
        file = WarcFile(directory, self.cfg.prefix, me, max_size=self.cfg.max_size,
                        info=self._info())
        self.writer = DurableWriter(file, interval=self.cfg.flush_interval)
        for done in await self.writer.run(partial(prepare_directory, directory, me)):
            self.stats.inc_value("warc/repaired")
            logger.warning("WARC file of a dead writer %s: %s, %d bytes cut after %d "
                           "complete records", "removed (no complete record)" if done.removed
                           else "repaired", done.path, done.cut, done.records)
        if config.get_str(self.crawler.settings, "REDIS_URL"):
            self._redis = shared.redis_for(self.crawler)
            store: Any = RedisDigests(self._redis, self.crawl_id)
        else:
            store = MemoryDigests()
        self.book = DigestBook(store, self.stats)

    async def spider_closed(self) -> None:
        if self.writer is not None:
            await self.writer.close()
            self.stats.set_value("warc/fsyncs", self.writer.fsyncs)
        if self.book is not None:
            await self.book.close()
        if self._redis is not None:
            await shared.release_redis(self.crawler, self._redis)
            self._redis = None

    def _told(self, request: Request, outcome: str, **_: Any) -> None:
        if outcome == outcomes.RETRIES_EXHAUSTED:  # its last response is no page of the crawl
            self._given_up.add(request)

    def archived(self, request: Request) -> bool:
        """Whether the response of *request* gets records."""
        return not (request.meta.get(ROBOTS_FETCH) or request.callback is NO_CALLBACK
                    or request in self._given_up)

    async def process_response(self, request: Request, response: Response) -> Request | Response:
        if not self.archived(request):
            return response
        await self._opened.wait()
        try:
            if self._broken is not None:
                raise RetryStopped(str(self._broken))
            await self._archive(request, response)
        except RetryStopped:  # closing with a broken disk: back, unacknowledged
            if not self.delays:
                raise
            return delayed(request, AGAIN_AFTER, dont_filter=True)
        return response

    async def _archive(self, request: Request, response: Response) -> None:
        assert self.writer is not None and self.book is not None
        capture = capture_of(request, response)
        digest = payload_digest(capture.body)
        fingerprint = self.crawler.request_fingerprinter.fingerprint(request).hex()
        previous = await self.book.previous(fingerprint)
        date = warc_date()
        records = capture_records(capture, digest=digest, date=date, previous=previous)
        written = await self.writer.write_until_durable(records)
        revisit = records[0].rec_type == "revisit"
        if not revisit:
            self.book.remember(fingerprint, Seen(digest, date))
        self._count(written, len(records), revisit)

    def _count(self, written: Written, records: int, revisit: bool) -> None:
        self.stats.inc_value("warc/records", records)
        self.stats.inc_value("warc/revisits" if revisit else "warc/responses")
        self.stats.inc_value("warc/bytes", written.size)
        if written.files:
            self.stats.inc_value("warc/files", written.files)

    def _info(self) -> dict[str, str]:
        """The warcinfo fields: what wrote the file, for which crawl. No setting that may
        hold a secret."""
        s = self.crawler.settings
        return {
            "software": f"scrapy-fleet/{_version('scrapy-fleet')} (Scrapy/{scrapy.__version__},"
                        f" warcio/{_version('warcio')})",
            "format": "WARC File Format 1.1",
            "conformsTo": "https://iipc.github.io/warc-specifications/specifications/"
                          "warc-format/warc-1.1/",
            "isPartOf": self.crawl_id,
            "worker": self.worker,
            "robots": "obey" if s.getbool("ROBOTSTXT_OBEY") else "ignore",
            "http-header-user-agent": str(s.get("USER_AGENT") or ""),
        }


def _version(distribution: str) -> str:
    try:
        return version(distribution)
    except PackageNotFoundError:
        return "unknown"


def capture_of(request: Request, response: Response) -> Capture:
    """*request* as sent and *response* as Scrapy hands it on, as plain values."""
    return Capture(
        url=strip_userinfo(response.url), request_url=strip_userinfo(request.url),
        request_line=request_line(request), request_headers=request_headers(request),
        request_body=request.body, status_line=status_line(response),
        headers=response_headers(request, response), body=response.body,
        ip=str(response.ip_address or ""))


def request_line(request: Request) -> str:
    url = urlparse_cached(request)
    target = (url.path or "/") + (f";{url.params}" if url.params else "")
    return f"{request.method} {target}{f'?{url.query}' if url.query else ''} HTTP/1.1"


def _pairs(headers: Headers) -> list[tuple[str, str]]:
    return [(name.decode("latin-1"), value.decode("latin-1"))
            for name, values in headers.items() for value in values]


def request_headers(request: Request) -> list[tuple[str, str]]:
    """The request's headers, ``Host`` first (the HTTP handler adds it), credentials
    masked (``Authorization: ***``; ``Proxy-Authorization`` went to the proxy: dropped)."""
    pairs = [] if b"Host" in request.headers else [("Host", _host(request))]
    for name, value in _pairs(request.headers):
        if name.lower() in SECRET_HEADERS:
            if name.lower() == "authorization":
                pairs.append((name, config.MASK))
            continue
        pairs.append((name, value))
    if request.body and b"Content-Length" not in request.headers:
        pairs.append(("Content-Length", str(len(request.body))))
    return pairs


def _host(request: Request) -> str:
    return urlparse_cached(request).netloc.rpartition("@")[2]


def status_line(response: Response) -> str:
    protocol = str(response.protocol or "")
    if not protocol.upper().startswith("HTTP/"):
        protocol = "HTTP/2" if protocol.lower() == "h2" else "HTTP/1.1"
    try:
        phrase = HTTPStatus(response.status).phrase
    except ValueError:
        phrase = ""
    return f"{protocol.upper()} {response.status} {phrase}".rstrip()


def response_headers(request: Request, response: Response) -> list[tuple[str, str]]:
    """The response's headers as Scrapy hands them on, made true of the body stored: the
    body is de-chunked (``Transfer-Encoding`` becomes ``X-Archive-Orig-Transfer-Encoding``)
    and decoded of the ``Content-Encoding`` Scrapy removed, so ``Content-Length`` is its
    length (a different original one is kept as ``X-Archive-Orig-Content-Length``)."""
    length, pairs, original = str(len(response.body)), [], None
    for name, value in _pairs(response.headers):
        lower = name.lower()
        if lower == "transfer-encoding":
            pairs.append(("X-Archive-Orig-Transfer-Encoding", value))
        elif lower == "content-length" and request.method != "HEAD":
            original = value
        else:
            pairs.append((name, value))
    if request.method != "HEAD":
        pairs.append(("Content-Length", length))
        if original is not None and original.strip() != length:
            pairs.append(("X-Archive-Orig-Content-Length", original))
    return pairs
