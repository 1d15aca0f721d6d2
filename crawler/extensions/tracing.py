"""OpenTelemetry traces of a crawl: a ``fetch``, a ``parse`` and a ``store`` span per request.

On when ``OTEL_EXPORTER_OTLP_ENDPOINT`` (setting, or the standard environment variable) names
an OTLP/HTTP receiver (a collector, Jaeger, Tempo); needs the ``otel`` extra. Off, both
:class:`Tracing` and :class:`TracingMiddleware` raise ``NotConfigured`` before anything of
OpenTelemetry is imported: the crawl pays nothing. See ``docs/tracing.md``.

- ``fetch`` (kind CLIENT): from ``request_reached_downloader`` to ``request_left_downloader``,
  one per download (a retry or a redirect is a new request, with a trace of its own), with the
  response's status, or the download's exception as ``error.type``;
- ``parse``: from the response reaching the spider middlewares (this one is the outermost)
  until the callback's output is consumed, a child of its request's ``fetch``;
- ``store``: an item from the callback's output to ``item_scraped``, ``item_dropped`` or
  ``item_error``, a child of the same ``fetch``.

Each carries ``crawl.id``, ``worker.id``, ``url.full`` (no user info, secrets masked) and
``url.fingerprint``. The SDK's batch processor exports in its own thread; at the spider's
close it is flushed for at most :data:`FLUSH_TIMEOUT` seconds. The download's exception is
the one in flight while the downloader sends ``request_left_downloader`` (from a ``finally``:
Scrapy signals no download error otherwise).
"""

from __future__ import annotations

import asyncio
import importlib
import logging
import os
import sys
from collections.abc import AsyncIterator, Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Self

from scrapy import Request, Spider, signals
from scrapy.crawler import Crawler
from scrapy.exceptions import NotConfigured
from scrapy.http import Response
from scrapy.settings import BaseSettings

from crawler.config import readers as config
from crawler.config.keys import worker_id
from crawler.connections.tasks import in_thread

if TYPE_CHECKING:
    from crawler.extensions.tracingspans import Session, Spans

logger = logging.getLogger(__name__)

SPANS_MODULE = "crawler.extensions.tracingspans"  # imported only when tracing is on
FLUSH_TIMEOUT = 5.0  # seconds the spider's close waits for the last spans to be exported
EXTRA = "pip install 'scrapy-fleet[otel]'"


def standard(settings: BaseSettings, name: str) -> str:
    """*name*, an OpenTelemetry setting: set in the project, ``-s`` or a spider, else the
    standard environment variable of the same name, else the default."""
    value = config.get_str(settings, name)
    if not config.user_set(settings, name):
        value = os.environ.get(name, "").strip() or value
    return value


@dataclass(frozen=True)
class TracingConfig:
    endpoint: str  # empty: tracing off
    service_name: str

    @classmethod
    def from_settings(cls, settings: BaseSettings) -> TracingConfig:
        endpoint = standard(settings, "OTEL_EXPORTER_OTLP_ENDPOINT")
        if endpoint and not endpoint.lower().startswith(("http://", "https://")):
            raise config.SettingError("OTEL_EXPORTER_OTLP_ENDPOINT",
                                      f"expected an http:// or https:// URL, got "
                                      f"{config.mask_url(endpoint)!r}")
        name = standard(settings, "OTEL_SERVICE_NAME") or str(config.default("OTEL_SERVICE_NAME"))
        return cls(endpoint=endpoint, service_name=name)


def _require_sdk() -> None:
    """Import the spans' module now, so that a missing extra stops the crawl at start-up."""
    try:
        importlib.import_module(SPANS_MODULE)
    except ImportError as error:
        raise config.SettingError("OTEL_EXPORTER_OTLP_ENDPOINT",
                                  f"is set, but OpenTelemetry is missing ({error}): {EXTRA}"
                                  ) from None


