"""The spans of :mod:`crawler.extensions.tracing`, on OpenTelemetry's SDK.

Only :mod:`crawler.extensions.tracing` imports this module, and only when tracing is on
(``OTEL_EXPORTER_OTLP_ENDPOINT`` set): a crawl without it imports nothing of OpenTelemetry.

Every method of :class:`Spans` runs on the reactor's thread (signals, the spider middleware);
the spans leave through a :class:`~opentelemetry.sdk.trace.export.BatchSpanProcessor`, whose
own thread calls the exporter. :class:`GuardedExporter` keeps a collector that is down from
costing the crawl anything but the spans: one warning, then counted drops.
"""

from __future__ import annotations

import logging
import os
import time
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from opentelemetry.context import Context
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.trace import Span, SpanKind, Status, StatusCode, Tracer, set_span_in_context
from scrapy import Request
from scrapy.http import Response

from crawler.config.readers import mask_url

logger = logging.getLogger(__name__)

TRACES_PATH = "/v1/traces"  # appended to OTEL_EXPORTER_OTLP_ENDPOINT, as the OTLP spec says
PAUSE = 30.0  # seconds after a failed export during which batches are dropped unsent
#: seconds one export may take, retries included, unless OTEL_EXPORTER_OTLP_[TRACES_]TIMEOUT
#: says otherwise: below the flush at close (tracing.FLUSH_TIMEOUT), so that a collector that
#: is down is told by one warning, not by the flush running out of time too
EXPORT_TIMEOUT = 4.0
TIMEOUT_VARIABLES = ("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "OTEL_EXPORTER_OTLP_TIMEOUT")
#: OpenTelemetry's loggers of a failed export: their lines are demoted to DEBUG (the batch
#: processor's "Queue full, dropping spans", at most one in 20 s, stays a warning)
QUIET_LOGGERS = ("opentelemetry.exporter.otlp.proto.http.trace_exporter",)
ROOT = Context()  # a fetch span starts a trace of its own, whatever context is current

# span attributes (OpenTelemetry's semantic conventions where there is one)
CRAWL_ID, WORKER_ID = "crawl.id", "worker.id"
URL_FULL, FINGERPRINT, METHOD = "url.full", "url.fingerprint", "http.request.method"
STATUS_CODE, ERROR_TYPE = "http.response.status_code", "error.type"
CALLBACK, ITEMS, REQUESTS = "scrapy.callback", "scrapy.items", "scrapy.requests"
OUTCOME = "scrapy.item.outcome"  # scraped | dropped | error | unfinished


def traces_url(endpoint: str) -> str:
    """The OTLP/HTTP traces URL of the base *endpoint* (``http://collector:4318``)."""
    return endpoint.rstrip("/") + TRACES_PATH


def safe_url(url: str) -> str:
    """*url* without its user info, and with :func:`mask_url`'s secrets masked."""
    try:
        parts = urlsplit(url)
        if "@" in parts.netloc:
            url = urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))
    except ValueError:
        pass  # mask_url masks the user info of what urlsplit cannot read
    return mask_url(url)


def error_type(error: BaseException | None) -> str:
    """The exception's class, fully qualified (never its message: it may hold a URL)."""
    if error is None:
        return "unknown"
    kind = type(error)
    return f"{kind.__module__}.{kind.__qualname__}"


