"""The life of a crawl's state: the finished record, reuse of a finished crawl, expiry, purge.

Every Redis key of a crawl starts with ``{<CRAWL_ID>}:``. When the crawl finishes, the
worker that saw it drained writes ``{<CRAWL_ID>}:finished`` (JSON, Redis time) and gives
every key of the crawl a time to live of ``CRAWL_STATE_TTL`` seconds (0: kept for
ever); a key that already expires sooner keeps its own. The keys it made expiring are
listed in ``{<CRAWL_ID>}:expiring``, so that a later run of the same ``CRAWL_ID`` makes
exactly those persistent again (:func:`keep_state`). Kafka topics have no time to live:
``scrapy cluster purge`` removes them (:func:`purge_keys`, :func:`purge_topics`).
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import AsyncIterator, Iterable
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from crawler.config import readers as config
from crawler.config.keys import CrawlKeys
from crawler.connections import clients as connection
from crawler.connections.records import UNREADABLE

if TYPE_CHECKING:
    import redis.asyncio as aioredis
    from scrapy.settings import BaseSettings

SCAN_COUNT = 1000
NOTHING_NEW = "already_finished"  # close reason of a run that found nothing new to fetch

# KEYS[1]: the expiring set; KEYS[2..]: keys of the crawl; ARGV[1]: milliseconds
_EXPIRE = """
local ms, made = tonumber(ARGV[1]), 0
for i = 2, #KEYS do
  local left = redis.call('PTTL', KEYS[i])
  if left == -1 then
    redis.call('PEXPIRE', KEYS[i], ms)
    redis.call('SADD', KEYS[1], KEYS[i])
    made = made + 1
  elseif left > ms then
    redis.call('PEXPIRE', KEYS[i], ms)
  end
end
redis.call('PEXPIRE', KEYS[1], ms)
return made
"""


def state_ttl(settings: BaseSettings) -> float:
    """``CRAWL_STATE_TTL``: seconds a finished crawl's Redis state is kept; 0 for ever."""
    return config.get_float(settings, "CRAWL_STATE_TTL", minimum=0)


@dataclass(frozen=True)
class Finished:
    """The crawl's finished record (Redis time)."""

    at: float  # when a run that fetched something last finished
    closed: float  # when a worker last closed the crawl (the others follow it)
    reason: str = "finished"
    started: float | None = None  # when the run that closed it began (None: not recorded)

    def date(self) -> str:
        return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(self.at))


def parse_finished(value: Any) -> Finished | None:
    """The record, also in the older form (a bare time stamp); None if unreadable."""
    if value is None:
        return None
    try:
        doc = json.loads(value)
        if isinstance(doc, (int, float)):
            return Finished(float(doc), float(doc))
        started = doc.get("started")
        return Finished(float(doc["at"]), float(doc["closed"]), str(doc.get("reason")),
                        None if started is None else float(started))
    except UNREADABLE:
        return None


async def read_finished(client: aioredis.Redis, crawl: str) -> Finished | None:
    return parse_finished(await client.get(CrawlKeys(crawl).finished))


async def mark_finished(client: aioredis.Redis, crawl: str, record: Finished) -> None:
    await client.set(CrawlKeys(crawl).finished, json.dumps(asdict(record)))


_RUN_STARTED = """
local v = redis.call('GET', KEYS[1])
if not v or tonumber(v) <= tonumber(ARGV[2]) then
  redis.call('SET', KEYS[1], ARGV[1])
  return ARGV[1]
end
return v
"""


async def mark_run_started(client: aioredis.Redis, crawl: str, now: float,
                           closed: float = 0.0) -> float:
    """When the crawl's current run began: *now*, unless a worker of this run came first
    (a start after *closed*, when the crawl last closed, belongs to this run)."""
    script = client.register_script(_RUN_STARTED)
    return float(await script(keys=[CrawlKeys(crawl).run_started], args=[repr(now), closed]))


async def read_run_started(client: aioredis.Redis, crawl: str) -> float | None:
    value = await client.get(CrawlKeys(crawl).run_started)
    return None if value is None else float(value)


