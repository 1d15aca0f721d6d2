"""Per-host token buckets with reservations, and adaptive rates: pure maths, no I/O.

A bucket holds up to *burst* tokens and refills at *rate* tokens a second. A request
takes one token. When none is left it *reserves* the next one: the bucket goes into
debt, its time ``at`` moves into the future to the reserved slot, and the caller is
told how long to wait. This is "virtual scheduling" (GCRA) written as a token bucket
whose clock may run ahead: later callers queue behind the reserved slot, so a waiting
request is guaranteed its slot and in any window of *w* seconds at most
``burst + rate * w`` slots are handed out. A rate that changes only spaces the slots
after the last reserved one; it never moves a slot already handed out.

The adaptive rule (AIMD): a response saying "slow down" (429, 503) multiplies the
host's effective rate by *factor* (never below *min_rate*), once per round: a signal
from a request whose token was taken before the last decrease is ignored, so a volley
of 429s from requests sent at the old rate counts once. After *recover_after*
consecutive successes the rate grows by *step* times the configured rate, up to the
configured rate; any slow-down signal resets the count.

The ``LUA_*`` scripts (the files ``lua/*.lua``) do the same in Redis, atomically, for the
whole cluster, with Redis's clock (``TIME``); :class:`LocalBuckets` does it in memory for
one process.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from importlib.resources import files


@dataclass(frozen=True, slots=True)
class Limit:
    """A host's configured limit: *rate* tokens a second, at most *burst* at once."""

    rate: float
    burst: float


@dataclass(frozen=True, slots=True)
class Bucket:
    """*tokens* (<= burst) as of time *at*; *at* is in the future while slots are reserved."""

    tokens: float
    at: float


@dataclass(frozen=True, slots=True)
class Reservation:
    """Wait *wait* seconds for the slot; ``reserved`` False: it was past the caller's
    maximum wait, so nothing was taken."""

    wait: float
    reserved: bool


@dataclass(frozen=True, slots=True)
class Adaptive:
    """The parameters of the adaptive rule (see the module docstring)."""

    factor: float  # 0 < factor < 1
    min_rate: float  # > 0
    recover_after: int  # >= 1
    step: float  # 0 < step <= 1, a fraction of the configured rate


@dataclass(frozen=True, slots=True)
class Health:
    """Adaptive state of a host: *rate* while lowered (None: the configured rate)."""

    rate: float | None = None
    successes: int = 0
    decreased_at: float = -math.inf


def refill(bucket: Bucket, rate: float, burst: float, now: float) -> float:
    """The tokens of *bucket* at ``max(now, bucket.at)``."""
    return min(burst, bucket.tokens + max(now - bucket.at, 0.0) * rate)


def take(bucket: Bucket | None, limit: Limit, now: float) -> tuple[bool, Bucket]:
    """Take a token if one is there now; never reserves. Returns (taken, new bucket)."""
    bucket = bucket or Bucket(limit.burst, now)
    if bucket.at > now:  # slots are reserved ahead of us
        return False, bucket
    tokens = refill(bucket, limit.rate, limit.burst, now)
    if tokens >= 1:
        return True, Bucket(tokens - 1, now)
    return False, Bucket(tokens, now)


def reserve(
    bucket: Bucket | None, limit: Limit, now: float, max_wait: float = math.inf
) -> tuple[Reservation, Bucket | None]:
    """Take a token, or reserve the next free slot if it is at most *max_wait* away.

    Returns the reservation and the new bucket (*bucket* unchanged if nothing was
    reserved). ``None`` stands for a full bucket.
    """
    start = now if bucket is None else max(now, bucket.at)
    tokens = limit.burst if bucket is None else refill(bucket, limit.rate, limit.burst, now)
    if tokens >= 1:
        slot, left = start, tokens - 1
    else:
        slot, left = start + (1 - tokens) / limit.rate, 0.0
    wait = slot - now
    if wait > max_wait:
        return Reservation(wait, False), bucket
    return Reservation(wait, True), Bucket(left, slot)


def effective_rate(health: Health, configured: float) -> float:
    return configured if health.rate is None else min(health.rate, configured)


def decrease(
    health: Health, configured: float, rule: Adaptive, *, taken_at: float, now: float
) -> tuple[Health, bool]:
    """A "slow down" signal for a request whose token was taken at *taken_at*.

    Returns the new health and whether the effective rate went down.
    """
    current = effective_rate(health, configured)
    if taken_at < health.decreased_at:  # sent at the old rate: already answered
        return replace(health, successes=0), False
    lowered = max(min(rule.min_rate, configured), current * rule.factor)
    return Health(lowered, 0, now), lowered < current


def recover(health: Health, configured: float, rule: Adaptive) -> tuple[Health, bool]:
    """A success. Returns the new health and whether the effective rate went up."""
    if health.rate is None or health.rate >= configured:
        return replace(health, rate=None, successes=0), False
    successes = health.successes + 1
    if successes < rule.recover_after:
        return replace(health, successes=successes), False
    raised = health.rate + rule.step * configured
    return replace(health, rate=None if raised >= configured else raised, successes=0), True


