"""Where the rate limiter keeps its buckets, and its settings (``RATELIMIT_*``).

:class:`RedisLimiter` shares every host's bucket with the whole cluster in Redis, one
``EVALSHA`` of :data:`crawler.politeness.tokenbucket.LUA_RESERVE` per request; :class:`LocalLimiter`
keeps them in this process's memory (single-node mode). :class:`RateLimitConfig` reads
and validates every setting.
"""

from __future__ import annotations

import math
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

from crawler.config import readers as config
from crawler.config.keys import CrawlKeys
from crawler.config.readers import SettingError
from crawler.connections.options import connect_timeout
from crawler.politeness.tokenbucket import (
    LUA_DECREASE,
    LUA_ENDED,
    LUA_RECOVER,
    LUA_RESERVE,
    Adaptive,
    Limit,
    LocalBuckets,
)

if TYPE_CHECKING:
    import redis.asyncio as aioredis
    from scrapy.settings import BaseSettings

@dataclass(frozen=True, slots=True)
class RateLimitConfig:
    """Every ``RATELIMIT_*`` setting, and the Redis ones the limiter uses, checked once."""

    default: Limit | None  # None (RATELIMIT_RATE 0): no rate for a host not named elsewhere
    domains: dict[str, Limit]
    max_wait: float
    adaptive: Adaptive | None
    decrease_on: frozenset[int]
    state_ttl: float
    unrated_rate: float  # a rate-less host that answers 429/503 gets this rate (0: none)
    backoff: float
    backoff_max: float
    redis_url: str
    redis_params: dict[str, Any]
    connect_timeout: float
    crawl_id: str

    def limit(self, host: str, gap: float | None = None) -> Limit | None:
        """*host*'s limit: its ``RATELIMIT_DOMAINS`` entry, else ``RATELIMIT_RATE``'s, made
        stricter by the least *gap* between two of its requests (its robots.txt Crawl-delay,
        ``DOWNLOAD_DELAY``): one request per gap, a burst of one. None: nothing limits it."""
        limit = self.domains.get(host, self.default)
        if not gap or gap <= 0:
            return limit
        rate = 1.0 / (gap * GAP_MARGIN + GAP_SLACK)
        return Limit(rate if limit is None else min(rate, limit.rate), 1.0)

    def summary(self) -> str:
        """Which hosts have which rate, for the start-up line."""
        default = self.default
        rate = f"{default.rate:g} requests/s, burst {default.burst:g}" if default else "no rate"
        adopted = (f"{self.unrated_rate:g} requests/s for a host with none once it answers "
                   "429 or 503" if self.unrated_rate > 0 and self.adaptive else
                   "no rate for a host with none whatever it answers")
        return (f"{rate} per host ({len(self.domains)} hosts configured, robots.txt "
                f"Crawl-delays, and {adopted})")

    @classmethod
    def from_settings(cls, s: BaseSettings, spider_name: str) -> RateLimitConfig:
        """:class:`SettingError` names a bad setting."""
        rate = _setting(s, "RATELIMIT_RATE", low=0)
        burst = _setting(s, "RATELIMIT_BURST", low=1)
        default = Limit(rate, burst) if rate > 0 else None
        domains = _domains(s, rate or None, burst)
        backoff = _setting(s, "RATELIMIT_RETRY_BACKOFF", low=0, above=True)
        return cls(
            default=default, domains=domains,
            max_wait=_setting(s, "RATELIMIT_MAX_WAIT", low=0, above=True),
            adaptive=_adaptive(s), decrease_on=_statuses(s),
            state_ttl=_setting(s, "RATELIMIT_STATE_TTL", low=0),
            unrated_rate=_setting(s, "RATELIMIT_UNRATED_RATE", low=0),
            backoff=backoff,
            backoff_max=max(backoff, _setting(s, "RATELIMIT_RETRY_BACKOFF_MAX", low=0)),
            redis_url=config.get_str(s, "REDIS_URL"),
            redis_params=config.get_dict(s, "REDIS_PARAMS"),
            connect_timeout=connect_timeout(s), crawl_id=config.crawl_id(s, spider_name),
        )