def reuse_line(crawl: str, finished: Finished) -> str:
    """What a worker says when it starts on a crawl that has finished."""
    return (f"crawl {crawl} finished on {finished.date()}; give new seeds, purge it "
            f"(scrapy cluster purge {crawl} --yes) or use a new CRAWL_ID: seeds it has "
            f"already seen are not fetched again")


async def crawl_keys(client: aioredis.Redis, crawl: str) -> AsyncIterator[list[str]]:
    """Every key of *crawl*, in batches (``SCAN``: never blocks Redis)."""
    batch: list[str] = []
    async for key in client.scan_iter(match=CrawlKeys(crawl).pattern, count=SCAN_COUNT):
        batch.append(key.decode() if isinstance(key, bytes) else str(key))
        if len(batch) >= SCAN_COUNT:
            yield batch
            batch = []
    if batch:
        yield batch


async def expire_state(client: aioredis.Redis, crawl: str, ttl: float) -> int:
    """Give every key of the finished *crawl* at most *ttl* seconds to live; returns how
    many persistent keys were made expiring (0 when *ttl* is 0: kept for ever)."""
    if ttl <= 0:
        return 0
    script = client.register_script(_EXPIRE)
    expiring, made = CrawlKeys(crawl).expiring, 0
    async for batch in crawl_keys(client, crawl):
        keys = [k for k in batch if k != expiring]
        made += int(await script(keys=[expiring, *keys], args=[max(int(ttl * 1000), 1)]))
    return made


async def keep_state(client: aioredis.Redis, crawl: str) -> int:
    """Make the keys :func:`expire_state` made expiring persistent again (a new run)."""
    expiring = CrawlKeys(crawl).expiring
    keys = list(await client.smembers(expiring))
    async with client.pipeline(transaction=False) as pipe:
        for key in keys:
            pipe.persist(key)
        pipe.delete(expiring)
        await pipe.execute()
    return len(keys)


def family(crawl: str, key: str) -> str:
    """What a key of *crawl* holds, by its first name part: ``bloom``, ``seed``, ``workers``..."""
    return CrawlKeys(crawl).family(key)


async def purge_keys(client: aioredis.Redis, crawl: str) -> dict[str, int]:
    """Remove every Redis key of *crawl*; returns the number removed per :func:`family`."""
    removed: dict[str, int] = {}
    async for batch in crawl_keys(client, crawl):
        await client.unlink(*batch)
        for key in batch:
            removed[family(crawl, key)] = removed.get(family(crawl, key), 0) + 1
    return dict(sorted(removed.items()))


def topics_of(crawl: str, existing: Iterable[str] = ()) -> list[str]:
    """The topics of *crawl*, with the priority bands' ``<crawl>.requests.<n>`` found in
    *existing*."""
    bands = sorted(t for t in existing if re.fullmatch(rf"{re.escape(crawl)}\.requests\.\d+", t))
    return [f"{crawl}.requests", *bands, f"{crawl}.seeds", f"{crawl}.dead"]


def purge_topics(kafka: connection.Kafka, crawl: str, *, connect_timeout: float,
                 dry_run: bool = False) -> tuple[list[str], str]:
    """Delete the Kafka topics of *crawl* and its consumer group's offsets.

    Blocking: call it from a thread. Returns the topics deleted (or, with *dry_run*,
    found) and what happened to the group.
    """
    from kafka.errors import KafkaError

    admin = connection.kafka_admin(kafka, connect_timeout)
    try:
        existing = set(admin.list_topics())
        found = [t for t in topics_of(crawl, existing) if t in existing]
        group = f"{crawl}.workers"
        if dry_run:
            return found, f"consumer group {group}"
        if found:
            admin.delete_topics(found, timeout_ms=30000)
        try:
            errors = [e for e in admin.delete_groups([group]).values()
                      if e is not None and getattr(e, "errno", None)]
            said = f"consumer group {group} " + (
                f"not deleted ({getattr(errors[0], '__name__', errors[0])})" if errors
                else "deleted")
        except KafkaError as exc:  # a broker without the API
            said = f"consumer group {group} not deleted ({type(exc).__name__})"
        return found, said
    finally:
        admin.close()
