"""Bloom-filter microbenchmarks: memory per URL, false-positive rate, dedup throughput.

Everything goes through :class:`crawler.dedup.dupefilter.RedisBloom`, the class the workers use,
against the benchmark's own Redis. Memory is what Redis reports (``MEMORY USAGE ... SAMPLES
0`` of every key the filter created), not what the sizing formula says, once adds have
created every piece of the first slice (a new filter allocates nothing).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import secrets
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import redis.asyncio as aioredis

from benchmarks.micro_result import Measurement, Sizes, at_least, at_most, median_of
from crawler.connections.clients import redis_from
from crawler.connections.options import RedisOptions
from crawler.dedup.bloom import PIECE_BITS, piece_sizes, slice_spec
from crawler.dedup.dupefilter import RedisBloom

logger = logging.getLogger(__name__)

MEMORY = "Bloom memory per URL"
DEDUP = "Dedup throughput"
ERROR_RATE = 0.001
TARGETS = {1_000_000_000: at_most(1.9), 100_000_000: at_most(1.9)}  # issue 18; issue 5
FILL_BATCH = 500
SMALL_PIECES = 2**18  # bits a piece, to measure the false-positive rate of a filter in pieces


def fingerprints(count: int, tag: str) -> list[bytes]:
    """*count* distinct 20-byte SHA1 digests, like Scrapy's request fingerprints."""
    return [hashlib.sha1(f"https://site{i % 997}.example/{tag}/{i}".encode()).digest()
            for i in range(count)]


def new_key(purpose: str) -> str:
    return f"{{micro-{purpose}-{secrets.token_hex(4)}}}:bloom"


async def drop(client: aioredis.Redis, key: str) -> None:
    names = [name async for name in client.scan_iter(match=f"{key}:*")]
    if names:
        await client.delete(*names)


async def opened(client: aioredis.Redis, key: str, capacity: int, **extra: Any) -> RedisBloom:
    bloom = RedisBloom(client, key, capacity=capacity, error_rate=ERROR_RATE, growth=2, **extra)
    await bloom.open()
    return bloom


async def measured_bytes(client: aioredis.Redis, key: str) -> tuple[int, int]:
    """Bytes Redis reports for every key of the filter *key*, and how many keys."""
    names = [name async for name in client.scan_iter(match=f"{key}:*")]
    sizes = [await client.memory_usage(name, samples=0) for name in names]
    return sum(size or 0 for size in sizes), len(names)


async def every_piece_written(bloom: RedisBloom, capacity: int) -> None:
    """Add fresh fingerprints until every piece of the first slice exists: pieces are
    created when first written, and a full slice has them all."""
    spec = slice_spec(0, capacity=capacity, error_rate=ERROR_RATE, growth=2)
    pieces, batch = len(piece_sizes(spec.bits)), 0
    while len([n async for n in bloom.client.scan_iter(match=f"{bloom.key}:s0*")]) < pieces:
        await bloom.add(fingerprints(FILL_BATCH, f"touch-{bloom.key}-{batch}"))
        batch += 1


async def memory_per_url(client: aioredis.Redis, capacity: int) -> tuple[float, int]:
    key = new_key("memory")
    try:
        await every_piece_written(await opened(client, key, capacity), capacity)
        total, keys = await measured_bytes(client, key)
    finally:
        await drop(client, key)
    return total / capacity, keys


async def memory(client: aioredis.Redis, sizes: Sizes) -> list[Measurement]:
    out = []
    for capacity in sizes.memory_capacities:
        target = TARGETS.get(capacity)
        runs = [await memory_per_url(client, capacity) for _ in range(sizes.repeats)]
        note = (f"MEMORY USAGE SAMPLES 0 of all {runs[0][1]} keys (slice pieces + meta) "
                f"/ capacity, once every piece was written; error rate {ERROR_RATE}")
        out.append(median_of(MEMORY, f"bytes per URL, capacity {capacity:,}",
                             [r[0] for r in runs], "bytes", target, note))
    return out


async def in_batches(call: Any, fps: Sequence[bytes], size: int = FILL_BATCH) -> list[bool]:
    flags: list[bool] = []
    for start in range(0, len(fps), size):
        flags += await call(fps[start:start + size])
    return flags


