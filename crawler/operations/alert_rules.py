"""Alert rules: pure evaluation of a crawl's state against thresholds.

No I/O and no clock of its own: :func:`evaluate` turns an :class:`AlertInput`
(this worker's stats, the heartbeat times of ``{CRAWL_ID}:workers``, the Bloom
filter's fill and whether it exists, how long the lag has been growing) into a list of
:class:`Alert`. :class:`LagTracker` keeps the history the lag rule needs,
with the time passed in, so tests drive it with a fake clock.
:mod:`crawler.extensions.alerts` does the I/O. See ``docs/alerts.md``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from crawler.frontier.crawlstate import is_lost

RULES = ("failure_rate", "lag_growing", "proxies_low", "bloom_fill", "node_silent",
         "bloom_missing", "storage_stalled", "kafka_refused", "state_lost")


@dataclass(frozen=True)
class Alert:
    name: str  # one of RULES
    severity: str  # "warning" or "critical"
    message: str
    value: float
    threshold: float


@dataclass(frozen=True)
class Thresholds:
    failure_rate: float = 0.05  # failures / (pages + failures) above this
    lag_growing_minutes: float = 10.0  # lag not falling and higher than at the start
    min_proxies: int = 1  # fewer alive proxies than this (only with a proxy pool)
    bloom_fill: float = 0.9  # Bloom filter fill above this
    node_silent_seconds: float = 30.0  # a heartbeat older than this


@dataclass(frozen=True)
class AlertInput:
    """One read of what the rules look at."""

    now: float  # Redis's clock at the read (time.time() without Redis)
    stats: Mapping[str, Any] = field(default_factory=dict)
    heartbeats: Mapping[str, float] = field(default_factory=dict)  # worker -> last beat, Redis time
    bloom_fill: float | None = None  # None: no filter (yet)
    bloom_exists: bool | None = None  # whether {CRAWL_ID}:bloom is in Redis; None: not read
    lag_growing: tuple[float, int, int] | None = None  # (seconds, lag at start, lag now)


def _up(value: float, digits: int) -> float:
    """*value* rounded up to *digits* decimals: a value over its threshold is never
    shown as the threshold itself (10.04 s silent over a 10 s limit is 10.1, not 10.0)."""
    scale = 10 ** digits
    return math.ceil(round(value * scale, 6)) / scale


def _number(value: Any) -> float:
    return float(value) if isinstance(value, (int, float)) else 0.0


def failure_rate(stats: Mapping[str, Any]) -> float | None:
    """Requests given up on per outcome (pages + failures); None before any outcome."""
    failures = max(_number(stats.get("retry/failed")), _number(stats.get("retry/max_reached")))
    pages = _number(stats.get("response_received_count"))
    return failures / (pages + failures) if pages + failures else None


def _failure_rule(data: AlertInput, limit: Thresholds) -> Alert | None:
    rate = failure_rate(data.stats)
    if rate is None or rate <= limit.failure_rate:
        return None
    return Alert("failure_rate", "warning",
                 f"failure rate {_up(rate, 3):.1%} above {limit.failure_rate:.1%}",
                 _up(rate, 4), limit.failure_rate)


def _lag_rule(data: AlertInput, limit: Thresholds) -> Alert | None:
    if data.lag_growing is None:
        return None
    seconds, start, now = data.lag_growing
    minutes = seconds / 60
    if minutes < limit.lag_growing_minutes or now <= start:
        return None
    return Alert("lag_growing", "warning",
                 f"frontier lag grew from {start} to {now} records over {minutes:.1f} min "
                 f"(limit {limit.lag_growing_minutes:g} min)",
                 round(minutes, 2), limit.lag_growing_minutes)


def _proxy_rule(data: AlertInput, limit: Thresholds) -> Alert | None:
    if "proxy/pool/alive" not in data.stats:  # no proxy pool in this crawl
        return None
    alive = _number(data.stats["proxy/pool/alive"])
    if alive >= limit.min_proxies:
        return None
    return Alert("proxies_low", "critical",
                 f"{alive:.0f} healthy proxies, fewer than {limit.min_proxies}",
                 alive, float(limit.min_proxies))


def _bloom_rule(data: AlertInput, limit: Thresholds) -> Alert | None:
    fill = data.bloom_fill
    if fill is None or fill <= limit.bloom_fill:
        return None
    return Alert("bloom_fill", "warning",
                 f"Bloom filter {_up(fill, 3):.1%} full, above {limit.bloom_fill:.0%}",
                 _up(fill, 4), limit.bloom_fill)


def _silent_rule(data: AlertInput, limit: Thresholds) -> Alert | None:
    beats = data.heartbeats
    silent = sorted(w for w, ts in beats.items()
                    if is_lost(data.now, ts, limit.node_silent_seconds))
    if not silent:
        return None
    oldest = _up(max(data.now - beats[w] for w in silent), 1)
    return Alert("node_silent", "critical",
                 f"{len(silent)} node(s) silent for more than {limit.node_silent_seconds:g}s "
                 f"(oldest {oldest:g}s): {', '.join(silent)}",
                 oldest, limit.node_silent_seconds)


def _missing_rule(data: AlertInput, limit: Thresholds) -> Alert | None:
    """This worker found its Bloom filter gone (``bloom/missing``) and it is still gone."""
    losses = _number(data.stats.get("bloom/missing"))
    if not losses or data.bloom_exists is not False:
        return None
    return Alert("bloom_missing", "critical",
                 f"the Bloom filter is missing from Redis (lost {losses:.0f} time(s) seen by "
                 "this worker): the workers pause until Redis is restored or a worker "
                 "creates an empty filter (BLOOM_ON_MISSING)", losses, 0.0)


def _storage_rule(data: AlertInput, limit: Thresholds) -> Alert | None:
    """This worker's MongoDB writes fail and are being retried (``mongo/stalled``)."""
    if not _number(data.stats.get("mongo/stalled")):
        return None
    stalls = _number(data.stats.get("mongo/stalls"))
    return Alert("storage_stalled", "critical",
                 "MongoDB writes fail and are retried: items wait and their requests are not "
                 f"acknowledged ({stalls:.0f} stall(s) so far; the worker log names the error)",
                 stalls, 0.0)