#: a gap is kept 3 % and 20 ms wide: the time from a request's token to its arrival at the
#: host varies by tens of milliseconds under load (0.977 s between two requests to a host
#: asking for Crawl-delay 1, read at the origin in a full test run, with tokens 1 s apart;
#: 0.094 s for a 0.1 s DOWNLOAD_DELAY with 3 % alone)
GAP_MARGIN = 1.03
GAP_SLACK = 0.02


def _finite(name: str, number: float) -> float:
    if not math.isfinite(number):
        raise SettingError(name, f"expected a finite number, got {number}")
    return number


def _setting(settings: BaseSettings, name: str, *, low: float, above: bool = False,
             high: float | None = None) -> float:
    """Setting *name*, a finite number >= *low* (> if *above*) and <= *high*."""
    return _finite(name, config.get_float(settings, name, minimum=low, maximum=high,
                                          exclusive_min=above))


def _number(name: str, value: Any, *, low: float, above: bool = False) -> float:
    """*value* of a ``RATELIMIT_DOMAINS`` entry: a number (not a string) >= *low*."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    if not ok or value < low or (above and value == low):
        raise SettingError(name, f"expected a number {'>' if above else '>='} {low}, "
                                 f"got {value!r}")
    return _finite(name, float(value))


def _domains(settings: BaseSettings, rate: float | None, burst: float) -> dict[str, Limit]:
    """``RATELIMIT_DOMAINS``; an entry without a rate needs ``RATELIMIT_RATE`` (*rate*)."""
    domains: dict[str, Limit] = {}
    for host, spec in config.get_dict(settings, "RATELIMIT_DOMAINS").items():
        if not isinstance(spec, dict) or not spec or not set(spec) <= {"rate", "burst"}:
            raise SettingError("RATELIMIT_DOMAINS", f"{host!r}: expected a dict with 'rate' "
                                                    f"and/or 'burst', got {spec!r}")
        value = _number(f"RATELIMIT_DOMAINS[{host!r}]['rate']",
                        spec.get("rate", rate), low=0, above=True)
        domains[normal_host(str(host))] = Limit(value, _number(
            f"RATELIMIT_DOMAINS[{host!r}]['burst']", spec.get("burst", burst), low=1))
    return domains


def _statuses(settings: BaseSettings) -> frozenset[int]:
    value = config.raw(settings, "RATELIMIT_DECREASE_ON")
    items = value.split(",") if isinstance(value, str) else value
    try:
        codes = frozenset(int(str(code).strip()) for code in items if str(code).strip())
    except (TypeError, ValueError):
        codes = frozenset({0})
    if any(not 100 <= code <= 599 for code in codes):
        raise SettingError("RATELIMIT_DECREASE_ON", f"expected HTTP statuses, got {value!r}")
    return codes


def _adaptive(s: BaseSettings) -> Adaptive | None:
    rule = Adaptive(
        factor=_setting(s, "RATELIMIT_DECREASE_FACTOR", low=0, above=True, high=1),
        min_rate=_setting(s, "RATELIMIT_MIN_RATE", low=0, above=True),
        recover_after=config.get_int(s, "RATELIMIT_RECOVER_AFTER", minimum=1),
        step=_setting(s, "RATELIMIT_RECOVER_STEP", low=0, above=True, high=1),
    )
    return rule if config.get_bool(s, "RATELIMIT_ADAPTIVE") else None


def normal_host(host: str) -> str:
    return host.strip().lower().rstrip(".")


class Grant(NamedTuple):
    reserved: bool  # False: the slot is past RATELIMIT_MAX_WAIT and was not taken
    wait: float  # seconds until the slot
    rate: float  # the host's effective rate (tokens/s)
    configured: float  # its configured rate (settings or live override)
    now: float  # the limiter's clock when the token was taken
    bad_override: bool = False


class Limiter(Protocol):
    async def reserve(self, host: str, limit: Limit, max_wait: float | None = None,
                      hold: float = 0.0) -> Grant: ...
    async def decrease(self, host: str, limit: Limit, taken_at: float) -> tuple[bool, float]: ...
    async def recover(self, host: str, limit: Limit) -> tuple[bool, float]: ...
    async def ended(self, host: str, limit: Limit, holder: float | None = None) -> float: ...
    async def close(self) -> None: ...


class RedisLimiter:
    """Buckets of every worker in Redis: ``{<CRAWL_ID>}:ratelimit:<host>`` hashes, and the
    live overrides in the hash ``{<CRAWL_ID>}:ratelimit:overrides`` (host -> JSON)."""

    def __init__(self, client: aioredis.Redis, crawl_id: str, cfg: RateLimitConfig, *,
                 release: Callable[[aioredis.Redis], Awaitable[None]] | None = None) -> None:
        """*release* gives *client* back at :meth:`close` (by default the limiter closes it)."""
        self.client, self.cfg, self._release = client, cfg, release
        self.keys = CrawlKeys(crawl_id)
        self.overrides_key = self.keys.ratelimit_overrides
        self._reserve = client.register_script(LUA_RESERVE)
        self._decrease = client.register_script(LUA_DECREASE)
        self._recover = client.register_script(LUA_RECOVER)
        self._ended = client.register_script(LUA_ENDED)

    def key(self, host: str) -> str:
        return self.keys.ratelimit_bucket(host)

    async def _run(self, script: Any, host: str, limit: Limit, *extra: object) -> Any:
        args = ["", host, repr(limit.rate), repr(limit.burst), repr(self.cfg.state_ttl), *extra]
        return await script(keys=[self.key(host), self.overrides_key], args=args)

    async def reserve(self, host: str, limit: Limit, max_wait: float | None = None,
                      hold: float = 0.0) -> Grant:
        """A token, or the next slot if at most *max_wait* (``RATELIMIT_MAX_WAIT``) away; with
        *hold*, the token holds the host until :meth:`ended` (or *hold* seconds)."""
        wait_max = self.cfg.max_wait if max_wait is None else max_wait
        ok, wait, rate, configured, now, bad = await self._run(
            self._reserve, host, limit, repr(wait_max), repr(hold))
        return Grant(bool(ok), float(wait), float(rate), float(configured), float(now),
                     bool(bad))

    async def decrease(self, host: str, limit: Limit, taken_at: float) -> tuple[bool, float]:
        assert self.cfg.adaptive is not None
        rule = self.cfg.adaptive
        changed, rate = await self._run(self._decrease, host, limit, repr(rule.factor),
                                        repr(rule.min_rate), repr(taken_at))
        return bool(changed), float(rate)

    async def recover(self, host: str, limit: Limit) -> tuple[bool, float]:
        assert self.cfg.adaptive is not None
        rule = self.cfg.adaptive
        changed, rate = await self._run(self._recover, host, limit, rule.recover_after,
                                        repr(rule.step))
        return bool(changed), float(rate)

    async def ended(self, host: str, limit: Limit, holder: float | None = None) -> float:
        """A request of *host*, whose limit is a gap's, ended: its next one goes a gap later
        (its hold, if *holder* is its slot, is over). The seconds to the host's next slot."""
        return float(await self._run(self._ended, host, limit,
                                     "" if holder is None else repr(holder)))

    async def close(self) -> None:
        if self._release is None:
            await self.client.aclose()
        else:
            await self._release(self.client)


