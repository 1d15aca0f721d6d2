"""Whose fault was it: the proxy's or the origin's? Pure logic, no I/O.

Every answer through a proxy is first written in a :class:`HostBook`: per host and per
proxy, whether the proxy got an answer the ban policy accepts. Then :class:`Blame` gives
its :class:`Verdict`:

* **the proxy's, for certain**: it cannot be reached (refused, DNS, no route), its
  ``CONNECT`` was refused (403/407/429 or no HTTP answer), it timed out connecting, or
  it wrote the answer itself (407, ``Proxy-Authenticate``; the policy's ``proxy_answer``);
* **the proxy's, by comparison**: the policy calls the answer a ban or it is a network
  error, and the same host answers through the other proxies while it fails through this
  one (:meth:`HostBook.worse`; :meth:`HostBook.broken` when nothing at all gets through);
* **the origin's**: anything else. A "come back later" status, a 5xx, a reset that other
  proxies see too, a host failing through every proxy: they go to the retry middleware
  and the rate limiter, and never lower a proxy's score.

A ban-like answer (a 403, say) that no comparison explains yet is re-issued through
another proxy without a score: the next answers decide. So a flaky host cannot take the
pool below its healthy members, and a proxy that fails where the others work is found.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from dataclasses import dataclass
from enum import StrEnum
from typing import Any
from urllib.parse import urlsplit

from crawler.politeness.banpolicy import (
    BanPolicy,
    SpiderPolicy,
    first_named,
    named,
    tunnel_status,
)
from crawler.politeness.proxypool import Outcome

WINDOW = 20  # answers kept per host and proxy
MAX_AGE = 300.0  # seconds an answer stays in the book
MAX_HOSTS = 10_000  # hosts kept (the least recently seen go first)
MIN_OWN, MIN_OTHERS = 5, 10  # answers needed through this proxy / through the others
WORKS = 0.5  # the host "works through the others" at this share of good answers
MARGIN = 0.4  # this proxy is "worse" at this much below the others' share
BROKEN_OWN, BROKEN_OTHERS = 6, 0.6  # no good answer in this many, while the others reach this
LATER_STATUSES = frozenset({429, 502, 503, 504})  # "come back later": the origin's by default
CONNECT_TIMEOUTS = frozenset({"TCPTimedOutError", "TimeoutError"})  # Twisted's, at connect
UNREACHABLE = frozenset({
    "ConnectionRefusedError", "DownloadConnectionRefusedError", "DNSLookupError",
    "CannotResolveHostError", "NoRouteError", "ConnectError",
})


class Cause(StrEnum):
    PROXY = "proxy"
    ORIGIN = "origin"
    NONE = "none"  # a success, or nothing to say about the proxy


@dataclass(frozen=True, slots=True)
class Verdict:
    """*outcome* goes to the proxy's health (None: nothing); *reissue*: send the request
    again through another proxy, on the proxy budget, not the site's retry budget."""

    cause: Cause
    outcome: Outcome | None
    reissue: bool
    reason: str


def host_of(url: str) -> str:
    """``host[:port]`` of *url*, lower case, without credentials."""
    try:
        netloc = urlsplit(url).netloc
    except ValueError:
        return ""
    return netloc.rpartition("@")[2].lower()


class HostBook:
    """Recent answers per host and proxy: True when the proxy got an acceptable answer."""

    def __init__(self) -> None:
        self._hosts: OrderedDict[str, dict[str, deque[tuple[float, bool]]]] = OrderedDict()

    def record(self, host: str, proxy_id: str, good: bool, now: float) -> None:
        proxies = self._hosts.pop(host, None) or {}
        self._hosts[host] = proxies
        proxies.setdefault(proxy_id, deque(maxlen=WINDOW)).append((now, good))
        while len(self._hosts) > MAX_HOSTS:
            self._hosts.popitem(last=False)

    def _rates(self, host: str, proxy_id: str, now: float) -> tuple[int, int, int, int]:
        """(good, total) through *proxy_id*, then (good, total) through every other proxy."""
        own_good = own = other_good = others = 0
        for pid, answers in self._hosts.get(host, {}).items():
            recent = [good for at, good in answers if now - at <= MAX_AGE]
            if pid == proxy_id:
                own_good, own = sum(recent), len(recent)
            else:
                other_good, others = other_good + sum(recent), others + len(recent)
        return own_good, own, other_good, others

    def worse(self, host: str, proxy_id: str, now: float) -> bool:
        """The host works through the others, and clearly less through *proxy_id*."""
        own_good, own, other_good, others = self._rates(host, proxy_id, now)
        if own < MIN_OWN or others < MIN_OTHERS or other_good / others < WORKS:
            return False
        return own_good / own <= other_good / others - MARGIN

    def broken(self, host: str, proxy_id: str, now: float) -> bool:
        """Nothing got through *proxy_id* lately, while most answers through the others did."""
        own_good, own, other_good, others = self._rates(host, proxy_id, now)
        return (own >= BROKEN_OWN and own_good == 0 and others >= MIN_OTHERS
                and other_good / others >= BROKEN_OTHERS)


