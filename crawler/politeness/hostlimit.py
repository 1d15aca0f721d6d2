"""Cluster-wide per-host concurrency and delay: the settings (``HOSTLIMIT_*``) and where the
shares live.

Every worker holds a *share* of each host's ``HOSTLIMIT_CONCURRENCY``: a number of requests it
may have in flight to that host. The shares live in Redis, one hash per host
(``{<CRAWL_ID>}:slots:<host>``, field: worker id), and are renewed for every host a worker
has work for in one ``EVALSHA`` of ``lua/host_slots.lua`` every ``HOSTLIMIT_INTERVAL``
seconds (:class:`RedisSlotStore`), never per request. The script hands out max-min fair
shares of the limit among the workers that want the host and never more than the limit
minus what the others hold, counting a worker's in-flight requests as held until it renews
again; an entry not renewed for ``HOSTLIMIT_TTL`` seconds (a worker killed) is dropped, and
its share goes to the others at their next renewal. :class:`MemorySlotStore` is the same
rule in Python, for unit tests and single-process use.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib.resources import files
from typing import TYPE_CHECKING, NamedTuple, Protocol

from crawler.config import readers as config
from crawler.config.keys import CrawlKeys
from crawler.config.readers import SettingError

if TYPE_CHECKING:
    import redis.asyncio as aioredis
    from scrapy.settings import BaseSettings

LUA_HOST_SLOTS = files("crawler.politeness").joinpath("lua", "host_slots.lua").read_text(
    encoding="utf-8")


@dataclass(frozen=True, slots=True)
class HostLimitConfig:
    """The ``HOSTLIMIT_*`` settings, checked once."""

    enabled: bool
    concurrency: int  # requests in flight to one host, across the cluster
    delay: float  # seconds between two requests to one host, across the cluster
    ttl: float  # seconds a worker's share lives without a renewal
    interval: float  # seconds between two renewals

    @classmethod
    def from_settings(cls, s: BaseSettings) -> HostLimitConfig:
        """``HOSTLIMIT_CONCURRENCY=0`` is ``CONCURRENT_REQUESTS_PER_DOMAIN`` (what one stock
        Scrapy process would send to a host) and ``HOSTLIMIT_DELAY=-1`` is ``DOWNLOAD_DELAY``."""
        concurrency = config.get_int(s, "HOSTLIMIT_CONCURRENCY", minimum=0)
        delay = config.get_float(s, "HOSTLIMIT_DELAY", minimum=-1)
        values = cls(
            enabled=config.get_bool(s, "HOSTLIMIT_ENABLED"),
            concurrency=concurrency or config.get_int(s, "CONCURRENT_REQUESTS_PER_DOMAIN",
                                                      minimum=1),
            delay=config.get_float(s, "DOWNLOAD_DELAY", minimum=0) if delay < 0 else delay,
            ttl=config.get_float(s, "HOSTLIMIT_TTL", minimum=1),
            interval=config.get_float(s, "HOSTLIMIT_INTERVAL", minimum=0.01),
        )
        if values.interval * 3 > values.ttl:
            raise SettingError("HOSTLIMIT_INTERVAL", "must be at most a third of HOSTLIMIT_TTL")
        return values


class Demand(NamedTuple):
    """What a worker asks for one host: *want* requests in flight; *in_flight*, the most it
    may have in flight until the answer comes (its requests in flight, or its current share
    if more: it goes on using that meanwhile)."""

    host: str
    limit: int
    want: int
    in_flight: int


class SlotStore(Protocol):
    async def renew(self, worker: str, demands: Sequence[Demand], ttl: float) -> list[int]: ...


class RedisSlotStore:
    """The shares in Redis: one ``EVALSHA`` per renewal, for every host at once."""

    def __init__(self, client: aioredis.Redis, crawl_id: str) -> None:
        self.keys = CrawlKeys(crawl_id)
        self._script = client.register_script(LUA_HOST_SLOTS)

    async def renew(self, worker: str, demands: Sequence[Demand], ttl: float) -> list[int]:
        args: list[str | int] = [worker, int(ttl * 1000)]
        for d in demands:
            args += [d.limit, d.want, d.in_flight]
        keys = [self.keys.host_slots(d.host) for d in demands]
        grants = await self._script(keys=keys, args=args)
        return [int(g) for g in grants]


@dataclass
class _Entry:
    held: int
    want: int
    expires: float
    served: float


class MemorySlotStore:
    """:file:`lua/host_slots.lua`'s rule in this process's memory (tests, one process)."""

    def __init__(self, clock: Callable[[], float] | None = None) -> None:
        self._clock = clock or time.time
        self.hosts: dict[str, dict[str, _Entry]] = {}

    async def renew(self, worker: str, demands: Sequence[Demand], ttl: float) -> list[int]:
        return [self.renew_one(worker, d, ttl) for d in demands]

    def renew_one(self, worker: str, d: Demand, ttl: float) -> int:
        now = self._clock()
        entries = self.hosts.setdefault(d.host, {})
        mine = entries.get(worker)
        served = mine.served if mine else 0.0
        live = {w: e for w, e in entries.items() if w != worker and e.expires > now}
        others = sum(e.held for e in live.values())
        grant = 0
        if d.want > 0:
            wanting = [(e.want, w, e.served) for w, e in live.items() if e.want > 0]
            wanting.append((d.want, worker, served))
            grant = min(fair_share(wanting, d.limit, worker), max(d.limit - others, 0))
        served = now if grant > 0 else served
        held = max(grant, d.in_flight)
        entries.clear()
        entries.update(live)
        if held > 0 or d.want > 0:
            entries[worker] = _Entry(held, d.want, now + ttl, served)
        return grant


def fair_share(wanting: list[tuple[int, str, float]], limit: int, me: str) -> int:
    """*me*'s max-min fair share of *limit* among ``(want, worker, last served)`` entries:
    the smallest wants first, then the most recently served (the Lua script's order)."""
    wanting.sort(key=lambda e: (e[0], -e[2], e[1]))
    remaining, count = limit, len(wanting)
    for k, (want, worker, _served) in enumerate(wanting):
        alloc = min(want, remaining // (count - k))
        if worker == me:
            return alloc
        remaining -= alloc
    return 0
