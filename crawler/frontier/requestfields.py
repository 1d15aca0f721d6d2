"""What of a Scrapy request goes into a frontier record (no I/O): its fields as
``Request.to_dict`` gives them, callbacks by name, and the meta that travels.

Meta keys local to a worker stay behind (:data:`LOCAL_META_KEYS`), and so does the proxy
pool's pick (:mod:`crawler.middlewares.proxies`): its ``proxy`` (maybe with credentials)
and its ``proxy:<id>`` download slot, for which the spider's own slot, if it had one,
travels. A ``proxy`` or ``download_slot`` the spider set itself travels.
"""

from __future__ import annotations

import inspect
from typing import Any

from scrapy import Request, Spider

from crawler._scrapy import AUTH_PROXY_META

#: meta keys that never leave the process (leases are local to a worker)
LOCAL_META_KEYS = frozenset(
    {"crawler_lease", "crawler_not_before", "_slot_proxy", AUTH_PROXY_META,
     "download_latency", "proxy_pool_start"}
)
#: headers that may carry credentials of this worker's proxies: never sent to Kafka
LOCAL_HEADERS = frozenset({b"proxy-authorization"})
#: meta keys holding what one download of a request opened in this process: scrapy-playwright's
#: page (``playwright_include_page``). A spider that passes one on gets the codec's error
#: line; a copy the frontier makes of a request in flight (:func:`requeued`) leaves it behind
ATTEMPT_META_KEYS = frozenset({"playwright_page"})
#: the proxy pool's meta keys: the id of its pick, the spider's own download slot it keeps
#: aside, and the prefix of the download slots it sets
POOL_ID, POOL_OWN_SLOT, POOL_SLOT = "proxy_pool_id", "proxy_pool_own_slot", "proxy:"
_UNKNOWN = object()


class NotAMethod(ValueError):
    """The callback or errback (*role*) *func* is not a method of the spider."""

    def __init__(self, role: str, func: Any) -> None:
        super().__init__(f"{role} {function_name(func)} is not a method of the spider: only "
                         "the spider's own methods can travel through the frontier, by name")
        self.role, self.func = role, func


def function_name(func: Any) -> str:
    """``module.qualname`` of *func*, or its ``repr``."""
    name = getattr(func, "__qualname__", None)
    if not isinstance(name, str):
        return repr(func)[:120]
    module = getattr(func, "__module__", None)
    return f"{module}.{name}" if isinstance(module, str) else name


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


def to_dict(request: Request, spider: Spider | None) -> dict[str, Any]:
    """``request.to_dict(spider=spider)``, without its search of the spider's members when
    the callback and errback are spider methods found by their names; ``ValueError`` if
    one is not a method of *spider* (:func:`not_a_method` says which)."""
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


def not_a_method(request: Request, spider: Spider | None) -> NotAMethod | None:
    """The callback or errback of *request* that is not a method of *spider*, if any
    (Scrapy's search, on the error path only)."""
    for role in ("callback", "errback"):
        func = getattr(request, role)
        own = getattr(func, "__func__", None)
        if callable(func) and not (spider is not None and own is not None and any(
                getattr(method, "__func__", None) is own
                for _name, method in inspect.getmembers(spider, inspect.ismethod))):
            return NotAMethod(role, func)
    return None


def travelling_meta(meta: dict[str, Any]) -> dict[str, Any]:
    """What of *meta* goes to Kafka (a new dict): see the module's docstring."""
    out = {key: value for key, value in meta.items() if key not in LOCAL_META_KEYS}
    slot = out.get("download_slot")
    if isinstance(slot, str) and slot.startswith(POOL_SLOT):
        if out.get(POOL_OWN_SLOT) is None:
            del out["download_slot"]
        else:
            out["download_slot"] = out[POOL_OWN_SLOT]
    if out.get(POOL_ID) is not None:  # the pool's pick, maybe with credentials
        out.pop("proxy", None)
    return out


def requeued(request: Request) -> Request:
    """The copy of *request*, in flight for too long, that the frontier produces again:
    unfiltered (the consumer must not take it for a raced copy), without what its download
    opened here (:data:`ATTEMPT_META_KEYS`: the copy gets a page of its own)."""
    copy = request.replace(dont_filter=True)
    for key in ATTEMPT_META_KEYS:
        copy.meta.pop(key, None)
    return copy
