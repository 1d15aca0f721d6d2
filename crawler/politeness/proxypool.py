"""Proxy bookkeeping: scores, states, probation and ban decisions. No Scrapy, no I/O.

A proxy's :class:`Health` holds moving averages (EWMA) of its success rate and its
latency; its score, ``success * ref / (ref + latency)``, weighs a random choice.
A ban (or a success rate below a floor) makes it *dead* for a pause that doubles
with each consecutive death (``base * 2**(deaths - 1)``, capped); when the pause
is over it returns on *probation*, with fresh averages and half its weight: a ban
kills it again for twice as long, a few successes make it *alive*, and a run of
successes resets the pause.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
import time
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import asdict, dataclass, replace
from enum import StrEnum
from typing import Protocol
from urllib.parse import urlsplit

PROBATION_WEIGHT = 0.5  # a proxy on probation is picked half as often as its score says


class State(StrEnum):
    ALIVE = "alive"
    DEAD = "dead"
    PROBATION = "probation"


class Outcome(StrEnum):
    SUCCESS = "success"
    FAILURE = "failure"  # counts against the proxy's success rate
    BAN = "ban"  # kills the proxy


@dataclass(frozen=True)
class Proxy:
    """A proxy address. ``url`` may hold credentials; ``id`` never does."""

    url: str
    id: str

    def __repr__(self) -> str:
        return f"Proxy({self.id})"


def parse_proxy(address: str) -> Proxy:
    """A :class:`Proxy` for ``[scheme://][user:pass@]host[:port]``; ValueError if unusable.

    The id is ``host:port``, plus ``~`` and 8 hex digits of the user name's SHA-256
    when there is one (gateways that pick the exit by user name). Error messages
    never repeat the address (it may hold a password).
    """
    url = address.strip()
    if "://" not in url:
        url = f"http://{url}"
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        raise ValueError("not a proxy address: [scheme://][user:pass@]host:port") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("a proxy needs an http:// or https:// scheme and a host")
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    proxy_id = f"{host}:{port or (443 if parts.scheme == 'https' else 80)}"
    if parts.username:
        proxy_id += "~" + hashlib.sha256(parts.username.encode()).hexdigest()[:8]
    return Proxy(url, proxy_id)


@dataclass(frozen=True)
class PoolPolicy:
    """How observations move a proxy's health (the ``PROXY_*`` tuning settings)."""

    alpha: float = 0.3  # weight of a new observation in the moving averages
    latency_ref: float = 1.0  # seconds of latency that halve a score
    min_success: float = 0.1  # a success rate below this kills the proxy
    backoff_base: float = 30.0  # seconds of the first pause of a dead proxy
    backoff_max: float = 1800.0
    probation_successes: int = 2  # successes on probation that make a proxy alive
    reset_after: int = 20  # consecutive successes that reset the pause to the base

    def pause(self, deaths: int) -> float:
        return float(min(self.backoff_max, self.backoff_base * 2.0 ** max(deaths - 1, 0)))


@dataclass(frozen=True)
class Health:
    """What is known about one proxy; immutable, JSON round-trip for the shared store."""

    success: float = 1.0  # EWMA of 1 per success, 0 per failure or ban
    latency: float | None = None  # EWMA of seconds per successful request; None: unmeasured
    state: State = State.ALIVE
    until: float = 0.0  # time.time() a dead proxy returns on probation
    deaths: int = 0  # consecutive deaths (the next pause grows with it)
    streak: int = 0  # consecutive successes
    samples: int = 0  # observations applied
    proxy_faults: int = 0  # failures blamed on this proxy, by every worker, ever
    origin_faults: int = 0  # failures seen through it that were the origin's, ever

    def to_json(self) -> str:
        data = asdict(self)
        data["state"] = self.state.value
        return json.dumps(data, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str | bytes) -> Health:
        data = json.loads(text)
        latency = data.get("latency")
        return cls(success=float(data["success"]),
                   latency=None if latency is None else float(latency),
                   state=State(data["state"]), until=float(data["until"]),
                   deaths=int(data["deaths"]), streak=int(data["streak"]),
                   samples=int(data.get("samples", 0)),
                   proxy_faults=int(data.get("proxy_faults", 0)),
                   origin_faults=int(data.get("origin_faults", 0)))


def current(health: Health, now: float) -> Health:
    """*health* as of *now*: a dead proxy whose pause is over is on probation, re-scored."""
    if health.state is State.DEAD and now >= health.until:
        return Health(state=State.PROBATION, until=health.until, deaths=health.deaths,
                      samples=health.samples)
    return health


def score(health: Health, policy: PoolPolicy) -> float:
    """Selection weight: 0 when dead, halved on probation; no latency sample counts as none."""
    if health.state is State.DEAD:
        return 0.0
    latency = health.latency or 0.0
    weight = PROBATION_WEIGHT if health.state is State.PROBATION else 1.0
    return weight * health.success * policy.latency_ref / (policy.latency_ref + latency)


def apply(health: Health, outcome: Outcome, latency: float | None, now: float,
          policy: PoolPolicy) -> Health:
    """*health* after one observation made at *now*.

    A ban kills; a failure only lowers the success rate, on probation too (a slow
    or faulty site must not keep killing revived proxies), until it falls below
    ``min_success``.
    """
    h = current(health, now)
    if h.state is State.DEAD:  # late news of requests in flight when it died: keep the pause
        return replace(h, samples=h.samples + 1)
    good = outcome is Outcome.SUCCESS
    success = h.success + policy.alpha * ((1.0 if good else 0.0) - h.success)
    h = replace(h, success=success, samples=h.samples + 1)
    if not good:
        if outcome is Outcome.BAN or success < policy.min_success:
            deaths = h.deaths + 1
            return replace(h, state=State.DEAD, deaths=deaths, streak=0,
                           until=now + policy.pause(deaths))
        return replace(h, streak=0)
    if latency is not None:
        old = h.latency if h.latency is not None else latency
        h = replace(h, latency=old + policy.alpha * (latency - old))
    streak = h.streak + 1
    state = h.state
    if state is State.PROBATION and streak >= policy.probation_successes:
        state = State.ALIVE
    return replace(h, streak=streak, state=state,
                   deaths=0 if streak >= policy.reset_after else h.deaths)


class ProxyPool:
    """One worker's view of the proxies and their health."""

    def __init__(self, policy: PoolPolicy | None = None, *,
                 clock: Callable[[], float] = time.time,
                 rng: random.Random | None = None) -> None:
        self.policy = policy or PoolPolicy()
        self.clock = clock
        self.rng = rng or random.Random()
        self.proxies: dict[str, Proxy] = {}
        self.health: dict[str, Health] = {}
        self._reported: dict[str, State] = {}

    def set_proxies(self, proxies: Iterable[Proxy]) -> tuple[list[str], list[str]]:
        """Make *proxies* the members; returns the ids added and removed."""
        wanted = {p.id: p for p in proxies}
        added = sorted(set(wanted) - set(self.proxies))
        removed = sorted(set(self.proxies) - set(wanted))
        self.proxies = wanted
        for proxy_id in removed:
            self._reported.pop(proxy_id, None)
        return added, removed

    def get(self, proxy_id: str) -> Health:
        return current(self.health.get(proxy_id, Health()), self.clock())

    def load(self, records: Mapping[str, Health]) -> None:
        """Replace every health record with *records* (a fresher shared view)."""
        self.health = dict(records)

    def observe(self, proxy_id: str, outcome: Outcome, latency: float | None = None,
                at: float | None = None) -> Health:
        now = self.clock() if at is None else at
        health = apply(self.health.get(proxy_id, Health()), outcome, latency, now, self.policy)
        self.health[proxy_id] = health
        return health

    def pick(self, avoid: Collection[str] = ()) -> Proxy | None:
        """A usable proxy chosen at random in proportion to its score, or None.

        Proxies in *avoid* are chosen only when no other is usable.
        """
        candidates = [(p, score(self.get(i), self.policy)) for i, p in self.proxies.items()]
        usable = [(p, w) for p, w in candidates if w > 0]
        preferred = [(p, w) for p, w in usable if p.id not in avoid] or usable
        if not preferred:
            return None
        return self.rng.choices([p for p, _ in preferred], [w for _, w in preferred])[0]

    def next_revival(self) -> float | None:
        """When the first dead member returns on probation (``clock()`` time), or None."""
        times = [h.until for i in self.proxies if (h := self.get(i)).state is State.DEAD]
        return min(times, default=None)

    def counts(self) -> dict[State, int]:
        counts = dict.fromkeys(State, 0)
        for proxy_id in self.proxies:
            counts[self.get(proxy_id).state] += 1
        return counts

    def transitions(self) -> list[tuple[str, State, State]]:
        """Members whose state changed since the last call: ``(id, before, now)``."""
        changes = []
        for proxy_id in self.proxies:
            state = self.get(proxy_id).state
            before = self._reported.get(proxy_id)
            if before is not None and state is not before:
                changes.append((proxy_id, before, state))
            self._reported[proxy_id] = state
        return changes


class RequestLike(Protocol):
    @property
    def method(self) -> str: ...


class ResponseLike(Protocol):
    @property
    def status(self) -> int: ...

    @property
    def body(self) -> bytes: ...


_TUNNEL_STATUS = re.compile(r"'status': (\d{3})")


def _named(exception: BaseException, names: Collection[str]) -> bool:
    return any(cls.__name__ in names for cls in type(exception).__mro__)


def _first_named(exception: BaseException, *groups: Collection[str]) -> int | None:
    """Index of the group naming the most specific class of *exception*, or None."""
    for cls in type(exception).__mro__:
        for index, names in enumerate(groups):
            if cls.__name__ in names:
                return index
    return None


class BanPolicy:
    """The default ban policy (``PROXY_BAN_POLICY``); subclass it to change the rules.

    A policy judges what came back through a proxy: a ban kills the proxy, a
    failure lowers its success rate, a success raises it. Override
    :meth:`response_is_ban` and :meth:`exception_is_ban` (the names of
    scrapy-rotating-proxies) or the two ``judge_*`` methods.
    """

    BAN_STATUSES: frozenset[int] = frozenset({403, 407, 429})
    #: connection-level errors: the proxy itself is unreachable. Matched by class name,
    #: the most specific class first (Twisted's TimeoutError is a ConnectError: a failure)
    BAN_ERRORS: frozenset[str] = frozenset({
        "ConnectError", "ConnectionRefusedError", "DownloadConnectionRefusedError",
        "DNSLookupError", "CannotResolveHostError", "NoRouteError",
    })
    #: errors that may be the proxy's or the site's fault: failures, not bans
    FAILURE_ERRORS: frozenset[str] = frozenset({
        "TimeoutError", "DownloadTimeoutError", "DownloadFailedError", "ResponseFailed",
        "ResponseNeverReceived", "ResponseDataLossError", "ConnectionLost", "ConnectionDone",
        "ConnectionClosed", "TunnelError", "OSError",
    })

    def response_is_ban(self, request: RequestLike, response: ResponseLike) -> bool:
        if response.status in self.BAN_STATUSES:
            return True
        return response.status == 200 and not response.body and request.method != "HEAD"

    def exception_is_ban(self, request: RequestLike, exception: BaseException) -> bool:
        if _named(exception, {"TunnelError"}):  # the CONNECT answer (HTTPS through a proxy)
            found = _TUNNEL_STATUS.search(str(exception))
            return found is None or int(found.group(1)) in self.BAN_STATUSES
        return _first_named(exception, self.BAN_ERRORS, self.FAILURE_ERRORS) == 0

    def judge_response(self, request: RequestLike, response: ResponseLike) -> Outcome:
        if self.is_site_slowdown(response):
            return Outcome.FAILURE
        return Outcome.BAN if self.response_is_ban(request, response) else Outcome.SUCCESS

    def is_site_slowdown(self, response: ResponseLike) -> bool:
        """A 429 carrying ``Retry-After``: the site asks every client to slow down.

        The retry middleware and the rate limiter act on it; the proxy only loses
        score (a proxy that keeps getting them still dies by its success rate).
        """
        headers = getattr(response, "headers", None)
        return response.status == 429 and bool(headers and headers.get(b"Retry-After"))

    def judge_exception(self, request: RequestLike, exception: BaseException) -> Outcome | None:
        """BAN, FAILURE, or None: the exception says nothing about the proxy."""
        if self.exception_is_ban(request, exception):
            return Outcome.BAN
        return Outcome.FAILURE if _named(exception, self.FAILURE_ERRORS) else None