class Tracing:
    """The extension: a tracer provider per crawl, from the spider's opening to its close."""

    def __init__(self, crawler: Crawler, endpoint: str, service_name: str,
                 flush_timeout: float = FLUSH_TIMEOUT) -> None:
        self.crawler, self.endpoint, self.service_name = crawler, endpoint, service_name
        self.flush_timeout = flush_timeout
        self.spans: Spans | None = None  # while the spider is open
        self._session: Session | None = None

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        cfg = TracingConfig.from_settings(crawler.settings)
        if not cfg.endpoint:
            raise NotConfigured  # no arguments: Scrapy logs nothing for it
        _require_sdk()
        tracing = cls(crawler, cfg.endpoint, cfg.service_name)
        for handler, signal in (
            (tracing.spider_opened, signals.spider_opened),
            (tracing.spider_closed, signals.spider_closed),
            (tracing.request_reached_downloader, signals.request_reached_downloader),
            (tracing.response_downloaded, signals.response_downloaded),
            (tracing.request_left_downloader, signals.request_left_downloader),
            (tracing.item_scraped, signals.item_scraped),
            (tracing.item_dropped, signals.item_dropped),
            (tracing.item_error, signals.item_error),
        ):
            crawler.signals.connect(handler, signal=signal)
        return tracing

    def spider_opened(self, spider: Spider) -> None:
        spans = importlib.import_module(SPANS_MODULE)
        worker = worker_id()
        self._session = spans.Session(self.endpoint, self.service_name, worker)
        base = {spans.CRAWL_ID: config.crawl_id(self.crawler.settings, spider.name),
                spans.WORKER_ID: worker}
        self.spans = spans.Spans(self._session.tracer, base,
                                 self.crawler.request_fingerprinter.fingerprint)
        logger.info("Tracing: spans to %s (service %s)",
                    config.mask_url(spans.traces_url(self.endpoint)), self.service_name)

    async def spider_closed(self, spider: Spider) -> None:
        spans, session, self.spans, self._session = self.spans, self._session, None, None
        if spans is None or session is None:
            return
        spans.close()
        try:
            await asyncio.wait_for(in_thread(session.shutdown, "otel-flush"), self.flush_timeout)
        except TimeoutError:
            session.abort()
            logger.warning("Tracing: the last spans were not exported within %.0f s; dropped",
                           self.flush_timeout)
        stats = self.crawler.stats
        assert stats is not None
        for key, value in (("otel/spans", spans.ended), ("otel/unfinished", spans.unfinished),
                           ("otel/exported", session.exporter.exported),
                           ("otel/export_failed", session.exporter.failed)):
            stats.set_value(key, value)

    def request_reached_downloader(self, request: Request) -> None:
        if self.spans is not None:
            self.spans.fetch_started(request)

    def response_downloaded(self, response: Response, request: Request) -> None:
        if self.spans is not None:
            self.spans.fetch_response(request, response.status)

    def request_left_downloader(self, request: Request) -> None:
        if self.spans is not None:  # sent from a finally: a failed download's exception
            self.spans.fetch_ended(request, sys.exception())

    def item_scraped(self, item: Any, response: Response | None) -> None:
        if self.spans is not None:
            self.spans.store_ended(item, response, "scraped")

    def item_dropped(self, item: Any, response: Response | None) -> None:
        if self.spans is not None:
            self.spans.store_ended(item, response, "dropped")

    def item_error(self, item: Any, response: Response | None, failure: Any) -> None:
        if self.spans is not None:
            self.spans.store_ended(item, response, "error", getattr(failure, "value", None))


class _Output:
    """A callback's output on its way out: counted, each item's store span started; on
    leaving (the output consumed, or its exception), the parse span ends."""

    __slots__ = ("items", "requests", "response", "spans")

    def __init__(self, spans: Spans | None, response: Response) -> None:
        self.spans, self.response = spans, response
        self.items = self.requests = 0

    def saw(self, output: Any) -> None:
        if isinstance(output, Request):
            self.requests += 1
        elif output is not None and self.spans is not None:
            self.items += 1
            self.spans.store_started(output, self.response)  # it goes to the pipelines now

    def __enter__(self) -> Self:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: Any) -> None:
        if self.spans is not None:  # GeneratorExit (a closed output) is no error
            failed = error if isinstance(error, Exception) else None
            self.spans.parse_ended(self.response, self.items, self.requests, failed)


class TracingMiddleware:
    """The spider middleware of the ``parse`` and ``store`` spans; the outermost one (the
    add-on's order 10), so that an item leaving it goes to the item pipelines."""

    def __init__(self, tracing: Tracing) -> None:
        self.tracing = tracing

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        for extension in crawler.extensions.middlewares:
            if isinstance(extension, Tracing):
                return cls(extension)
        raise NotConfigured  # tracing is off

    def process_spider_input(self, response: Response, spider: Spider | None = None) -> None:
        if self.tracing.spans is not None:
            self.tracing.spans.parse_started(response)

    def process_spider_exception(self, response: Response, exception: Exception,
                                 spider: Spider | None = None) -> None:
        if self.tracing.spans is not None:  # the callback raised before its first output
            self.tracing.spans.parse_ended(response, 0, 0, exception)

    def process_spider_output(self, response: Response, result: Iterable[Any],
                              spider: Spider | None = None) -> Iterator[Any]:
        with _Output(self.tracing.spans, response) as seen:
            for output in result:
                seen.saw(output)
                yield output

    async def process_spider_output_async(self, response: Response, result: AsyncIterator[Any],
                                          spider: Spider | None = None) -> AsyncIterator[Any]:
        with _Output(self.tracing.spans, response) as seen:
            async for output in result:
                seen.saw(output)
                yield output
