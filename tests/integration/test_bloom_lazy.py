"""Bloom pieces are created when first written, never a whole slice at once: a new filter
or slice costs nothing, and one call cannot push Redis far past ``maxmemory``."""

from __future__ import annotations

import asyncio

import pytest
import redis.asyncio as aioredis
from bloom_helpers import fingerprints
from redis.exceptions import OutOfMemoryError, ResponseError

from crawler.connections.clients import redis_client
from crawler.connections.redis_errors import is_transient
from crawler.dedup.bloom import PIECE_BITS, piece_key, piece_sizes, slice_spec
from crawler.dedup.dupefilter import RedisBloom

PIECE_BYTES = PIECE_BITS // 8
DEFAULTS = {"capacity": 10_000_000, "error_rate": 0.001, "growth": 2}  # BLOOM_* defaults


@pytest.fixture
def key(crawl_id: str) -> str:
    return f"{{{crawl_id}}}:bloom"



async def filter_keys(client: aioredis.Redis, key: str) -> dict[str, int]:
    """Every piece key of the filter and its MEMORY USAGE."""
    names = sorted([k.decode() async for k in client.scan_iter(match=f"{key}:s*")])
    return {name: int(await client.memory_usage(name, samples=0) or 0) for name in names}


def test_a_new_filter_and_a_new_slice_allocate_only_what_is_written(
    redis_url: str, key: str
) -> None:
    async def scenario() -> None:
        client = redis_client(redis_url)
        try:
            bloom = RedisBloom(client, key, **DEFAULTS)  # type: ignore[arg-type]
            await bloom.open()
            assert await filter_keys(client, key) == {}  # it was 3 pieces, 17.9 MiB
            assert await bloom.add(fingerprints(1, seed=1)) == [True]
            sizes = await filter_keys(client, key)
            assert len(sizes) == 1 and max(sizes.values()) <= PIECE_BYTES + 1024
            # the next slice: the first add into it creates one of its 6 pieces
            await client.hset(f"{key}:meta", "s0:count", DEFAULTS["capacity"])
            assert await bloom.add(fingerprints(1, seed=2)) == [True]
            assert (await bloom.info()).slices == 2
            sizes = await filter_keys(client, key)
            slice1 = [n for n in sizes if n.startswith(f"{key}:s1")]
            assert len(slice1) == 1 and sizes[slice1[0]] <= PIECE_BYTES + 1024
            assert (await bloom.info()).memory_bytes <= 2 * PIECE_BYTES
        finally:
            await client.delete(*[k async for k in client.scan_iter(match=f"{key}:*")])
            await client.aclose()

    asyncio.run(scenario())


def test_a_batch_over_new_pieces_creates_them_all_and_loses_nothing(
    redis_url: str, key: str
) -> None:
    """A batch whose fingerprints land in several new pieces is split over calls (one new
    piece each) by the client: every fingerprint is added, and found, exactly once."""
    async def scenario() -> None:
        client = redis_client(redis_url)
        try:
            bloom = RedisBloom(client, key, **DEFAULTS)  # type: ignore[arg-type]
            await bloom.open()
            fps = fingerprints(400, seed=3)
            assert await bloom.add(fps + fps[:10]) == [True] * 400 + [False] * 10
            assert await bloom.check(fps) == [True] * 400
            spec = slice_spec(0, **DEFAULTS)
            want = [piece_key(f"{key}:s0", j) for j in range(len(piece_sizes(spec.bits)))]
            assert sorted(await filter_keys(client, key)) == sorted(want)
            assert (await bloom.info()).memory_bytes == spec.nbytes
        finally:
            await client.delete(*[k async for k in client.scan_iter(match=f"{key}:*")])
            await client.aclose()

    asyncio.run(scenario())


def test_one_call_cannot_go_far_past_maxmemory(own_redis: str, key: str) -> None:
    """Redis checks maxmemory when a script starts, not inside it. A filter of 100 M
    fingerprints has a first slice of 186 MB: allocated whole, one call went 170 MB past a
    limit 16 MiB away. Now a call adds at most one piece (8 MiB) past the limit, and the
    next call fails with OOM, an error no retry can cure."""
    async def scenario() -> None:
        client = redis_client(own_redis)
        try:
            used = int((await client.info("memory"))["used_memory"])
            limit = used + 16 * 2**20
            await client.config_set("maxmemory-policy", "noeviction")
            await client.config_set("maxmemory", str(limit))
            bloom = RedisBloom(client, key, capacity=100_000_000, error_rate=0.001, growth=2)
            error: Exception | None = None
            try:
                await bloom.open()
                for seed in range(30):
                    await bloom.add(fingerprints(500, seed=seed))
            except ResponseError as exc:
                error = exc
            used = int((await client.info("memory"))["used_memory"])
            assert used <= limit + PIECE_BYTES + 2**20, f"{used - limit} bytes past maxmemory"
            assert isinstance(error, OutOfMemoryError), error
            assert not is_transient(error)
        finally:
            await client.aclose()

    asyncio.run(scenario())
