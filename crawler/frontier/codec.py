"""Versioned JSON encoding of requests and seeds; never pickle.

A frontier record is a JSON object ``{"v": 1, "url": ..., ...}`` built from
Scrapy's ``Request.to_dict``: bytes travel as base64, callbacks by name.
A seed record is a bare URL or a JSON object ``{"url": ..., "priority": ...,
"meta": {...}}``; from outside the crawl it may set only what
:class:`~crawler.frontier.seedrule.SeedRule` allows (:func:`decode_seed`), while a worker's
own, signed, is a full request record (:func:`decode_trusted_seed`).
"""

from __future__ import annotations

import base64
import json
import sys
from typing import Any
from urllib.parse import urlsplit

from scrapy import Request, Spider
from scrapy.utils.request import request_from_dict

from crawler._scrapy import AUTH_PROXY_META
from crawler.frontier.seedrule import DEFAULT, TRUSTED, SeedRule
from crawler.frontier.urls import normal_url

VERSION = 1
#: meta keys that never leave the process (leases are local to a worker)
LOCAL_META_KEYS = frozenset(
    {"crawler_lease", "crawler_not_before", "download_slot", "_slot_proxy", AUTH_PROXY_META,
     "download_latency", "proxy_pool_start"}
)
#: headers that may carry credentials of this worker's proxies: never sent to Kafka
LOCAL_HEADERS = frozenset({b"proxy-authorization"})
_SEED_KEYS = frozenset(
    {"url", "priority", "meta", "callback", "errback", "method", "headers", "body",
     "cookies", "cb_kwargs", "dont_filter", "flags", "encoding"}
)


class CodecError(ValueError):
    """A record could not be encoded or decoded; the message says why."""


class SeedRefused(CodecError):
    """A seed from outside the crawl sets what the seed rule does not allow."""


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _unb64(text: Any, field: str) -> bytes:
    if not isinstance(text, str):
        raise CodecError(f"field {field!r} must be a base64 string")
    try:
        return base64.b64decode(text, validate=True)
    except ValueError as exc:
        raise CodecError(f"field {field!r} is not valid base64: {exc}") from None


_UNKNOWN = object()


def _method_name(spider: Spider | None, func: Any) -> Any:
    """What ``Request.to_dict`` stores for the callback or errback *func*: *func* itself
    if it is not callable; if it is the spider's method of the same name, that name;
    otherwise :data:`_UNKNOWN` (``to_dict`` searches every member of the spider, a
    dozen microseconds a request, and raises if none is *func*)."""
    if not callable(func):
        return func
    name = getattr(func, "__name__", None)
    own = getattr(func, "__func__", None)
    if spider is None or own is None or not isinstance(name, str):
        return _UNKNOWN
    found = getattr(spider, name, None)
    return name if getattr(found, "__func__", None) is own else _UNKNOWN


def _to_dict(request: Request, spider: Spider | None) -> dict[str, Any]:
    """``request.to_dict(spider=spider)``, without its search of the spider's members when
    the callback and errback are spider methods found by their names."""
    callback = _method_name(spider, request.callback)
    errback = _method_name(spider, request.errback)
    if callback is _UNKNOWN or errback is _UNKNOWN:
        return request.to_dict(spider=spider)
    data: dict[str, Any] = {"url": request.url, "callback": callback, "errback": errback,
                            "headers": dict(request.headers)}
    for attr in request.attributes:
        data.setdefault(attr, getattr(request, attr))
    if type(request) is not Request:
        data["_class"] = f"{type(request).__module__}.{type(request).__name__}"
    return data


def encode_request(request: Request, spider: Spider | None = None) -> bytes:
    """*request* as a versioned JSON record; :class:`CodecError` if it cannot be."""
    try:
        data = _to_dict(request, spider)
    except ValueError as exc:  # a callback that is not a spider method
        raise CodecError(str(exc)) from None
    data["meta"] = {k: v for k, v in data["meta"].items() if k not in LOCAL_META_KEYS}
    if data["meta"].get("proxy_pool_id") is not None:  # the pool's pick, maybe with credentials
        data["meta"].pop("proxy", None)
    data["body"] = _b64(data["body"])
    data["headers"] = {
        _b64(bytes(name)): [_b64(bytes(v)) for v in values]
        for name, values in data["headers"].items()
        if bytes(name).lower() not in LOCAL_HEADERS
    }
    data["v"] = VERSION
    try:
        return json.dumps(data, separators=(",", ":"), allow_nan=False).encode()
    except (TypeError, ValueError) as exc:
        raise CodecError(f"request {request.url} is not JSON-serialisable: {exc}") from None


def _load_json(record: bytes) -> Any:
    try:
        return json.loads(record)
    except (UnicodeDecodeError, ValueError) as exc:
        raise CodecError(f"not JSON: {exc}") from None
    except RecursionError:
        raise CodecError("not JSON: nested too deeply") from None