async def false_positive_rate(client: aioredis.Redis, capacity: int,
                              piece_bits: int) -> tuple[float, int]:
    """Fill a filter of *capacity* with as many fingerprints, probe as many others: the
    share of them it takes for seen, and the number of strings of its slice."""
    key = new_key("fp")
    try:
        bloom = await opened(client, key, capacity, piece_bits=piece_bits)
        await in_batches(bloom.add, fingerprints(capacity, f"in-{key}"))
        seen = await in_batches(bloom.check, fingerprints(capacity, f"out-{key}"))
        pieces = len([name async for name in client.scan_iter(match=f"{key}:s0*")])
    finally:
        await drop(client, key)
    return sum(seen) / capacity, pieces


async def false_positives(client: aioredis.Redis, sizes: Sizes) -> list[Measurement]:
    out, n = [], sizes.fp_capacity
    for label, piece_bits in (("default pieces", PIECE_BITS), ("pieces of 2^18 bits",
                                                                SMALL_PIECES)):
        runs = [await false_positive_rate(client, n, piece_bits) for _ in range(sizes.repeats)]
        note = (f"filled with {n:,} fingerprints, {n:,} others probed; the slice is "
                f"{runs[0][1]} string(s)")
        out.append(median_of(MEMORY, f"false-positive rate at capacity {n:,}, {label}",
                             [r[0] for r in runs], "", at_most(ERROR_RATE), note))
    return out


async def redis_cpu(client: aioredis.Redis) -> float:
    info = await client.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


async def dedup_once(bloom: RedisBloom, fps: list[bytes], batch: int,
                     coroutines: int) -> tuple[float, float, float]:
    """Fingerprints a second, and Redis and client CPU microseconds a fingerprint:
    *coroutines* loops of check then add (the Outbox's order) over batches of *batch*
    fresh fingerprints."""
    batches: Iterator[list[bytes]] = (fps[i:i + batch] for i in range(0, len(fps), batch))
    new = 0

    async def worker() -> None:
        nonlocal new
        for part in batches:
            await bloom.check(part)
            flags = await bloom.add(part)
            new += sum(flags)

    cpu, client, start = await redis_cpu(bloom.client), time.process_time(), time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(coroutines)))
    elapsed, client = time.perf_counter() - start, time.process_time() - client
    cpu = await redis_cpu(bloom.client) - cpu
    if new < len(fps) * 0.99:
        logger.warning("only %d of %d fresh fingerprints were new", new, len(fps))
    return len(fps) / elapsed, cpu / len(fps) * 1e6, client / len(fps) * 1e6


async def dedup(client: aioredis.Redis, sizes: Sizes) -> list[Measurement]:
    out = []
    for capacity in sizes.dedup_capacities:
        key = new_key("dedup")
        runs: dict[int, list[tuple[float, float, float]]] = {b: [] for b in sizes.batch_sizes}
        try:
            bloom = await opened(client, key, capacity)
            for rep in range(sizes.repeats):
                for batch in sizes.batch_sizes:
                    fps = fingerprints(sizes.dedup_fingerprints, f"{key}-{rep}-{batch}")
                    runs[batch].append(await dedup_once(bloom, fps, batch, sizes.coroutines))
            fill = (await bloom.info()).fill
        finally:
            await drop(client, key)
        out += [dedup_measurement(capacity, batch, runs[batch], sizes, fill)
                for batch in sizes.batch_sizes]
    return out


def dedup_measurement(capacity: int, batch: int, runs: list[tuple[float, float, float]],
                      sizes: Sizes, fill: float) -> Measurement:
    redis_us, client_us = (sorted(r[i] for r in runs)[len(runs) // 2] for i in (1, 2))
    note = (f"{sizes.dedup_fingerprints:,} fresh fingerprints, {sizes.coroutines} coroutines, "
            f"check then add; CPU a fingerprint: Redis {redis_us:.1f} us, this process "
            f"{client_us:.1f} us ({client_us * batch / 2:.0f} us a call); filter "
            f"{fill:.1%} full at the end")
    return median_of(DEDUP, f"capacity {capacity:,}, batch {batch}", [r[0] for r in runs],
                     "fingerprints/s", at_least(100_000), note)


async def run(env: Mapping[str, str], sizes: Sizes
              ) -> tuple[list[Measurement], list[Measurement]]:
    """(memory and false-positive measurements, dedup throughput measurements) on the Redis
    of *env* (``REDIS_URL``, ``REDIS_PARAMS``)."""
    client = redis_from(RedisOptions.from_env(env))
    try:
        first = await memory(client, sizes) + await false_positives(client, sizes)
        return first, await dedup(client, sizes)
    finally:
        await client.aclose()
