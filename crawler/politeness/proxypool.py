"""Proxy bookkeeping: scores, states, probation and ban decisions. No Scrapy, no I/O.

A proxy's :class:`Health` holds moving averages (EWMA) of its success rate and its
latency; its score, ``success * ref / (ref + latency)``, weighs a random choice.
A ban (or a success rate below a floor) makes it *dead*. A dead proxy gets no request:
it is *probed* (:mod:`crawler.politeness.probe`) once its pause is over, a pause that
doubles with each death in a row and each failed probe (``base * 2**n``, capped). A
probe that gets through puts it on *probation*, with fresh averages and half its
weight: a ban kills it again, a few successes make it *alive*, and a run of successes
resets the pause. Which failures count against a proxy at all is decided by
:mod:`crawler.politeness.blame`; the origin's own failures are counted, never scored.
"""

from __future__ import annotations

import hashlib
import json
import random
import time
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import asdict, dataclass, replace
from enum import StrEnum
from urllib.parse import urlsplit

PROBATION_WEIGHT = 0.5  # a proxy on probation is picked half as often as its score says


class State(StrEnum):
    ALIVE = "alive"
    DEAD = "dead"
    PROBATION = "probation"


class Outcome(StrEnum):
    SUCCESS = "success"
    FAILURE = "failure"  # the proxy's fault: counts against its success rate
    BAN = "ban"  # the proxy's fault: kills it
    ORIGIN = "origin"  # a failure seen through the proxy that was the origin's: counted only
    PROBE_OK = "probe_ok"  # a probe of a dead proxy got through: probation
    PROBE_FAILED = "probe_failed"  # a probe of a dead proxy failed: the pause grows


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
    backoff_base: float = 5.0  # seconds before a dead proxy's first probe
    backoff_max: float = 300.0
    probation_successes: int = 2  # successes on probation that make a proxy alive
    reset_after: int = 20  # consecutive successes that reset the pause to the base

    def pause(self, deaths: int, probes: int = 0) -> float:
        """Seconds until the next probe after *deaths* deaths in a row and *probes* failed
        probes since the last one."""
        exponent = min(max(deaths - 1, 0) + max(probes, 0), 64)
        return float(min(self.backoff_max, self.backoff_base * 2.0 ** exponent))


@dataclass(frozen=True)
class Health:
    """What is known about one proxy; immutable, JSON round-trip for the shared store."""

    success: float = 1.0  # EWMA of 1 per success, 0 per failure or ban
    latency: float | None = None  # EWMA of seconds per successful request; None: unmeasured
    state: State = State.ALIVE
    until: float = 0.0  # time.time() a dead proxy is probed next
    deaths: int = 0  # consecutive deaths (the next pause grows with it)
    streak: int = 0  # consecutive successes
    samples: int = 0  # observations applied
    probes: int = 0  # failed probes since it died
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
                   samples=int(data.get("samples", 0)), probes=int(data.get("probes", 0)),
                   proxy_faults=int(data.get("proxy_faults", 0)),
                   origin_faults=int(data.get("origin_faults", 0)))


def _revived(h: Health) -> Health:
    """On probation with fresh averages; the counts of deaths and faults carry on."""
    return Health(state=State.PROBATION, until=h.until, deaths=h.deaths, samples=h.samples,
                  proxy_faults=h.proxy_faults, origin_faults=h.origin_faults)


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

    A ban kills; a failure only lowers the success rate, on probation too, until it
    falls below ``min_success``. An origin failure only counts. A dead proxy changes
    only by a probe; late news of requests in flight when it died keeps its pause.
    """
    h = replace(health, samples=health.samples + 1)
    if outcome is Outcome.ORIGIN:
        return replace(h, origin_faults=h.origin_faults + 1)
    if outcome in (Outcome.PROBE_OK, Outcome.PROBE_FAILED):
        return _probed(h, outcome is Outcome.PROBE_OK, now, policy)
    if outcome is not Outcome.SUCCESS:
        h = replace(h, proxy_faults=h.proxy_faults + 1)
    if h.state is State.DEAD:
        return h
    good = outcome is Outcome.SUCCESS
    success = h.success + policy.alpha * ((1.0 if good else 0.0) - h.success)
    h = replace(h, success=success)
    if not good:
        if outcome is Outcome.BAN or success < policy.min_success:
            deaths = h.deaths + 1
            return replace(h, state=State.DEAD, deaths=deaths, streak=0, probes=0,
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


def _probed(h: Health, ok: bool, now: float, policy: PoolPolicy) -> Health:
    if h.state is not State.DEAD:  # another worker's probe revived it first
        return h
    if ok:
        return _revived(h)
    probes = h.probes + 1
    return replace(h, probes=probes, until=now + policy.pause(h.deaths, probes))


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
        return self.health.get(proxy_id, Health())

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
        """When the first dead member is probed next (``clock()`` time), or None."""
        times = [h.until for i in self.proxies if (h := self.get(i)).state is State.DEAD]
        return min(times, default=None)

    def due(self, now: float | None = None) -> list[Proxy]:
        """The dead members whose pause is over: the ones to probe."""
        at = self.clock() if now is None else now
        return [p for i, p in self.proxies.items()
                if (h := self.get(i)).state is State.DEAD and at >= h.until]

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
