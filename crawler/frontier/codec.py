"""Versioned JSON encoding of requests and seeds; never pickle.

A frontier record is a JSON object ``{"v": 1, "url": ..., ...}`` built from
Scrapy's ``Request.to_dict``: bytes travel as base64, callbacks by name. When its ``meta``
or ``cb_kwargs`` hold values JSON cannot (a ``datetime``, a ``tuple``, a ``PageMethod``:
:mod:`crawler.frontier.metatypes`), they travel tagged in a record ``{"v": 2, "tags":
[...], ...}``, which a worker of an older version dead-letters instead of misreading; every
other record stays version 1 (docs/requests.md).
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
from w3lib.url import safe_url_string

from crawler.frontier import metatypes, requestfields
from crawler.frontier.metatypes import is_plain
from crawler.frontier.seedrule import DEFAULT, TRUSTED, SeedRule
from crawler.frontier.urls import normal_url

PLAIN, TYPED = 1, 2  # record versions: meta and cb_kwargs as JSON holds them, or tagged
VERSIONS = (PLAIN, TYPED)
_SEED_KEYS = frozenset(
    {"url", "priority", "meta", "callback", "errback", "method", "headers", "body",
     "cookies", "cb_kwargs", "dont_filter", "flags", "encoding"}
)


class CodecError(ValueError):
    """A record could not be encoded or decoded; the message says why."""


class SeedRefused(CodecError):
    """A seed from outside the crawl sets what the seed rule does not allow."""


class UnsupportedValue(CodecError):
    """A ``meta`` or ``cb_kwargs`` value no record can hold: the message names its key
    and type, and where it sits inside the key's value."""

    def __init__(self, field: str, problem: metatypes.Unsupported) -> None:
        super().__init__(problem.where(field))
        self.field, self.value = field, problem.value
        top = problem.steps[0] if problem.steps else ("", None)
        self.key = top[1] if top[0] == "key" else None


class NotASpiderMethod(CodecError):
    """A callback or errback that is not a method of the spider (only a name travels)."""

    def __init__(self, problem: requestfields.NotAMethod) -> None:
        super().__init__(str(problem))
        self.role, self.func = problem.role, problem.func


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _unb64(text: Any, field: str) -> bytes:
    if not isinstance(text, str):
        raise CodecError(f"field {field!r} must be a base64 string")
    try:
        return base64.b64decode(text, validate=True)
    except ValueError as exc:
        raise CodecError(f"field {field!r} is not valid base64: {exc}") from None


def encode_request(request: Request, spider: Spider | None = None) -> bytes:
    """*request* as a versioned JSON record; :class:`CodecError` if it cannot be
    (:class:`UnsupportedValue`, :class:`NotASpiderMethod` say why)."""
    try:
        data = requestfields.to_dict(request, spider)
    except ValueError as exc:  # a callback or errback that is not a spider method
        problem = requestfields.not_a_method(request, spider)
        raise (CodecError(str(exc)) if problem is None else NotASpiderMethod(problem)) from None
    meta, cb_kwargs = requestfields.travelling_meta(data["meta"]), data["cb_kwargs"]
    data["body"] = _b64(data["body"])
    data["headers"] = {
        _b64(bytes(name)): [_b64(bytes(v)) for v in values]
        for name, values in data["headers"].items()
        if bytes(name).lower() not in requestfields.LOCAL_HEADERS
    }
    data["meta"], data["v"] = meta, PLAIN
    try:  # the common case, fast: JSON holds meta and cb_kwargs as they stand
        plain = is_plain(meta) and is_plain(cb_kwargs)
    except RecursionError:
        plain = False
    if not plain:
        _tag(data, meta, cb_kwargs)
    try:  # no cycle: _plain and _tag would have found it (cookies: RecursionError)
        return json.dumps(data, separators=(",", ":"), allow_nan=False,
                          check_circular=False).encode()
    except (TypeError, ValueError, RecursionError) as exc:
        if data["v"] == PLAIN:  # a float that is not finite, a value that holds itself
            _tag(data, meta, cb_kwargs)  # raises UnsupportedValue naming it
        raise CodecError(f"request {request.url} is not JSON-serialisable: {exc}") from None


def _tag(data: dict[str, Any], meta: dict[str, Any], cb_kwargs: dict[str, Any]) -> None:
    """Put *meta* and *cb_kwargs* with their typed values tagged in *data*: a version 2
    record listing the tags it uses, or version 1 if it needs none."""
    used: set[str] = set()
    for field, value in (("meta", meta), ("cb_kwargs", cb_kwargs)):
        try:
            data[field] = metatypes.encode(value, used)
        except metatypes.Unsupported as exc:
            raise UnsupportedValue(field, exc) from None
        except RecursionError:
            raise UnsupportedValue(field, _too_deep(value)) from None
    if used:
        data["v"], data["tags"] = TYPED, sorted(used)


