"""RedisBloom against a real Redis (the session's private server, never the system one)."""

from __future__ import annotations

import asyncio
import json
import logging
import math
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis
from bloom_helpers import batched, fingerprints, fp_bound

from crawler.connections.clients import redis_client
from crawler.dedup.bloom import (
    PIECE_BITS,
    digest,
    hash_pair,
    locate,
    piece_key,
    piece_sizes,
    positions,
)
from crawler.dedup.dupefilter import BloomMissing, RedisBloom
from crawler.dedup.redis_filter import LUA_COMMON

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def key(crawl_id: str) -> str:
    return f"{{{crawl_id}}}:bloom"


@asynccontextmanager
async def opened(redis_url: str, key: str, **params: Any) -> AsyncIterator[RedisBloom]:
    client = redis_client(redis_url)
    try:
        bloom = RedisBloom(client, key, **params)
        await bloom.open()
        yield bloom
    finally:
        if keys := [k async for k in client.scan_iter(match=f"{key}:*")]:
            await client.delete(*keys)
        await client.aclose()


def test_false_positive_rate_at_capacity(redis_url: str, key: str) -> None:
    capacity, target = 200_000, 0.001

    async def scenario() -> None:
        async with opened(redis_url, key, capacity=capacity, error_rate=target, growth=2) as bloom:
            added = fingerprints(capacity, seed=1)
            new = await batched(bloom.add, added)
            info = await bloom.info()
            assert info.items == sum(new) >= capacity * 0.999
            assert all(await batched(bloom.check, added[::10]))
            # The bits are really set: a full slice is about half ones.
            ones = await bloom.client.bitcount(f"{key}:s0")
            meta = await bloom.client.hgetall(f"{key}:meta")
            assert 0.45 < ones / int(meta[b"s0:bits"]) < 0.55
            seen = await batched(bloom.check, fingerprints(capacity, seed=2))
            false_positives = sum(seen)
            assert 0 < false_positives <= fp_bound(capacity, target)

    asyncio.run(scenario())


_CHILD = """
import asyncio, json, random, sys
from crawler.connections.clients import redis_client
from crawler.dedup.dupefilter import RedisBloom

async def main(url, key, seed):
    client = redis_client(url)
    bloom = RedisBloom(client, key, capacity=100_000, error_rate=0.001, growth=2)
    await bloom.open()
    rng = random.Random(42)
    fps = [rng.randbytes(20) for _ in range(20_000)]
    order = list(range(len(fps)))
    random.Random(seed).shuffle(order)
    print("ready", flush=True)
    await client.blpop([key + ":go"], timeout=30)
    mine, at = [], 0
    while at < len(order):
        batch = order[at:at + random.Random(seed + at).randint(50, 400)]
        at += len(batch)
        flags = await bloom.add([fps[i] for i in batch])
        mine += [i for i, new in zip(batch, flags) if new]
    await client.aclose()
    print(json.dumps(mine), flush=True)

asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3])))
"""


def test_concurrent_add_from_two_processes(redis_url: str, key: str) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    children = [
        subprocess.Popen([sys.executable, "-c", _CHILD, redis_url, key, str(seed)],
                         stdout=subprocess.PIPE, text=True, env=env, cwd=ROOT)
        for seed in (11, 12)
    ]
    try:
        for child in children:
            assert child.stdout is not None and child.stdout.readline().strip() == "ready"

        async def go() -> None:
            client = aioredis.Redis.from_url(redis_url)
            await client.rpush(f"{key}:go", 1, 1)
            await client.aclose()

        asyncio.run(go())
        results = [child.communicate(timeout=60)[0] for child in children]
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
    assert [child.returncode for child in children] == [0, 0]
    first, second = (set(json.loads(out.strip().splitlines()[-1])) for out in results)
    assert not first & second, "a fingerprint was new for both processes"
    assert first | second == set(range(20_000)), "a fingerprint was new for neither"
    assert first and second

    async def cleanup() -> None:
        client = aioredis.Redis.from_url(redis_url)
        await client.delete(*[k async for k in client.scan_iter(match=f"{key}:*")])
        await client.aclose()

    asyncio.run(cleanup())


