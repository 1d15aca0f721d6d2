"""Which browser errors are network errors, in the retry middleware's categories.

A request rendered by Chromium fails with Playwright's errors, not Scrapy's or Twisted's:
``Page.goto: net::ERR_CONNECTION_REFUSED at http://…``, ``Timeout 30000ms exceeded``, or
``Target page, context or browser has been closed``. :func:`network_category` names the
category (:data:`crawler.politeness.backoff.NETWORK_ERRORS`) the same failure has when Scrapy
downloads the page, so that the backoff retries treat both alike. Chromium's errors that
another attempt would repeat (a bad certificate, an aborted navigation, a refused scheme)
have none and are not retried.

Playwright is not imported: its errors are known by their module and class name.
"""

from __future__ import annotations

import re

__all__ = ["network_category"]

#: Chromium's network error codes (net/base/net_error_list.h) per category
_CODES: dict[str, tuple[str, ...]] = {
    "timeout": ("ERR_TIMED_OUT", "ERR_CONNECTION_TIMED_OUT"),
    "dns": ("ERR_NAME_NOT_RESOLVED", "ERR_NAME_RESOLUTION_FAILED"),
    "connection_refused": ("ERR_CONNECTION_REFUSED",),
    "connection_lost": ("ERR_CONNECTION_RESET", "ERR_CONNECTION_CLOSED",
                        "ERR_CONNECTION_ABORTED", "ERR_EMPTY_RESPONSE",
                        "ERR_INCOMPLETE_CHUNKED_ENCODING", "ERR_CONTENT_LENGTH_MISMATCH",
                        "ERR_NETWORK_CHANGED"),
    "connect_error": ("ERR_CONNECTION_FAILED", "ERR_ADDRESS_UNREACHABLE",
                      "ERR_INTERNET_DISCONNECTED", "ERR_PROXY_CONNECTION_FAILED",
                      "ERR_TUNNEL_CONNECTION_FAILED", "ERR_SOCKS_CONNECTION_FAILED"),
}
_CATEGORY = {code: category for category, codes in _CODES.items() for code in codes}
_NET_ERROR = re.compile(r"net::(ERR_[A-Z0-9_]+)")


def network_category(exception: BaseException) -> str | None:
    """The network error category of a Playwright *exception*, or None: not Playwright's,
    or not a network error.

    A timeout (of the navigation or of a page method) is ``timeout``; a browser, context or
    page that closed under the request (Chromium crashed or was killed) is
    ``connection_lost``; a ``net::ERR_*`` code takes its category from :data:`_CODES`.
    """
    kind = type(exception)
    if not kind.__module__.startswith("playwright."):
        return None
    if kind.__name__ == "TimeoutError":
        return "timeout"
    if kind.__name__ == "TargetClosedError":
        return "connection_lost"
    found = _NET_ERROR.search(str(exception))
    return _CATEGORY.get(found.group(1)) if found else None
