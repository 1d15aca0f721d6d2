"""WARC/1.1 records of one capture, built with warcio from plain values (no Scrapy, no I/O).

A :class:`Capture` is one page as the worker fetched it: the request line and headers as
sent, the status line, headers and body as received. :func:`capture_records` makes its
``response`` (or ``revisit``) record and its ``request`` record, linked by
``WARC-Concurrent-To``; :func:`warcinfo_record` the record that opens each file.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from io import BytesIO

from warcio.recordbuilder import RecordBuilder
from warcio.recordloader import ArcWarcRecord
from warcio.statusandheaders import StatusAndHeaders
from warcio.timeutils import datetime_to_iso_date

WARC_VERSION = "WARC/1.1"
Headers = list[tuple[str, str]]
_BUILDER = RecordBuilder(warc_version=WARC_VERSION)


@dataclass(frozen=True, slots=True)
class Capture:
    """One fetched page, as plain values."""

    url: str  # the response's URL (WARC-Target-URI of the response record)
    request_url: str  # the request's URL (of the request record)
    request_line: str  # "GET /path?query HTTP/1.1"
    request_headers: Headers
    request_body: bytes
    status_line: str  # "HTTP/1.1 200 OK"
    headers: Headers
    body: bytes
    ip: str = ""  # the server's address, when known


@dataclass(frozen=True, slots=True)
class Seen:
    """A previous capture of a URL: its payload digest and its ``WARC-Date``."""

    digest: str
    date: str

    def encode(self) -> str:
        return f"{self.digest} {self.date}"

    @classmethod
    def decode(cls, value: str | bytes | None) -> Seen | None:
        """The value :meth:`encode` made, or None for anything else."""
        if isinstance(value, bytes):
            value = value.decode("ascii", "replace")
        digest, _, date = (value or "").partition(" ")
        return cls(digest, date) if digest and date else None


def payload_digest(body: bytes) -> str:
    """``sha1:<base32>``: the ``WARC-Payload-Digest`` warcio would compute for *body*."""
    return "sha1:" + base64.b32encode(hashlib.sha1(body).digest()).decode("ascii")


def warc_date(moment: datetime | None = None) -> str:
    """A WARC/1.1 date (microseconds), now unless *moment* is given (UTC)."""
    moment = moment or datetime.now(UTC)
    return str(datetime_to_iso_date(moment.replace(tzinfo=None), use_micros=True))


def _status_headers(status_line: str, headers: Headers) -> StatusAndHeaders:
    protocol, _, rest = status_line.partition(" ")
    return StatusAndHeaders(rest, headers, protocol=protocol)


def capture_records(capture: Capture, *, digest: str, date: str,
                    previous: Seen | None) -> list[ArcWarcRecord]:
    """The response record and the request record of *capture*, in the order they are
    written; a revisit instead of the response if *previous* had the same payload *digest*
    (an empty body is always stored whole)."""
    http = _status_headers(capture.status_line, clean_headers(capture.headers))
    fields = {"WARC-Date": date}
    if capture.ip:
        fields["WARC-IP-Address"] = capture.ip
    if previous is not None and previous.digest == digest and capture.body:
        main = _BUILDER.create_revisit_record(capture.url, digest, capture.url, previous.date,
                                              http_headers=http, warc_headers_dict=fields)
    else:
        main = _BUILDER.create_warc_record(
            capture.url, "response", payload=BytesIO(capture.body), length=len(capture.body),
            http_headers=http, warc_headers_dict={**fields, "WARC-Payload-Digest": digest})
    sent = StatusAndHeaders(capture.request_line, clean_headers(capture.request_headers),
                            is_http_request=True)
    concurrent = main.rec_headers.get_header("WARC-Record-ID")
    request = _BUILDER.create_warc_record(
        capture.request_url, "request", payload=BytesIO(capture.request_body),
        length=len(capture.request_body), http_headers=sent,
        warc_headers_dict={"WARC-Date": date, "WARC-Concurrent-To": concurrent})
    return [main, request]


def warcinfo_record(filename: str, info: Mapping[str, str]) -> ArcWarcRecord:
    """The ``warcinfo`` record that opens file *filename*."""
    return _BUILDER.create_warcinfo_record(filename, dict(info))


def clean_headers(pairs: Iterable[tuple[str, str]]) -> Headers:
    """*pairs* safe to write as header lines: a value holding line breaks (Playwright joins
    repeated headers with ``\\n``) becomes one header per line; names and values stripped."""
    cleaned: Headers = []
    for name, value in pairs:
        name = name.strip()
        if not name or any(c in name for c in "\r\n:"):
            continue
        cleaned += [(name, part.strip()) for part in value.replace("\r", "\n").split("\n")
                    if part.strip()]
    return cleaned