def time_to_full(bucket: Bucket, rate: float, burst: float, now: float) -> float:
    """Seconds until *bucket* is full again (then it equals a fresh one)."""
    return max(bucket.at - now, 0.0) + (burst - min(bucket.tokens, burst)) / rate


class LocalBuckets:
    """Buckets and health of many hosts in one process's memory (single-node mode).

    Callers pass the clock. Once more than *max_hosts* hosts are known, those whose
    bucket is full again and whose rate is not lowered are forgotten.
    """

    def __init__(self, *, max_hosts: int = 10_000) -> None:
        self.buckets: dict[str, Bucket] = {}
        self.health: dict[str, Health] = {}
        self.holders: dict[str, float] = {}  # host -> the slot of the request holding it
        self._full_at: dict[str, float] = {}
        self._prune_above = max_hosts

    def reserve(self, host: str, limit: Limit, now: float, max_wait: float,
                hold: float = 0.0) -> Reservation:
        """As :func:`reserve`; a granted token with *hold* > 0 holds *host* until
        :meth:`ended` (or *hold* seconds): nothing is granted meanwhile."""
        rate = self.rate(host, limit.rate)
        grant, bucket = reserve(self.buckets.get(host), Limit(rate, limit.burst), now, max_wait)
        if bucket is not None:
            if hold > 0 and grant.reserved:
                self.holders[host] = bucket.at
                bucket = Bucket(bucket.tokens, bucket.at + hold)
            self.buckets[host] = bucket
            self._full_at[host] = now + time_to_full(bucket, rate, limit.burst, now)
            if len(self.buckets) > self._prune_above:
                self._forget(now)
        return grant

    def ended(self, host: str, now: float, rate: float, holder: float | None = None) -> float:
        """A request of *host* (a gap's) ended: its bucket is empty from *now*, and its hold
        (if *holder*, its slot, holds the host) is over. The seconds to the next slot."""
        bucket = self.buckets.get(host)
        mine = holder is not None and abs(self.holders.get(host, math.nan) - holder) < 1e-6
        at = now if bucket is None or mine else max(now, bucket.at)
        if mine:
            del self.holders[host]
        self.buckets[host] = Bucket(0.0, at)
        return at - now + 1 / self.rate(host, rate)

    def rate(self, host: str, configured: float) -> float:
        return effective_rate(self.health.get(host, Health()), configured)

    def decrease(self, host: str, configured: float, rule: Adaptive, *, taken_at: float,
                 now: float) -> tuple[float, bool]:
        health, changed = decrease(self.health.get(host, Health()), configured, rule,
                                   taken_at=taken_at, now=now)
        self.health[host] = health
        return effective_rate(health, configured), changed

    def recover(self, host: str, configured: float, rule: Adaptive) -> tuple[float, bool]:
        health, changed = recover(self.health.get(host, Health()), configured, rule)
        self.health[host] = health
        return effective_rate(health, configured), changed

    def _forget(self, now: float) -> None:
        for host, full_at in list(self._full_at.items()):
            if full_at <= now and self.health.get(host, Health()).rate is None:
                del self._full_at[host], self.buckets[host]
                self.health.pop(host, None)
                self.holders.pop(host, None)
        self._prune_above = max(self._prune_above, 2 * len(self.buckets))


# --- Redis ---------------------------------------------------------------------------
# The scripts are the files lua/*.lua beside this module (package data): common.lua, then
# the script's own file.
# KEYS[1] the host's hash {<CRAWL_ID>}:ratelimit:<host> (fields tokens, at, rate, ok, dec),
# KEYS[2] the live overrides {<CRAWL_ID>}:ratelimit:overrides (host -> JSON).
# ARGV[1] "now" in seconds ("" = Redis TIME; tests pass one), ARGV[2] host,
# ARGV[3] rate, ARGV[4] burst (from the settings), ARGV[5] seconds the state outlives a
# full bucket; then the script's own arguments. Numbers go back as strings: Redis turns a
# Lua number into an integer reply.


def _script(name: str) -> str:
    """The Lua file *name* of ``lua/``, after a blank line (the scripts' layout)."""
    return "\n" + files("crawler.politeness").joinpath("lua", name).read_text(encoding="utf-8")


LUA_COMMON = _script("common.lua")

#: ARGV[6] max wait, ARGV[7] seconds a granted token holds the host (0: none; a gap's
#: request holds it until :data:`LUA_ENDED`). Returns {reserved 0/1, wait, effective rate,
#: configured rate, now, bad override 0/1}.
LUA_RESERVE = LUA_COMMON + _script("reserve.lua")

#: ARGV[6] factor, ARGV[7] min rate, ARGV[8] when the request's token was taken (Redis
#: clock). Returns {decreased 0/1, effective rate}.
LUA_DECREASE = LUA_COMMON + _script("decrease.lua")

#: ARGV[6] successes needed, ARGV[7] step (fraction of the configured rate).
#: Returns {recovered 0/1, effective rate}.
LUA_RECOVER = LUA_COMMON + _script("recover.lua")

#: ARGV[6] the ended request's slot if it held the host ("" if not). Returns the seconds to
#: the host's next slot: the bucket is empty from now (or from its latest reserved slot, or
#: another request's hold).
LUA_ENDED = LUA_COMMON + _script("ended.lua")