class _Demote(logging.Filter):
    """OpenTelemetry's export errors and retries as DEBUG lines: :class:`GuardedExporter`
    says it once, and the crawl's log is not filled with one line per batch."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno > logging.DEBUG:
            record.levelno, record.levelname = logging.DEBUG, "DEBUG"
        return True


_DEMOTE = _Demote()


def quiet_export_logs() -> None:
    for name in QUIET_LOGGERS:
        found = logging.getLogger(name)
        if _DEMOTE not in found.filters:
            found.addFilter(_DEMOTE)


class GuardedExporter(SpanExporter):
    """*inner*, counting what it exports and fails to. A failure is logged once; for
    :data:`PAUSE` seconds after one, and at the close once the last try failed, batches are
    dropped without a try: a collector that is down neither keeps the export thread retrying
    nor slows the flush at close."""

    def __init__(self, inner: SpanExporter, endpoint: str, pause: float = PAUSE) -> None:
        self.inner, self.endpoint, self.pause = inner, endpoint, pause
        self.exported = self.failed = 0
        self.closing = False  # set before the last flush
        self._retry_at = 0.0  # > 0: the last try failed
        self._warned = False

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        if self._retry_at and (self.closing or time.monotonic() < self._retry_at):
            self.failed += len(spans)
            return SpanExportResult.FAILURE
        try:
            result = self.inner.export(spans)
        except Exception:  # an exporter's bug must not end the export thread
            result = SpanExportResult.FAILURE
        if result is SpanExportResult.SUCCESS:
            self.exported += len(spans)
            self._retry_at = 0.0
            return result
        self.failed += len(spans)
        self._retry_at = time.monotonic() + self.pause
        if not self._warned:
            self._warned = True
            logger.warning("Tracing: spans cannot be exported to %s; the crawl goes on, spans "
                           "are dropped while it fails (stat otel/export_failed)",
                           mask_url(self.endpoint))
        return SpanExportResult.FAILURE

    def shutdown(self) -> None:
        self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self.inner.force_flush(timeout_millis)


class Session:
    """A tracer provider of one crawl (never the global one): its batch processor and its
    exporter. Starting it starts the processor's thread; nothing connects until a batch."""

    def __init__(self, endpoint: str, service: str, worker: str) -> None:
        quiet_export_logs()
        timeout = None if any(map(os.environ.get, TIMEOUT_VARIABLES)) else EXPORT_TIMEOUT
        inner = OTLPSpanExporter(endpoint=traces_url(endpoint), timeout=timeout)
        self.exporter = GuardedExporter(inner, traces_url(endpoint))
        resource = Resource.create({"service.name": service, "service.instance.id": worker})
        self.provider = TracerProvider(resource=resource, shutdown_on_exit=False)
        self.provider.add_span_processor(BatchSpanProcessor(self.exporter))
        self.tracer: Tracer = self.provider.get_tracer(__name__)

    def shutdown(self) -> None:
        """Export what is queued, then stop the thread (blocking: run it in a thread)."""
        self.exporter.closing = True
        self.provider.shutdown()

    def abort(self) -> None:
        """Stop the exporter's retries: :meth:`shutdown` took too long."""
        self.exporter.inner.shutdown()


@dataclass(slots=True)
class _Origin:
    """A request's fetch span, as its parse and store spans need it."""

    context: Context  # the fetch span's: their parent
    attributes: dict[str, Any]  # the request's: theirs too (computed once)


@dataclass(slots=True)
class _Fetch:
    span: Span
    origin: _Origin
    status: int | None = None


@dataclass(slots=True)
class _Store:
    item: Any  # held, so that its id is not reused before its span ends
    span: Span
    response: weakref.ref[Response]


