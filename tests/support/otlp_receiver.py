"""An OTLP/HTTP trace receiver for the tests: ``POST /v1/traces`` (protobuf), spans recorded.

It answers as a collector does (200 and an empty ``ExportTraceServiceResponse``), and records
each span with its trace, parent, attributes, status and the service of its resource. A span
is recorded before its batch is answered: once the crawl's process has exited, every span it
exported is here.
"""

from __future__ import annotations

import gzip
import threading
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Status

TRACES = "/v1/traces"


@dataclass(frozen=True)
class ReceivedSpan:
    name: str
    trace_id: str  # hex
    span_id: str
    parent_span_id: str  # "" for a root span
    attributes: dict[str, Any]
    error: bool  # status code ERROR
    status_message: str
    kind: int  # opentelemetry.proto.trace.v1.Span.SpanKind
    resource: dict[str, Any] = field(default_factory=dict)


def _value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    return None if kind is None else getattr(value, kind)


def _attributes(pairs: Any) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for pair in pairs:
        assert isinstance(pair, KeyValue)
        found[pair.key] = _value(pair.value)
    return found


def decode(body: bytes) -> list[ReceivedSpan]:
    """The spans of one ``ExportTraceServiceRequest``."""
    request = ExportTraceServiceRequest()
    request.ParseFromString(body)
    spans = []
    for resource_spans in request.resource_spans:
        resource = _attributes(resource_spans.resource.attributes)
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                spans.append(ReceivedSpan(
                    name=span.name, trace_id=span.trace_id.hex(), span_id=span.span_id.hex(),
                    parent_span_id=span.parent_span_id.hex(),
                    attributes=_attributes(span.attributes),
                    error=span.status.code == Status.STATUS_CODE_ERROR,
                    status_message=span.status.message, kind=span.kind, resource=resource))
    return spans


class OtlpReceiver:
    """A receiver on 127.0.0.1 at a free port; :attr:`endpoint` is its base URL."""

    def __init__(self) -> None:
        self.spans: list[ReceivedSpan] = []
        self.posts = 0
        self.lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.server.server_port}"

    def received(self) -> list[ReceivedSpan]:
        with self.lock:
            return list(self.spans)

    def _record(self, spans: list[ReceivedSpan]) -> None:
        with self.lock:
            self.spans.extend(spans)
            self.posts += 1

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                encoding = (self.headers.get("Content-Encoding") or "").lower()
                if encoding == "gzip":
                    body = gzip.decompress(body)
                elif encoding == "deflate":
                    body = zlib.decompress(body)
                if self.path != TRACES:
                    self.send_error(404)
                    return
                receiver._record(decode(body))
                answer = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

        return Handler


@contextmanager
def otlp_receiver() -> Iterator[OtlpReceiver]:
    """A running :class:`OtlpReceiver`, stopped on leaving."""
    receiver = OtlpReceiver()
    receiver.thread.start()
    try:
        yield receiver
    finally:
        receiver.server.shutdown()
        receiver.server.server_close()