def test_growth_adds_slices(redis_url: str, key: str, caplog: pytest.LogCaptureFixture) -> None:
    grown: list[int] = []

    async def scenario() -> None:
        params = {"capacity": 1000, "error_rate": 0.01, "growth": 2}
        async with opened(redis_url, key, **params, on_grow=grown.append) as bloom:
            added = fingerprints(5000, seed=3)
            await batched(bloom.add, added, size=250)
            info = await bloom.info()
            # 1000 + 2000 + 4000 slots: 5000 items (a few taken for duplicates) need 3 slices.
            assert (info.slices, info.capacity) == (3, 7000)
            assert 4950 <= info.items <= 5000
            assert info.current_fill == pytest.approx((info.items - 3000) / 4000)
            assert all(await bloom.check(added))
            trials = 20_000
            false_positives = sum(await batched(bloom.check, fingerprints(trials, seed=4)))
            assert false_positives <= fp_bound(trials, 0.01)
        async with opened(redis_url, key + "2", **params) as one_call:
            await one_call.add(added)  # both slices added inside one script call
            assert (await one_call.info()).slices == 3

    with caplog.at_level(logging.INFO, logger="crawler.dedup.dupefilter"):
        asyncio.run(scenario())
    assert grown == [1, 2]
    messages = [r.getMessage() for r in caplog.records if "is full at" in r.getMessage()]
    assert messages[:2] == [
        f"Bloom filter {key} is full at 1000 items: added slice 1 (capacity 2000)",
        f"Bloom filter {key} is full at 3000 items: added slice 2 (capacity 4000)",
    ]


def test_check_is_read_only(redis_url: str, key: str) -> None:
    async def snapshot(bloom: RedisBloom) -> tuple[dict[bytes, bytes], bytes | None]:
        return await bloom.client.hgetall(f"{key}:meta"), await bloom.client.get(f"{key}:s0")

    async def scenario() -> None:
        async with opened(redis_url, key, capacity=1000, error_rate=0.01, growth=2) as bloom:
            added, fresh = fingerprints(100, seed=5), fingerprints(100, seed=6)
            await bloom.add(added)
            before = await snapshot(bloom)
            assert await bloom.check(added + fresh) == [True] * 100 + [False] * 100
            assert await bloom.check(fresh) == [False] * 100
            assert await snapshot(bloom) == before
            assert await bloom.check([]) == []

    asyncio.run(scenario())


def test_duplicates_inside_one_batch(redis_url: str, key: str) -> None:
    a, b, c, d = fingerprints(4, seed=7)

    async def scenario() -> None:
        async with opened(redis_url, key, capacity=1000, error_rate=0.01, growth=2) as bloom:
            assert await bloom.add([a, b, a, c, b, a]) == [True, True, False, True, False, False]
            assert (await bloom.info()).items == 3
            assert await bloom.add([a, d, d]) == [False, True, False]
            assert await bloom.add([]) == []

    asyncio.run(scenario())


def test_reopen_with_other_parameters_keeps_the_stored_ones(
    redis_url: str, key: str, caplog: pytest.LogCaptureFixture
) -> None:
    async def scenario() -> None:
        async with opened(redis_url, key, capacity=1000, error_rate=0.01, growth=2) as first:
            added = fingerprints(500, seed=8)
            await first.add(added)
            again = RedisBloom(first.client, key, capacity=50_000, error_rate=0.001, growth=4)
            await again.open()
            assert (again.capacity, again.error_rate, again.growth) == (1000, 0.01, 2)
            assert all(await again.check(added))
            info = await again.info()
            assert (info.capacity, info.items, info.error_rate) == (1000, 500, 0.01)
            await again.add(fingerprints(600, seed=9))  # grows at the stored 1000
            assert (await again.info()).capacity == 3000

    with caplog.at_level(logging.WARNING, logger="crawler.dedup.dupefilter"):
        asyncio.run(scenario())
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "capacity 1000, error rate 0.01, growth 2" in warnings[0]
    assert "instead of capacity 50000, error rate 0.001, growth 4" in warnings[0]


