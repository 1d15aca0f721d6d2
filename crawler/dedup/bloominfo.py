"""What ``scrapy cluster status``, the dashboard and the alerts read of a crawl's Bloom filter
(:meth:`crawler.dedup.dupefilter.RedisBloom.info`): its slices, fill and memory, and with
recrawl generations (``RECRAWL_AFTER``) the current generation's."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from crawler.dedup.bloom import piece_key, piece_sizes

if TYPE_CHECKING:
    import redis.asyncio as aioredis

    from crawler.config.keys import CrawlKeys


@dataclass(frozen=True)
class BloomInfo:
    """The state of a :class:`~crawler.dedup.dupefilter.RedisBloom` filter."""

    key: str
    capacity: int  # items the filter's slices hold together
    error_rate: float
    growth: int
    slices: int
    items: int  # fingerprints added (those the filter took for duplicates are not counted)
    current_fill: float  # items / capacity of the newest slice
    fill: float  # items / capacity of all slices
    memory_bytes: int  # bytes of the slices' bit arrays
    generation: int = 0  # the recrawl generation whose filter this is; 0: no recrawl
    generation_age: float | None = None  # seconds since that generation began (Redis time)
    recrawl_after: float = 0.0  # RECRAWL_AFTER the generation was last advanced with
    previous_memory_bytes: int = 0  # bytes of the previous generation's filter


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def piece_keys(base: str, meta: dict[str, int], slices: int) -> list[str]:
    keys = []
    for i in range(slices):
        bits = meta[f"s{i}:bits"]
        per = meta.get("piece_bits", bits)  # none: a filter made before pieces
        pieces = len(piece_sizes(bits, min(per, bits)))
        keys += [piece_key(f"{base}:s{i}", j) for j in range(pieces)]
    return keys


async def meta_of(client: aioredis.Redis, key: str) -> dict[str, int]:
    raw = await client.hgetall(f"{key}:meta")
    return {_text(k): int(float(_text(v))) for k, v in raw.items() if _text(k) != "error_rate"}


async def memory(client: aioredis.Redis, key: str, meta: dict[str, int] | None = None) -> int:
    """Bytes of the slices of filter *key* (0 if it does not exist)."""
    meta = await meta_of(client, key) if meta is None else meta
    async with client.pipeline(transaction=False) as pipe:
        for piece in piece_keys(key, meta, meta.get("slices", 0)):
            pipe.strlen(piece)
        sizes = await pipe.execute()
    return sum(sizes)


async def generation(client: aioredis.Redis, key: str,
                     crawl_keys: CrawlKeys | None) -> tuple[str, dict[str, Any]]:
    """The key to describe: *key*, or that of the crawl's current recrawl generation if it
    has one, with the generation's fields."""
    if crawl_keys is None:
        return key, {}
    async with client.pipeline(transaction=True) as pipe:
        pipe.time()
        pipe.hmget(crawl_keys.recrawl, "generation", "started", "after")
        (seconds, micros), (number, started, after) = await pipe.execute()
    if number is None:
        return key, {}
    age = max(seconds + micros / 1e6 - float(started or 0), 0.0)
    return crawl_keys.bloom_generation(int(number)), {
        "generation": int(number), "recrawl_after": float(after or 0), "generation_age": age,
        "previous_memory_bytes": await memory(
            client, crawl_keys.bloom_generation(int(number) - 1))}


async def describe(client: aioredis.Redis, key: str, crawl_keys: CrawlKeys | None,
                   error_rate: float, growth: int) -> BloomInfo:
    """Slices, items, capacity, fill and memory of filter *key* (zeros if it does not
    exist); with recrawl generations, of the current generation's filter."""
    key, fields = await generation(client, key, crawl_keys)
    meta = await meta_of(client, key)
    slices = meta.get("slices", 0)
    counts = [meta.get(f"s{i}:count", 0) for i in range(slices)]
    capacities = [meta[f"s{i}:capacity"] for i in range(slices)]
    total = sum(capacities)
    return BloomInfo(
        key=key, capacity=total, error_rate=error_rate, growth=growth, slices=slices,
        items=sum(counts), current_fill=counts[-1] / capacities[-1] if slices else 0.0,
        fill=sum(counts) / total if total else 0.0,
        memory_bytes=await memory(client, key, meta), **fields)