def _request_class(path: Any) -> type[Request]:
    """The Request subclass named *path*, from an already imported module only."""
    module, _, name = str(path).rpartition(".")
    cls = getattr(sys.modules.get(module), name, None)
    if not (isinstance(cls, type) and issubclass(cls, Request)):
        raise CodecError(f"{path!r} is not a Request class")
    return cls


def decode_request(record: bytes, spider: Spider | None = None) -> Request:
    """The request in a frontier *record*; :class:`CodecError` says what is wrong."""
    data = _load_json(record)
    if not isinstance(data, dict):
        raise CodecError("a request record must be a JSON object")
    if data.get("v") != VERSION:
        raise CodecError(f"unsupported record version {data.get('v')!r} (expected {VERSION})")
    return _build(data, spider, encoded=True)


def _build(data: dict[str, Any], spider: Spider | None, *, encoded: bool) -> Request:
    fields = dict(data)
    fields.pop("v", None)
    fields["url"] = check_url(fields.get("url"))
    if encoded:
        _decode_bytes(fields)
    if "_class" in fields:
        cls = _request_class(fields["_class"])
        fields["_class"] = f"{cls.__module__}.{cls.__qualname__}"
    if not isinstance(fields.get("meta", {}), dict):
        raise CodecError("field 'meta' must be an object")
    try:
        return request_from_dict(fields, spider=spider)
    except (TypeError, ValueError, AttributeError) as exc:
        raise CodecError(f"cannot build a request: {exc}") from None


def _decode_bytes(fields: dict[str, Any]) -> None:
    if "body" in fields:
        fields["body"] = _unb64(fields["body"], "body")
    if "headers" in fields:
        headers = fields["headers"]
        if not isinstance(headers, dict) or not all(isinstance(v, list) for v in headers.values()):
            raise CodecError("field 'headers' must map names to lists")
        fields["headers"] = {
            _unb64(k, "headers"): [_unb64(v, "headers") for v in vs] for k, vs in headers.items()
        }


def check_url(url: Any) -> str:
    """*url* if it is an absolute http(s) URL, else :class:`CodecError`."""
    if not isinstance(url, str) or not url.strip():
        raise CodecError("missing 'url'")
    try:
        parts = urlsplit(url.strip())
    except ValueError as exc:
        raise CodecError(f"invalid URL {url!r}: {exc}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise CodecError(f"invalid URL {url!r}: expected an absolute http(s) URL")
    return url.strip()


def seed_url(url: Any) -> str:
    """*url* checked (:func:`check_url`) and in normal form (:mod:`crawler.frontier.urls`)."""
    return seed_url_and_host(url)[0]


def seed_url_and_host(url: Any) -> tuple[str, str]:
    """:func:`seed_url`, and its host, from one split of the URL."""
    if not isinstance(url, str) or not url.strip():
        raise CodecError("missing 'url'")
    try:
        parts = urlsplit(url.strip())
        host = parts.hostname
        if parts.scheme not in ("http", "https") or not host:
            raise CodecError(f"invalid URL {url!r}: expected an absolute http(s) URL")
        return normal_url(url, parts), host
    except CodecError:
        raise
    except ValueError as exc:  # unparsable, a port out of range, a bad IPv6 literal
        raise CodecError(f"invalid URL {url!r}: {exc}") from None


def decode_seed(record: bytes, spider: Spider | None = None, *,
                rule: SeedRule = DEFAULT) -> Request:
    """A seed from outside the crawl: a bare URL, or a JSON object with ``url`` and the
    request fields *rule* allows (:class:`SeedRefused` for the others)."""
    text = record.decode("utf-8", errors="replace").strip()
    if not text.startswith("{"):
        return Request(seed_url(text))
    data = _load_json(record)
    if not isinstance(data, dict):
        raise CodecError("a seed must be a URL or a JSON object")
    data["url"] = seed_url(data.get("url"))
    unknown = set(data) - _SEED_KEYS - {"v"}
    if unknown:
        raise CodecError(f"unknown seed fields: {', '.join(sorted(unknown))}")
    if not isinstance(data.get("priority", 0), int) or isinstance(data.get("priority"), bool):
        raise CodecError("field 'priority' must be an integer")
    refusal = rule.refusal(data)
    if refusal is not None:
        raise SeedRefused(refusal)
    return _build(data, spider, encoded=data.get("v") == VERSION)


def decode_trusted_seed(record: bytes, spider: Spider | None = None) -> Request:
    """A seed a worker of the crawl published (its signature verified): a full request
    record, every field and meta key as the worker encoded it (a Request subclass too)."""
    if record.lstrip().startswith(b"{"):
        data = _load_json(record)
        if isinstance(data, dict) and data.get("v") == VERSION:
            data["url"] = seed_url(data.get("url"))
            return _build(data, spider, encoded=True)
    return decode_seed(record, spider, rule=TRUSTED)