class LocalLimiter:
    """Buckets in this process's memory (single-node mode): no live overrides."""

    def __init__(self, cfg: RateLimitConfig) -> None:
        self.cfg = cfg
        self.buckets = LocalBuckets()

    async def reserve(self, host: str, limit: Limit, max_wait: float | None = None,
                      hold: float = 0.0) -> Grant:
        now = time.time()
        rate = self.buckets.rate(host, limit.rate)
        grant = self.buckets.reserve(host, limit, now,
                                     self.cfg.max_wait if max_wait is None else max_wait, hold)
        return Grant(grant.reserved, grant.wait, rate, limit.rate, now)

    async def decrease(self, host: str, limit: Limit, taken_at: float) -> tuple[bool, float]:
        assert self.cfg.adaptive is not None
        rate, changed = self.buckets.decrease(host, limit.rate, self.cfg.adaptive,
                                              taken_at=taken_at, now=time.time())
        return changed, rate

    async def recover(self, host: str, limit: Limit) -> tuple[bool, float]:
        assert self.cfg.adaptive is not None
        rate, changed = self.buckets.recover(host, limit.rate, self.cfg.adaptive)
        return changed, rate

    async def ended(self, host: str, limit: Limit, holder: float | None = None) -> float:
        return self.buckets.ended(host, time.time(), limit.rate, holder)

    async def close(self) -> None:
        return None