def _refused_rule(data: AlertInput, limit: Thresholds) -> Alert | None:
    """The broker's ACLs or login refuse this worker's sends or commits (``kafka/refused``)."""
    if not _number(data.stats.get("kafka/refused")):
        return None
    stalls = _number(data.stats.get("kafka/refusals"))
    return Alert("kafka_refused", "critical",
                 "the broker refuses this worker's sends or offset commits (ACLs or login): "
                 "they are retried, and its requests wait unacknowledged until the rights are "
                 f"back ({stalls:.0f} stall(s) of its sends so far; the worker log names the "
                 "error)", stalls, 0.0)


def _lost_rule(data: AlertInput, limit: Thresholds) -> Alert | None:
    """This worker found that Redis had lost the crawl's state (``crawl/state_lost``)."""
    if not _number(data.stats.get("crawl/state_lost")):
        return None
    took = data.stats.get("crawl/state_repair_seconds")
    done = (f"repaired in {_number(took):.1f} s" if took is not None
            else "being repaired, or the worker stops (CRAWL_STATE_LOST)")
    return Alert("state_lost", "critical",
                 f"Redis lost the crawl's state (a restart without persistence, FLUSHALL?): "
                 f"{done}; the ledger's counters start again from the repair",
                 _number(data.stats.get("crawl/state_losses")), 0.0)


_RULES = (_failure_rule, _lag_rule, _proxy_rule, _bloom_rule, _silent_rule, _missing_rule,
          _storage_rule, _refused_rule, _lost_rule)


def evaluate(data: AlertInput, limit: Thresholds) -> list[Alert]:
    """The alerts that hold for *data*, in the order of :data:`RULES`."""
    return [alert for rule in _RULES if (alert := rule(data, limit)) is not None]


class LagTracker:
    """How long the crawl's lag has been growing.

    The lag is "growing" since the last sample at which it fell (or the first
    sample): :meth:`update` returns ``(seconds since then, lag then, lag now)``.
    An unknown lag (None) is skipped; it neither starts nor breaks a run.
    """

    def __init__(self) -> None:
        self.start: tuple[float, int] | None = None
        self.last: tuple[float, int] | None = None

    def update(self, now: float, lag: int | None) -> tuple[float, int, int] | None:
        if lag is None:
            return self.current()
        if self.last is None or lag < self.last[1]:
            self.start = (now, lag)
        self.last = (now, lag)
        return self.current()

    def current(self) -> tuple[float, int, int] | None:
        if self.start is None or self.last is None:
            return None
        return self.last[0] - self.start[0], self.start[1], self.last[1]


def summed_lag(docs: Mapping[str, Mapping[str, Any]], now: float, fresh: float) -> int | None:
    """The lag summed over heartbeats at most *fresh* seconds old; None if one is unknown."""
    live = [d for d in docs.values() if not is_lost(now, float(d["ts"]), fresh)]
    if not live or any(d.get("lag") is None for d in live):
        return None
    return sum(int(d["lag"]) for d in live)