class Spans:
    """The fetch, parse and store spans of a crawl. Per-request state is keyed weakly (by
    the request, by the response); an item's by its id until its signal, or the close."""

    def __init__(self, tracer: Tracer, base: dict[str, str],
                 fingerprint: Callable[[Request], bytes]) -> None:
        self.tracer, self.base, self.fingerprint = tracer, base, fingerprint
        self.ended = self.unfinished = 0
        self._fetching: weakref.WeakKeyDictionary[Request, _Fetch] = weakref.WeakKeyDictionary()
        self._fetched: weakref.WeakKeyDictionary[Request, _Origin] = weakref.WeakKeyDictionary()
        self._parsing: weakref.WeakKeyDictionary[Response, Span] = weakref.WeakKeyDictionary()
        self._storing: dict[int, list[_Store]] = {}

    def _attributes(self, request: Request) -> dict[str, Any]:
        return {**self.base, URL_FULL: safe_url(request.url),
                FINGERPRINT: self.fingerprint(request).hex()}

    def _end(self, span: Span, error: str | None = None) -> None:
        if error is not None:
            span.set_attribute(ERROR_TYPE, error)
            span.set_status(Status(StatusCode.ERROR, error))
        span.end()
        self.ended += 1

    # --- fetch: the request in the downloader ---
    def fetch_started(self, request: Request) -> None:
        attributes = self._attributes(request)
        span = self.tracer.start_span("fetch", ROOT, kind=SpanKind.CLIENT,
                                      attributes={**attributes, METHOD: request.method})
        origin = _Origin(set_span_in_context(span, ROOT), attributes)
        self._fetching[request] = _Fetch(span, origin)

    def fetch_response(self, request: Request, status: int) -> None:
        fetch = self._fetching.get(request)
        if fetch is not None:
            fetch.status = status
            fetch.span.set_attribute(STATUS_CODE, status)

    def fetch_ended(self, request: Request, error: BaseException | None) -> None:
        """*request* left the downloader: with the status of its response, or *error*."""
        fetch = self._fetching.pop(request, None)
        if fetch is None:
            return
        self._fetched[request] = fetch.origin
        if fetch.status is None:
            self._end(fetch.span, error_type(error))
        else:
            self._end(fetch.span, str(fetch.status) if fetch.status >= 400 else None)

    def _origin(self, response: Response) -> _Origin:
        """The fetch of *response*'s request; a root of its own without one (a response
        that never went through the downloader: a cache's)."""
        request = response.request
        found = self._fetched.get(request) if request is not None else None
        if found is not None:
            return found
        if request is None:
            return _Origin(ROOT, {**self.base, URL_FULL: safe_url(response.url)})
        return _Origin(ROOT, self._attributes(request))

    # --- parse: the response in the spider ---
    def parse_started(self, response: Response) -> None:
        origin = self._origin(response)
        callback = getattr(getattr(response.request, "callback", None), "__name__", "parse")
        self._parsing[response] = self.tracer.start_span(
            "parse", origin.context, attributes={**origin.attributes, CALLBACK: callback})

    def parse_ended(self, response: Response, items: int, requests: int,
                    error: BaseException | None) -> None:
        span = self._parsing.pop(response, None)
        if span is not None:
            span.set_attributes({ITEMS: items, REQUESTS: requests})
            self._end(span, None if error is None else error_type(error))

    # --- store: an item in the item pipelines ---
    def store_started(self, item: Any, response: Response) -> None:
        origin = self._origin(response)
        span = self.tracer.start_span("store", origin.context, attributes=origin.attributes)
        self._storing.setdefault(id(item), []).append(_Store(item, span, weakref.ref(response)))

    def store_ended(self, item: Any, response: Response | None, outcome: str,
                    error: BaseException | None = None) -> None:
        store = self._take(item, response)
        if store is not None:
            store.span.set_attribute(OUTCOME, outcome)
            self._end(store.span, None if error is None else error_type(error))

    def _take(self, item: Any, response: Response | None) -> _Store | None:
        """The store of *item*, or (a pipeline returned another object) one of its response."""
        key = id(item)
        if key not in self._storing:
            key = next((k for k, stores in self._storing.items()
                        if response is not None and stores[0].response() is response), -1)
        stores = self._storing.get(key)
        if not stores:
            return None
        store = stores.pop(0)
        if not stores:
            del self._storing[key]
        return store

    def close(self) -> None:
        """End every span still open (the crawl closed under it) as unfinished."""
        open_spans = [f.span for f in self._fetching.values()] + list(self._parsing.values())
        for stores in self._storing.values():
            for store in stores:
                store.span.set_attribute(OUTCOME, "unfinished")
                open_spans.append(store.span)
        self._fetching.clear()
        self._parsing.clear()
        self._storing.clear()
        for span in open_spans:
            self._end(span, "unfinished")
        self.unfinished += len(open_spans)
