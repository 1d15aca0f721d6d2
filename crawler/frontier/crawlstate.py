"""Crawl-wide state in Redis: worker heartbeats and "is the whole crawl drained?".

Each worker writes a heartbeat (its partitions, lag, whether anything is
buffered, in flight or being sent). The crawl is drained when every live worker
is idle, their partitions together cover every partition of the crawl's
topics, and the summed lag is zero (delivery trap 7: zero lag alone is not
enough). Workers exit once that has held for ``CRAWL_IDLE_TIMEOUT`` seconds.

Freshness is judged on Redis's clock only: a heartbeat is stamped with ``TIME``
inside the script that writes it, and readers compare it with ``TIME`` read in the
same transaction as the hash. The clocks of the worker hosts never meet, so a
skewed host is neither shown lost nor forgotten. One rule says "lost" (:func:`stale_after`,
:func:`is_lost`) and one parser reads heartbeats (:func:`parse_heartbeats`,
:func:`read_workers`), for the drained check, ``scrapy cluster status``, the dashboard,
``purge`` and the alerts. A heartbeat of an older writer, stamped with its own clock, is
judged by when the reader saw it change (:class:`HeartbeatClock`).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import redis.asyncio as aioredis
from scrapy.settings import BaseSettings

from crawler.config.keys import CrawlKeys
from crawler.connections.records import UNREADABLE
from crawler.connections.retry import RedisRetry, retry
from crawler.frontier.config import heartbeat_interval, session_timeout_ms

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class WorkerState:
    worker: str
    idle: bool
    assigned: list[str]
    lag: int | None
    ts: float  # Redis time of the heartbeat
    info: dict[str, Any]


def is_drained(states: list[WorkerState], partitions: set[str]) -> tuple[bool, str]:
    """Whether these fresh worker states show a drained crawl, and why not."""
    if not states:
        return False, "no live worker"
    busy = [s.worker for s in states if not s.idle]
    if busy:
        return False, f"busy: {', '.join(busy)}"
    unknown = [s.worker for s in states if s.lag is None]
    if unknown:
        return False, f"lag unknown: {', '.join(unknown)}"
    lag = sum(s.lag or 0 for s in states)
    if lag:
        return False, f"lag {lag}"
    covered = {p for s in states for p in s.assigned}
    missing = partitions - covered
    if missing:
        return False, f"{len(missing)} partitions unassigned"
    return True, "drained"


def stale_after(heartbeat_interval: float, session_timeout_ms: int) -> float:
    """Seconds (Redis time) without a heartbeat after which a worker is lost: three
    missed beats, and never before Kafka itself gives its partitions away."""
    return max(3 * heartbeat_interval, session_timeout_ms / 1000 + 1)


def stale_after_setting(settings: BaseSettings) -> float:
    """:func:`stale_after` of the crawl's settings (``CRAWL_HEARTBEAT_INTERVAL``,
    ``KAFKA_SESSION_TIMEOUT_MS``), validated: the one rule for every reader of heartbeats."""
    return stale_after(heartbeat_interval(settings), session_timeout_ms(settings))


def is_lost(now: float, ts: float, stale_after: float) -> bool:
    """Whether a heartbeat written at *ts* is, at *now* (both Redis time), older than
    *stale_after* seconds: the one comparison behind "lost", "live" and "silent"."""
    return now - ts > stale_after


def parse_heartbeats(raw: Mapping[Any, Any]) -> tuple[dict[str, dict[str, Any]], list[str]]:
    """The heartbeat hash as {worker: document} (``ts`` a float, ``info`` a dict), and
    the sorted ids of the entries that are not heartbeats: the one heartbeat parser."""
    workers: dict[str, dict[str, Any]] = {}
    unreadable: list[str] = []
    for name, value in raw.items():
        try:
            doc = json.loads(value)
            doc["ts"] = float(doc["ts"])
            doc["info"] = dict(doc.get("info") or {})
        except UNREADABLE:
            unreadable.append(_text(name))
            continue
        workers[_text(name)] = doc
    return workers, sorted(unreadable)


# KEYS[2]: the recrawl hash; with RECRAWL_AFTER > 0 a claim lasts one interval at most, so
# a seed given again after it is claimed again (and the dupefilter says if it is due).
_CLAIM = """
local owner = redis.call('GET', KEYS[1])
if not owner then
  local ttl = tonumber(ARGV[2])
  local after = tonumber(redis.call('HGET', KEYS[2], 'after'))
  if after and after > 0 then ttl = math.max(1, math.min(ttl, math.floor(after * 1000))) end
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ttl)
  return 1
end
if owner == ARGV[1] then return 1 end
return 0
"""
# ARGV[2] is the heartbeat's JSON object without its opening brace
_BEAT = """
local t = redis.call('TIME')
local now = string.format('%d.%06d', t[1], t[2])
redis.call('HSET', KEYS[1], ARGV[1], '{"ts":' .. now .. ',"clock":"redis",' .. ARGV[2])
return now
"""

CONTROLS = ("pause", "resume", "stop")
STOP_TTL_MS = 30_000  # every live worker reads the control key once per heartbeat
FORGET_AFTER = 600.0  # seconds a silent worker stays listed (as lost) in the heartbeat hash
REDIS_CLOCK = "redis"  # the "clock" field of a heartbeat stamped by Redis


async def server_time(client: aioredis.Redis) -> float:
    """Redis's clock, in seconds since the epoch."""
    seconds, micros = await client.time()
    return seconds + micros / 1e6


async def read_heartbeats(client: aioredis.Redis, key: str) -> tuple[float, dict[Any, Any]]:
    """Redis's clock and the heartbeat hash *key*, read in one transaction."""
    async with client.pipeline(transaction=True) as pipe:
        pipe.time()
        pipe.hgetall(key)
        (seconds, micros), raw = await pipe.execute()
    return seconds + micros / 1e6, raw


