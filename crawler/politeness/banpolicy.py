"""Ban policies: what the answer through a proxy says, in scrapy-rotating-proxies' terms.

A policy has the two methods of scrapy-rotating-proxies' ``BanDetectionPolicy``:
``response_is_ban(request, response)`` and ``exception_is_ban(request, exception)``,
each returning True (a ban), False (not a ban) or None (unknown). Any class with them
works, a subclass of ``rotating_proxies.policy.BanDetectionPolicy`` included; so do the
same two methods on the spider, which take precedence, as in that package. An optional
``proxy_answer(request, response)`` says that the proxy itself wrote the response (the
default: a 407, or a ``Proxy-Authenticate`` header).

A policy's "ban" is a suspicion, not a verdict: :mod:`crawler.politeness.blame` decides
whose fault it was, by the kind of failure and by how the same host answers through the
other proxies. So the default ``BanDetectionPolicy`` of scrapy-rotating-proxies, which
calls every status but 200/301/302 a ban, does not let a flaky site kill the pool.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from typing import Any, Protocol

_TUNNEL_STATUS = re.compile(r"'status': (\d{3})")


class RequestLike(Protocol):
    @property
    def method(self) -> str: ...


class ResponseLike(Protocol):
    @property
    def status(self) -> int: ...

    @property
    def body(self) -> bytes: ...


def named(exception: BaseException, names: Collection[str]) -> bool:
    """Whether a class of *exception* (its MRO) has one of *names*."""
    return any(cls.__name__ in names for cls in type(exception).__mro__)


def first_named(exception: BaseException, *groups: Collection[str]) -> int | None:
    """Index of the group naming the most specific class of *exception*, or None."""
    for cls in type(exception).__mro__:
        for index, names in enumerate(groups):
            if cls.__name__ in names:
                return index
    return None


def tunnel_status(exception: BaseException) -> int | None:
    """The status of a refused ``CONNECT`` (Scrapy's ``TunnelError``), or None."""
    if not named(exception, {"TunnelError"}):
        return None
    found = _TUNNEL_STATUS.search(str(exception))
    return int(found.group(1)) if found else None


class BanPolicy:
    """The default ban policy (``PROXY_BAN_POLICY``); subclass it to change the rules.

    It calls a ban: 403, 407 and 429 (``BAN_STATUSES``), an empty 200 (but to ``HEAD``),
    a proxy that cannot be reached (``BAN_ERRORS``, matched by class name, the most
    specific class first) and a refused ``CONNECT``. Other network errors are None:
    whose fault they were is for the blame rules to find out.
    """

    BAN_STATUSES: frozenset[int] = frozenset({403, 407, 429})
    #: connection-level errors: the proxy itself is unreachable
    BAN_ERRORS: frozenset[str] = frozenset({
        "ConnectError", "ConnectionRefusedError", "DownloadConnectionRefusedError",
        "DNSLookupError", "CannotResolveHostError", "NoRouteError", "TunnelError",
    })
    #: errors that may be the proxy's or the site's fault (Twisted's connect TimeoutError
    #: is a ConnectError, and listed here to be matched first)
    FAILURE_ERRORS: frozenset[str] = frozenset({
        "TimeoutError", "DownloadTimeoutError", "DownloadFailedError", "ResponseFailed",
        "ResponseNeverReceived", "ResponseDataLossError", "ConnectionLost", "ConnectionDone",
        "ConnectionClosed", "OSError",
    })

    def response_is_ban(self, request: RequestLike, response: ResponseLike) -> bool | None:
        if response.status in self.BAN_STATUSES:
            return True
        return response.status == 200 and not response.body and request.method != "HEAD"

    def exception_is_ban(self, request: RequestLike, exception: BaseException) -> bool | None:
        if first_named(exception, self.BAN_ERRORS, self.FAILURE_ERRORS) == 0:
            return True
        return None

    def proxy_answer(self, request: RequestLike, response: ResponseLike) -> bool:
        """Whether the proxy wrote *response* itself (not the origin)."""
        headers: Any = getattr(response, "headers", None)
        return response.status == 407 or bool(headers and headers.get(b"Proxy-Authenticate"))


class SpiderPolicy:
    """*policy* with the spider's own ``response_is_ban`` / ``exception_is_ban`` first, as
    scrapy-rotating-proxies' ``BanDetectionMiddleware`` does."""

    def __init__(self, policy: Any, spider: Any) -> None:
        self.policy, self.spider = policy, spider

    def response_is_ban(self, request: RequestLike, response: ResponseLike) -> bool | None:
        method = getattr(self.spider, "response_is_ban", self.policy.response_is_ban)
        return _verdict(method(request, response))

    def exception_is_ban(self, request: RequestLike, exception: BaseException) -> bool | None:
        method = getattr(self.spider, "exception_is_ban", self.policy.exception_is_ban)
        return _verdict(method(request, exception))

    def proxy_answer(self, request: RequestLike, response: ResponseLike) -> bool:
        method = getattr(self.policy, "proxy_answer", None)
        if method is None:
            return BanPolicy.proxy_answer(self.policy, request, response)
        return bool(method(request, response))


def _verdict(value: object) -> bool | None:
    return None if value is None else bool(value)
