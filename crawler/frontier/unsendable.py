"""Where a request that can never travel through the frontier came from, for its error line.

The frontier finds out that a request cannot be sent (it does not encode, or the broker
refuses its size) a moment after the spider yielded it, far from the code that made it. The
line says which spider and callback yielded it and which meta keys make it large, so the
author can find it: ``Request https://a.test/x yielded by spider 'shop' in callback
parse_item can never be sent (2,097,310 bytes encoded: MessageSizeTooLargeError); largest
meta keys: blob (2,097,154 bytes), depth (1 byte)``. One that does not encode names the
``meta`` or ``cb_kwargs`` key and the type that cannot travel (:func:`unencodable`):
``... can never be sent: meta key 'session' holds a requests.sessions.Session, which cannot
travel through the frontier (supported: str, int, ...)``, or its callback or errback that
is not a method of the spider.
"""

from __future__ import annotations

import json
from typing import Any

from scrapy import Request

from crawler.connections.kafka_clients import MAX_REQUEST_SIZE, RECORD_OVERHEAD
from crawler.frontier.codec import CodecError, NotASpiderMethod, UnsupportedValue

SHOWN = 3  # meta keys named, the largest first
VALUE_LIMIT = MAX_REQUEST_SIZE - RECORD_OVERHEAD  # the largest encoded request sent


def too_large(value: bytes, limit: int = VALUE_LIMIT) -> str | None:
    """Why *value* can never be sent, or None if it fits a record."""
    if len(value) <= limit:
        return None
    return f"{len(value):,} bytes encoded, a record holds at most {limit:,}"


def origin(request: Request, spider: str = "") -> str:
    """``spider 'name' in callback cb``: the callback that will get its response, which is
    most often the one that yielded it (``parse`` without one)."""
    callback: Any = request.callback
    spider = getattr(getattr(callback, "__self__", None), "name", None) or spider
    name = getattr(callback, "__name__", None) or "parse"
    return f"spider {spider!r} in callback {name}" if spider else f"callback {name}"


def _size(value: Any) -> int:
    try:
        return len(json.dumps(value, default=str).encode())
    except (TypeError, ValueError, RecursionError):
        return len(repr(value))


def largest_meta(request: Request) -> str:
    """The largest meta keys of *request* with their JSON sizes, or ``no meta``."""
    sizes = sorted(((_size(v), k) for k, v in request.meta.items()), reverse=True)[:SHOWN]
    if not sizes:
        return "no meta"
    return "largest meta keys: " + ", ".join(
        f"{key} ({size:,} byte{'s' if size != 1 else ''})" for size, key in sizes)


def describe(request: Request, problem: str, spider: str = "") -> str:
    """The error line of *request*, which can never be sent because of *problem*."""
    return (f"Request {request.url} yielded by {origin(request, spider)} can never be sent "
            f"({problem}); {largest_meta(request)}")


def unencodable(request: Request, error: CodecError, spider: str = "") -> str:
    """The error line of *request*, which does not encode because of *error*: the key and
    type of the value that cannot travel, or the callback or errback that is not a spider
    method (then the callback named is not the one that yielded it: only the spider is)."""
    if isinstance(error, NotASpiderMethod) and error.role == "callback":
        where = f"spider {spider!r}" if spider else "the spider"
        return f"Request {request.url} yielded by {where} can never be sent: {error}"
    if isinstance(error, (UnsupportedValue, NotASpiderMethod)):
        return f"Request {request.url} yielded by {origin(request, spider)} can never be " \
               f"sent: {error}"
    return describe(request, str(error), spider)