async def read_workers(client: aioredis.Redis, key: str, clock: HeartbeatClock,
                       ) -> tuple[float, dict[str, dict[str, Any]], list[str]]:
    """Redis's clock, every heartbeat of the hash *key* (:func:`parse_heartbeats`) with its
    ``ts`` when it was written on Redis's clock (*clock*), and the unreadable entries."""
    now, raw = await read_heartbeats(client, key)
    values = {_text(name): value for name, value in raw.items()}
    workers, unreadable = parse_heartbeats(values)
    for worker, doc in workers.items():
        doc["ts"] = clock.written_at(worker, values[worker], doc, now)
    return now, workers, unreadable


class HeartbeatClock:
    """When each heartbeat was written, on Redis's clock.

    A heartbeat stamped by Redis carries it in ``ts``. One written by an older
    version carries its writer's clock, which is not trusted: it counts as written
    when this reader saw its value change, and at first sight at its own ``ts`` if
    that is not in the future. Such an entry is forgotten only once this reader has
    watched it unchanged for ``FORGET_AFTER`` seconds.
    """

    def __init__(self) -> None:
        self._seen: dict[str, tuple[Any, float, float]] = {}  # value, written, unchanged since

    def written_at(self, worker: str, raw: Any, doc: dict[str, Any], now: float) -> float:
        if doc.get("clock") == REDIS_CLOCK:
            return float(doc["ts"])
        seen = self._seen.get(worker)
        if seen is None:
            seen = (raw, min(now, float(doc.get("ts") or now)), now)
        elif seen[0] != raw:
            seen = (raw, now, now)
        self._seen[worker] = seen
        return seen[1]

    def silent_for(self, worker: str, doc: dict[str, Any], now: float) -> float:
        """Seconds the heartbeat is known not to have changed (call after written_at)."""
        if doc.get("clock") == REDIS_CLOCK:
            return now - float(doc["ts"])
        return now - self._seen[worker][2]

    def forget(self, worker: str) -> None:
        self._seen.pop(worker, None)


class CrawlState:
    """Heartbeats of the workers of one crawl, in a Redis hash."""

    def __init__(self, client: aioredis.Redis, crawl_id: str, *, stale_after: float) -> None:
        self.client = client
        self.crawl_id = crawl_id
        self.keys = CrawlKeys(crawl_id)
        self.key = self.keys.workers
        self.control_key = self.keys.control
        self._claim = client.register_script(_CLAIM)
        self._beat = client.register_script(_BEAT)
        self.stale_after = stale_after
        self.clock = HeartbeatClock()
        self.retry = RedisRetry("seed claims")

    async def beat(self, worker: str, *, idle: bool, assigned: list[str], lag: int | None,
                   info: dict[str, Any]) -> float:
        """Write this worker's heartbeat, stamped by Redis; returns Redis's time."""
        body = json.dumps({"idle": idle, "assigned": assigned, "lag": lag, "info": info})
        return float(_text(await self._beat(keys=[self.key], args=[worker, body[1:]])))

    async def workers(self) -> list[WorkerState]:
        """The workers whose heartbeat is fresh (on Redis's clock).

        A silent worker's entry is kept for ``FORGET_AFTER`` seconds, so that
        ``scrapy cluster status`` and the node-silent alert can show it as lost.
        """
        now, docs, stale = await read_workers(self.client, self.key, self.clock)
        fresh: list[WorkerState] = []
        for worker, doc in docs.items():
            try:
                state = WorkerState(worker, bool(doc["idle"]), list(doc["assigned"]),
                                    doc["lag"], doc["ts"], doc["info"])
            except (KeyError, TypeError):
                stale.append(worker)
                continue
            if not is_lost(now, state.ts, self.stale_after):
                fresh.append(state)
            elif self.clock.silent_for(worker, doc, now) > FORGET_AFTER:
                stale.append(worker)
        if stale:
            await self.client.hdel(self.key, *stale)
            for worker in stale:
                self.clock.forget(worker)
        return fresh

    async def claim_seed(self, fingerprint: str, record: str, ttl: float = 86400.0) -> bool:
        """Whether seed *record* may seed *fingerprint*: the first record to ask wins.

        The same record asking again (a redelivery after a crash) wins again, so
        a seed is neither lost nor seeded twice by concurrent copies of itself.
        With recrawl generations (``RECRAWL_AFTER``) a claim lasts at most one interval.
        A Redis error is retried for ever (the seed waits, its record unacknowledged);
        one that cannot succeed by waiting is logged as such.
        """
        keys = [self.keys.seed_claim(fingerprint), self.keys.recrawl]
        args: list[str | int] = [record, int(ttl * 1000)]
        claimed = await retry(lambda: self._claim(keys=keys, args=args),
                              on_retry=self.retry.on_retry)
        self.retry.succeeded()
        return bool(claimed)

    async def set_control(self, command: str) -> None:
        """``pause``, ``resume`` or ``stop`` every worker of the crawl (``scrapy cluster``)."""
        if command not in CONTROLS:
            raise ValueError(f"unknown control {command!r}")
        if command == "resume":
            await self.client.delete(self.control_key)
        elif command == "stop":  # expires, so that a later crawl of this CRAWL_ID can run
            await self.client.set(self.control_key, command, px=STOP_TTL_MS)
        else:
            await self.client.set(self.control_key, command)

    async def control(self) -> str | None:
        value = await self.client.get(self.control_key)
        return _text(value) if value is not None else None

    async def leave(self, worker: str) -> None:
        await self.client.hdel(self.key, worker)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
