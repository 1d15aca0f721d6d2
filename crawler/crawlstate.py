"""Crawl-wide state in Redis: worker heartbeats and "is the whole crawl drained?".

Each worker writes a heartbeat (its partitions, lag, whether anything is
buffered, in flight or being sent). The crawl is drained when every live worker
is idle, their partitions together cover every partition of the crawl's
topics, and the summed lag is zero (delivery trap 7: zero lag alone is not
enough). Workers exit once that has held for ``CRAWL_IDLE_TIMEOUT`` seconds.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from dataclasses import dataclass
from typing import Any

import redis.asyncio as aioredis

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class WorkerState:
    worker: str
    idle: bool
    assigned: list[str]
    lag: int | None
    ts: float
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


_CLAIM = """
local owner = redis.call('GET', KEYS[1])
if not owner then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return 1
end
if owner == ARGV[1] then return 1 end
return 0
"""


CONTROLS = ("pause", "resume", "stop")
STOP_TTL_MS = 30_000  # every live worker reads the control key once per heartbeat
FORGET_AFTER = 600.0  # seconds a silent worker stays listed (as lost) in the heartbeat hash


class CrawlState:
    """Heartbeats of the workers of one crawl, in a Redis hash."""

    def __init__(self, client: aioredis.Redis, crawl_id: str, *, stale_after: float) -> None:
        self.client = client
        self.key = f"{{{crawl_id}}}:workers"
        self.finished_key = f"{{{crawl_id}}}:finished"
        self.claim_prefix = f"{{{crawl_id}}}:seed:"
        self.control_key = f"{{{crawl_id}}}:control"
        self._claim = client.register_script(_CLAIM)
        self.stale_after = stale_after

    async def beat(self, worker: str, *, idle: bool, assigned: list[str], lag: int | None,
                   info: dict[str, Any]) -> None:
        doc = {"idle": idle, "assigned": assigned, "lag": lag, "ts": time.time(), "info": info}
        await self.client.hset(self.key, worker, json.dumps(doc))

    async def workers(self) -> list[WorkerState]:
        """The workers whose heartbeat is fresh.

        A silent worker's entry is kept for ``FORGET_AFTER`` seconds, so that
        ``scrapy cluster status`` and the node-silent alert can show it as lost.
        """
        raw = await self.client.hgetall(self.key)
        now = time.time()
        fresh: list[WorkerState] = []
        stale: list[str] = []
        for name, value in raw.items():
            try:
                doc = json.loads(value)
                state = WorkerState(_text(name), bool(doc["idle"]), list(doc["assigned"]),
                                    doc["lag"], float(doc["ts"]), dict(doc.get("info", {})))
            except (ValueError, KeyError, TypeError):
                stale.append(_text(name))
                continue
            if now - state.ts <= self.stale_after:
                fresh.append(state)
            elif now - state.ts > FORGET_AFTER:
                stale.append(state.worker)
        if stale:
            await self.client.hdel(self.key, *stale)
        return fresh

    async def mark_finished(self, ttl: float) -> None:
        """Tell the other workers that the crawl was seen drained for the idle timeout."""
        await self.client.set(self.finished_key, str(time.time()), px=max(int(ttl * 1000), 1000))

    async def finished_at(self) -> float | None:
        """When a worker last saw the crawl drained for the idle timeout, if recently."""
        value = await self.client.get(self.finished_key)
        return float(value) if value is not None else None

    async def claim_seed(self, fingerprint: str, record: str, ttl: float = 86400.0) -> bool:
        """Whether seed *record* may seed *fingerprint*: the first record to ask wins.

        The same record asking again (a redelivery after a crash) wins again, so
        a seed is neither lost nor seeded twice by concurrent copies of itself.
        """
        keys = [self.claim_prefix + fingerprint]
        while True:
            try:
                return bool(await self._claim(keys=keys, args=[record, int(ttl * 1000)]))
            except Exception as exc:  # Redis outage: the seed waits, its record unacknowledged
                logger.warning("Cannot claim a seed yet, retrying: %s", exc)
                await asyncio.sleep(1.0)

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