def test_lua_positions_match_python(redis_url: str, key: str) -> None:
    fps = fingerprints(50, seed=10)

    async def scenario() -> None:
        async with opened(redis_url, key, capacity=1000, error_rate=0.01, growth=2) as bloom:
            await bloom.add(fps[:1])
            meta = await bloom.client.hgetall(f"{key}:meta")
            bits, hashes = int(meta[b"s0:bits"]), int(meta[b"s0:hashes"])
            data = await bloom.client.get(f"{key}:s0")
            ones = {i for i in range(bits) if data[i // 8] >> (7 - i % 8) & 1}
            assert ones == set(positions(*hash_pair(fps[0]), bits=bits, hashes=hashes))
            # The place of each fingerprint in slices near the 2**32-bit limit, computed by
            # the script, in one piece and in pieces.
            script = LUA_COMMON + """
local s, out = {bits = tonumber(ARGV[3]), per = tonumber(ARGV[4])}, {}
for i = 1, count do out[i] = {start(s, i)} end
return out"""
            big = 2**32 - 17
            for per in (big, PIECE_BITS):
                got = await bloom.client.eval(script, 1, f"{key}:meta", key,
                                              b"".join(digest(fp) for fp in fps), big, per)
                want = []
                for h1, h2 in map(hash_pair, fps):
                    low, size, first, step = locate(h1, h2, bits=big, piece_bits=per)
                    want.append([low // per + 1, size, first, step])
                assert got == want

    asyncio.run(scenario())


def test_info_and_misuse(redis_url: str, key: str, caplog: pytest.LogCaptureFixture) -> None:
    async def scenario() -> None:
        async with opened(redis_url, key, capacity=1000, error_rate=0.01, growth=2) as bloom:
            info = await bloom.info()
            assert (info.slices, info.items, info.fill) == (1, 0, 0.0)
            assert info.memory_bytes == 0  # pieces are created by the first add into them
            await bloom.add(fingerprints(10, seed=12))
            assert (await bloom.info()).memory_bytes == math.ceil(
                -1000 * math.log(0.01 * 0.8) / math.log(2) ** 2 / 8
            )
            await bloom.client.delete(f"{key}:meta", f"{key}:s0")  # e.g. someone ran FLUSHDB
            with pytest.raises(BloomMissing):  # BLOOM_ON_MISSING = "pause" (the default)
                await bloom.add(fingerprints(10, seed=12))
            assert not await bloom.client.exists(f"{key}:meta")  # nothing re-created
        async with opened(redis_url, key, capacity=1000, error_rate=0.01, growth=2,
                          on_missing="recreate") as bloom:
            await bloom.add(fingerprints(10, seed=12))
            await bloom.client.delete(f"{key}:meta", f"{key}:s0")
            assert await bloom.add(fingerprints(10, seed=12)) == [True] * 10
            assert (await bloom.info()).items == 10
        unopened = RedisBloom(aioredis.Redis(), key, capacity=10, error_rate=0.1, growth=2)
        with pytest.raises(RuntimeError, match="open"):
            await unopened.add([b"x"])

    with caplog.at_level(logging.WARNING, logger="crawler.dedup.dupefilter"):
        asyncio.run(scenario())
    messages = [r.getMessage() for r in caplog.records]
    assert sum("is missing from Redis" in m for m in messages) == 1
    assert sum("vanished" in m for m in messages) == 1


async def bits_of(client: aioredis.Redis, keys: Sequence[str], sizes: Sequence[int]) -> set[int]:
    """The numbers of the 1 bits of a slice stored in *keys* of *sizes* bits."""
    ones, low = set(), 0
    for name, size in zip(keys, sizes, strict=True):
        data = await client.get(name)
        assert data is not None and len(data) == math.ceil(size / 8)
        ones |= {low + i for i in range(size) if data[i // 8] >> (7 - i % 8) & 1}
        low += size
    return ones


def test_slices_in_pieces(redis_url: str, key: str) -> None:
    per = 50_000  # bits a piece: the first slice of 20,000 items takes 6 pieces

    async def scenario() -> None:
        async with opened(redis_url, key, capacity=20_000, error_rate=0.001, growth=2,
                          piece_bits=per) as bloom:
            meta = await bloom.client.hgetall(f"{key}:meta")
            bits, hashes = int(meta[b"s0:bits"]), int(meta[b"s0:hashes"])
            sizes = piece_sizes(bits, per)
            names = [piece_key(f"{key}:s0", j) for j in range(len(sizes))]
            assert len(sizes) == 6 and sizes[-1] < per
            assert [k async for k in bloom.client.scan_iter(match=f"{key}:s*")] == []
            first = fingerprints(300, seed=20)
            assert await bloom.add(first + first[:5]) == [True] * 300 + [False] * 5
            found = [k.decode() async for k in bloom.client.scan_iter(match=f"{key}:s*")]
            assert sorted(found) == sorted(names)  # 300 adds write into every piece
            want = set().union(*(positions(*hash_pair(fp), bits=bits, hashes=hashes,
                                           piece_bits=per) for fp in first))
            assert await bits_of(bloom.client, names, sizes) == want
            assert (await bloom.info()).memory_bytes == sum(math.ceil(s / 8) for s in sizes)
            added = first + fingerprints(19_700, seed=21)
            assert sum(await batched(bloom.add, added)) >= 19_680  # the first 300 are known
            assert all(await batched(bloom.check, added))
            trials = 20_000
            false_positives = sum(await batched(bloom.check, fingerprints(trials, seed=22)))
            assert false_positives <= fp_bound(trials, 0.001)
            await batched(bloom.add, fingerprints(30_000, seed=23))  # grows: slice 1 in pieces
            info = await bloom.info()
            assert info.slices == 2
            assert await bloom.client.exists(f"{key}:s1", f"{key}:s1:1") == 2

    asyncio.run(scenario())


def test_filter_made_before_pieces_keeps_working(redis_url: str, key: str) -> None:
    """A filter created before slices had pieces (meta version 1, no piece_bits, each
    slice one string) keeps its layout and positions, even with a smaller piece size."""
    old_specs = [(2000, 22_056, 8), (4000, 49_882, 9)]  # r = 0.5 at 1 %: 0.5 %, 0.25 %

    async def scenario() -> None:
        client = redis_client(redis_url)
        try:
            fields: dict[str, Any] = {"capacity": 2000, "error_rate": "0.01", "growth": 2,
                                      "slices": 1, "version": 1, "s0:count": 0}
            for i, (capacity, bits, hashes) in enumerate(old_specs):
                fields |= {f"s{i}:capacity": capacity, f"s{i}:bits": bits, f"s{i}:hashes": hashes}
            await client.hset(f"{key}:meta", mapping=fields)
            await client.setbit(f"{key}:s0", old_specs[0][1] - 1, 0)
            bloom = RedisBloom(client, key, capacity=2000, error_rate=0.01, growth=2,
                               piece_bits=1000)
            await bloom.open()
            fps = fingerprints(3000, seed=30)
            assert all(await batched(bloom.add, fps[:100]))
            _, bits, hashes = old_specs[0]
            want = set().union(*(positions(*hash_pair(fp), bits=bits, hashes=hashes)
                                 for fp in fps[:100]))
            assert await bits_of(client, [f"{key}:s0"], [bits]) == want
            await batched(bloom.add, fps[100:])  # fills slice 0 and grows into slice 1
            assert all(await batched(bloom.check, fps))
            names = sorted([k.decode() async for k in client.scan_iter(match=f"{key}:*")])
            assert names == [f"{key}:meta", f"{key}:s0", f"{key}:s1"]
            assert await client.strlen(f"{key}:s1") == math.ceil(old_specs[1][1] / 8)
        finally:
            await client.delete(*[k async for k in client.scan_iter(match=f"{key}:*")])
            await client.aclose()

    asyncio.run(scenario())