def _too_deep(mapping: dict[Any, Any]) -> metatypes.Unsupported:
    """The key of *mapping* whose value is nested too deeply or holds itself."""
    problem = metatypes.Unsupported(None, "a value nested too deeply, or that holds itself",
                                    "a few hundred levels at most can")
    for key, value in mapping.items():
        try:
            metatypes.encode(value, set())
        except RecursionError:
            return problem.inside("key", key)
        except metatypes.Unsupported:
            continue
    return problem


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


def _version(data: dict[str, Any]) -> int | None:
    version = data.get("v")
    return version if type(version) is int and version in VERSIONS else None


def decode_request(record: bytes, spider: Spider | None = None) -> Request:
    """The request in a frontier *record*; :class:`CodecError` says what is wrong."""
    data = _load_json(record)
    if not isinstance(data, dict):
        raise CodecError("a request record must be a JSON object")
    version = _version(data)
    if version is None:
        raise CodecError(f"unsupported record version {data.get('v')!r} "
                         f"(this worker reads {' and '.join(map(str, VERSIONS))})")
    return _build(data, spider, version)


def _build(data: dict[str, Any], spider: Spider | None, version: int | None) -> Request:
    """The request of a record's *data*: of a record *version* (base64 bytes; tagged
    values if :data:`TYPED`), or of a seed's own JSON if None."""
    fields = dict(data)
    fields.pop("v", None)
    tags = fields.pop("tags", None)
    fields["url"] = check_url(fields.get("url"))
    if version is not None:
        _decode_bytes(fields)
    if version == TYPED:
        _decode_typed(fields, tags)
    if "_class" in fields:
        cls = _request_class(fields["_class"])
        fields["_class"] = f"{cls.__module__}.{cls.__qualname__}"
    if not isinstance(fields.get("meta", {}), dict):
        raise CodecError("field 'meta' must be an object")
    if spider is None:  # scrapy seed checks a seed with no spider: its worker finds the names
        for name in ("callback", "errback"):
            if isinstance(fields.get(name), str):
                fields.pop(name)
    try:
        return request_from_dict(fields, spider=spider)
    except (TypeError, ValueError, AttributeError) as exc:
        raise CodecError(f"cannot build a request: {exc}") from None


def _decode_typed(fields: dict[str, Any], tags: Any) -> None:
    if type(tags) is not list or not all(type(tag) is str for tag in tags):
        raise CodecError("field 'tags' must list the type tags of the record")
    unknown = sorted(set(tags) - metatypes.TAGS)
    if unknown:
        raise CodecError(f"the record holds types this worker does not know: "
                         f"{', '.join(repr(t[:40]) for t in unknown[:5])}")
    for field in ("meta", "cb_kwargs"):
        if field in fields:
            try:
                fields[field] = metatypes.decode(fields[field])
            except metatypes.Undecodable as exc:
                raise CodecError(f"field {field!r}: {exc}") from None
            except RecursionError:
                raise CodecError(f"field {field!r} is nested too deeply") from None


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
        # first as Scrapy's Request will read it (w3lib, by WHATWG rules: a backslash ends
        # the host), so that the host checked here is the host fetched
        safe = safe_url_string(url.strip())
        parts = urlsplit(safe)
        host = parts.hostname
        if parts.scheme not in ("http", "https") or not host:
            raise CodecError(f"invalid URL {url!r}: expected an absolute http(s) URL")
        return normal_url(safe, parts), host
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
    version = _version(data)
    unknown = set(data) - _SEED_KEYS - {"v"} - ({"tags"} if version == TYPED else set())
    if unknown:
        raise CodecError(f"unknown seed fields: {', '.join(sorted(unknown))}")
    if not isinstance(data.get("priority", 0), int) or isinstance(data.get("priority"), bool):
        raise CodecError("field 'priority' must be an integer")
    refusal = rule.refusal(data)
    if refusal is not None:
        raise SeedRefused(refusal)
    return _build(data, spider, version)


def decode_trusted_seed(record: bytes, spider: Spider | None = None) -> Request:
    """A seed a worker of the crawl published (its signature verified): a full request
    record, every field and meta key as the worker encoded it (a Request subclass too)."""
    if record.lstrip().startswith(b"{"):
        data = _load_json(record)
        if isinstance(data, dict) and (version := _version(data)) is not None:
            data["url"] = seed_url(data.get("url"))
            return _build(data, spider, version)
    return decode_seed(record, spider, rule=TRUSTED)