def _proxy(outcome: Outcome, reason: str) -> Verdict:
    return Verdict(Cause.PROXY, outcome, True, reason)


def _origin(reason: str) -> Verdict:
    return Verdict(Cause.ORIGIN, Outcome.ORIGIN, False, reason)


SUCCESS = Verdict(Cause.NONE, Outcome.SUCCESS, False, "success")
NOT_JUDGED = Verdict(Cause.NONE, None, False, "not about the proxy")


class Blame:
    """Verdicts on what came back through a proxy, with *policy* as the ban policy."""

    def __init__(self, policy: Any, book: HostBook | None = None) -> None:
        """*policy*: any ban policy; without a spider's methods it is wrapped in a
        :class:`SpiderPolicy` of no spider, which supplies the default ``proxy_answer``."""
        self.policy = policy if isinstance(policy, SpiderPolicy) else SpiderPolicy(policy, None)
        self.book = book or HostBook()

    def response(self, request: Any, response: Any, proxy_id: str, now: float) -> Verdict:
        host, status = host_of(request.url), response.status
        if self.policy.proxy_answer(request, response):
            self.book.record(host, proxy_id, False, now)
            return _proxy(Outcome.BAN, f"the proxy's own {status}")
        ban = bool(self.policy.response_is_ban(request, response))
        self.book.record(host, proxy_id, not ban, now)
        reason = f"status {status}"
        if not ban:  # the proxy delivered the origin's answer: a failure is the origin's
            return _origin(reason) if status in LATER_STATUSES or status >= 500 else SUCCESS
        if self.book.broken(host, proxy_id, now):
            return _proxy(Outcome.BAN, f"{reason}, while the host answers through others")
        if self.book.worse(host, proxy_id, now):
            return _proxy(Outcome.FAILURE, f"{reason}, more often than through others")
        if status in LATER_STATUSES or status >= 500:
            return _origin(reason)
        # a 403 (or a captcha...) is a page's answer: however flaky the host is otherwise,
        # only the same answer through other proxies (the proxy budget) makes it the origin's
        return Verdict(Cause.NONE, None, True, f"{reason}: unexplained yet, another proxy")

    def exception(self, request: Any, exception: BaseException, proxy_id: str,
                  now: float) -> Verdict:
        name = type(exception).__name__
        ban = self.policy.exception_is_ban(request, exception)
        if ban is False:
            return NOT_JUDGED
        host = host_of(request.url)
        certain = self._certain(exception)
        if certain is not None:
            self.book.record(host, proxy_id, False, now)
            return certain
        if ban is None and not named(exception, BanPolicy.FAILURE_ERRORS):
            return NOT_JUDGED
        self.book.record(host, proxy_id, False, now)
        if self.book.worse(host, proxy_id, now) or self.book.broken(host, proxy_id, now):
            return _proxy(Outcome.FAILURE, f"{name}, more often than through others")
        return _origin(name)

    def _certain(self, exception: BaseException) -> Verdict | None:
        """The proxy's fault whatever the comparison says, or None."""
        name = type(exception).__name__
        if named(exception, {"TunnelError"}):
            status = tunnel_status(exception)
            if status is None or status in BanPolicy.BAN_STATUSES:
                return _proxy(Outcome.BAN, f"CONNECT refused ({status or 'no HTTP answer'})")
            return None  # 502/503/504: the proxy could not reach the origin, maybe its fault
        found = first_named(exception, CONNECT_TIMEOUTS, UNREACHABLE)
        if found == 0 and named(exception, {"ConnectError"}):
            return _proxy(Outcome.FAILURE, f"{name} connecting to the proxy")
        if found == 1:
            return _proxy(Outcome.BAN, f"{name}: the proxy cannot be reached")
        return None
