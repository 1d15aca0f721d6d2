"""Rebuild the crawl's Bloom filter from what MongoDB and Kafka still hold.

The fingerprints come from (:func:`fingerprints`):

- the items stored (their ``_id`` is the request fingerprint of their URL, with the default
  ``MONGO_KEY_FIELDS``), the requests given up (``<CRAWL_ID>.failures``, keyed by
  fingerprint) and the pages whose items MongoDB refused (``<CRAWL_ID>.rejected``);
- the records the crawl has not finished: each request and seeds partition from its
  committed offset to its end, in flight or waiting;
- the dead-letter topic's records that name a URL.

They go into a filter of their own (:attr:`~crawler.config.keys.CrawlKeys.rebuild`), which
one script then puts in place of the crawl's (:data:`SWAP`, the metadata hash last): no
worker sees a filter that is half rebuilt.
"""

from __future__ import annotations

import asyncio
import json
import logging
import queue
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import redis.asyncio as aioredis
from scrapy import Request

from crawler.config.keys import CrawlKeys
from crawler.dedup.dupefilter import RedisBloom
from crawler.frontier import codec
from crawler.frontier.config import FrontierConfig
from crawler.recovery import kafka_read

logger = logging.getLogger(__name__)
BATCH = 10_000  # fingerprints a filter call adds
Fingerprint = Callable[[Request], bytes]

# KEYS: the live filter's keys (deleted), then the rebuilt filter's (renamed, its meta hash
# last); ARGV[1]: how many live keys; ARGV[2], ARGV[3]: the rebuilt and the live key names.
SWAP = """
local live = tonumber(ARGV[1])
for i = 1, live do redis.call('DEL', KEYS[i]) end
local meta
for i = live + 1, #KEYS do
  local target = ARGV[3] .. string.sub(KEYS[i], #ARGV[2] + 1)
  if string.sub(KEYS[i], -5) == ':meta' then meta = {KEYS[i], target} else
    redis.call('RENAME', KEYS[i], target)
  end
end
if meta then redis.call('RENAME', meta[1], meta[2]) end
return #KEYS - live
"""


async def rebuild(client: aioredis.Redis, keys: CrawlKeys,
                  make_filter: Callable[[str], RedisBloom], sources: AsyncIterator[bytes]) -> int:
    """Add every fingerprint of *sources* to a new filter (*make_filter(key)*), then put
    it in place of the crawl's; how many fingerprints."""
    await _delete(client, keys.rebuild)  # a rebuild that died half way
    bloom = make_filter(keys.rebuild)
    await bloom.open()
    count, batch = 0, []
    async for fingerprint in sources:
        batch.append(fingerprint)
        if len(batch) >= BATCH:
            count += len(batch)
            await bloom.add(batch)
            batch = []
    if batch:
        count += len(batch)
        await bloom.add(batch)
    await _swap(client, keys.rebuild, keys.bloom)
    return count


async def _keys(client: aioredis.Redis, name: str) -> list[bytes]:
    return [key async for key in client.scan_iter(match=f"{name}:*", count=1000)]


async def _delete(client: aioredis.Redis, name: str) -> None:
    for key in await _keys(client, name):
        await client.delete(key)


async def _swap(client: aioredis.Redis, rebuilt: str, live: str) -> None:
    old, new = await _keys(client, live), await _keys(client, rebuilt)
    await client.eval(SWAP, len(old) + len(new), *old, *new, len(old), rebuilt, live)


async def fingerprints(cfg: FrontierConfig, mongo: Any, *, by_url_id: bool,
                       fingerprint: Fingerprint) -> AsyncIterator[bytes]:
    """Every fingerprint the crawl's filter held that MongoDB and Kafka can still tell
    (*mongo*: the crawl's database; *by_url_id*: the items' ``_id`` is their URL's
    fingerprint)."""
    crawl = cfg.crawl_id
    if mongo is not None:
        async for fingerprint_ in _stored(mongo, crawl, by_url_id, fingerprint):
            yield fingerprint_
    async for value in _threaded(lambda: kafka_read.scan(cfg, dead=True)):
        found = _of_record(value, fingerprint)
        if found is not None:
            yield found


async def _stored(mongo: Any, crawl: str, by_url_id: bool,
                  fingerprint: Fingerprint) -> AsyncIterator[bytes]:
    """The fingerprints MongoDB keeps: items, failures, refused items' pages."""
    if by_url_id:
        async for doc in mongo[crawl].find({}, {"_id": 1}):
            yield _hex(doc["_id"])
    else:
        logger.warning("MONGO_KEY_FIELDS is not url: the stored items' ids are no fingerprints, "
                       "so only Kafka's records and the failures rebuild the filter")
    async for doc in mongo[f"{crawl}.failures"].find({}, {"_id": 1}):
        yield _hex(doc["_id"])
    async for doc in mongo[f"{crawl}.rejected"].find({}, {"url": 1}):
        if doc.get("url"):
            yield fingerprint(Request(doc["url"]))


def _hex(value: Any) -> bytes:
    return bytes.fromhex(value) if isinstance(value, str) else bytes(value)


def _of_record(value: bytes, fingerprint: Fingerprint) -> bytes | None:
    """The fingerprint of a request record, or of the URL a dead letter or a seed names."""
    try:
        return fingerprint(codec.decode_request(value))
    except Exception:  # a seed from another client, a dead letter: JSON with a URL
        pass
    try:
        doc = json.loads(value)
    except ValueError:
        return None
    url = doc.get("url") or (doc.get("source") or {}).get("url") if isinstance(doc, dict) else None
    try:
        return fingerprint(Request(url)) if isinstance(url, str) else None
    except ValueError:
        return None


async def _threaded(make: Callable[[], Iterator[bytes]]) -> AsyncIterator[bytes]:
    """The values of a blocking iterator, read on a thread of its own (off the reactor),
    handed over a thousand at a time."""
    chunks: queue.Queue[list[bytes] | None] = queue.Queue(maxsize=64)
    failed: list[Exception] = []

    def run() -> None:
        chunk: list[bytes] = []
        try:
            for value in make():
                chunk.append(value)
                if len(chunk) >= 1000:
                    chunks.put(chunk)
                    chunk = []
            chunks.put(chunk)
        except Exception as exc:
            failed.append(exc)
        finally:
            chunks.put(None)

    threading.Thread(target=run, name="state-repair-scan", daemon=True).start()
    while (chunk := await asyncio.to_thread(chunks.get)) is not None:
        for value in chunk:
            yield value
    if failed:
        raise failed[0]
