"""Recrawl generations (RECRAWL_AFTER) against a real Redis: a fingerprint is seen through
the current and the previous generation, forgotten after that; older filters are deleted;
seed claims last one interval; a vanished recrawl state pauses."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest

from crawler.config.keys import CrawlKeys
from crawler.connections.clients import redis_client
from crawler.dedup.backend import BloomConfig
from crawler.dedup.dupefilter import BloomMissing, RedisBloom
from crawler.dedup.recrawl import RecrawlBloom
from crawler.frontier.crawlstate import CrawlState

AFTER = 1.0


@asynccontextmanager
async def recrawl(redis_url: str, crawl: str, *, after: float = AFTER, on_missing: str = "pause",
                  capacity: int = 10_000) -> AsyncIterator[RecrawlBloom]:
    client = redis_client(redis_url)
    try:
        bloom = RecrawlBloom(
            client, crawl, after=after, on_missing=on_missing,
            make=lambda key: RedisBloom(client, key, capacity=capacity, error_rate=0.001,
                                        growth=2))
        await bloom.open()
        yield bloom
    finally:
        if keys := [k async for k in client.scan_iter(match=CrawlKeys(crawl).pattern)]:
            await client.delete(*keys)
        await client.aclose()


async def wait_generation(bloom: RecrawlBloom, number: int) -> None:
    while bloom.generation < number:
        await asyncio.sleep(0.02)


def test_a_fingerprint_is_seen_for_one_to_two_intervals_then_forgotten(
        redis_url: str, crawl_id: str) -> None:
    async def scenario() -> None:
        async with recrawl(redis_url, crawl_id) as bloom:
            assert bloom.generation == 1
            assert await bloom.add([b"a"]) == [True]
            assert await bloom.check([b"a", b"b"]) == [True, False]
            await wait_generation(bloom, 2)
            assert await bloom.check([b"a"]) == [True]  # in the previous generation
            assert await bloom.add([b"b"]) == [True]
            await wait_generation(bloom, 3)
            assert await bloom.check([b"a", b"b"]) == [False, True]
            keys = CrawlKeys(crawl_id)
            metas = {k.decode() async for k in bloom.client.scan_iter(match=keys.bloom + ":*:meta")}
            assert metas == {keys.bloom_generation(3) + ":meta", keys.bloom_generation(2) + ":meta"}
            assert bloom.stats is None
            state = await bloom.client.hgetall(keys.recrawl)
            assert int(state[b"generation"]) == 3 and float(state[b"after"]) == AFTER

    asyncio.run(scenario())


def test_a_long_gap_forgets_everything_and_deletes_both_old_filters(
        redis_url: str, crawl_id: str) -> None:
    async def scenario() -> None:
        async with recrawl(redis_url, crawl_id, after=0.3) as bloom:
            await bloom.add([b"a"])
            await wait_generation(bloom, 2)
            await bloom.add([b"b"])
            await asyncio.sleep(0.7)  # more than two intervals without a call
            assert await bloom.check([b"a", b"b"]) == [False, False]
            keys = CrawlKeys(crawl_id)
            for old in (1, 2):
                assert not await bloom.client.exists(keys.bloom_generation(old) + ":meta")
                assert not await bloom.client.exists(keys.bloom_generation(old) + ":s0")

    asyncio.run(scenario())


def test_two_workers_agree_and_status_follows_the_generation(
        redis_url: str, crawl_id: str) -> None:
    async def scenario() -> None:
        async with recrawl(redis_url, crawl_id) as one, recrawl(redis_url, crawl_id) as two:
            await one.add([b"x"])
            assert await two.check([b"x"]) == [True]
            await wait_generation(two, 2)
            assert await two.add([b"y"]) == [True]
            assert await one.check([b"x", b"y"]) == [True, True]
            info = await RedisBloom.for_crawl(one.client, crawl_id, BloomConfig(
                capacity=10_000, error_rate=0.001, growth=2, on_missing="pause")).info()
            assert info.generation == 2 and info.recrawl_after == AFTER
            assert info.key == CrawlKeys(crawl_id).bloom_generation(2)
            assert info.items == 1 and info.memory_bytes > 0
            assert 0 <= (info.generation_age or 0) < 2 * AFTER
            assert info.previous_memory_bytes > 0

    asyncio.run(scenario())


def test_a_vanished_recrawl_state_pauses_or_starts_again(redis_url: str, crawl_id: str) -> None:
    async def scenario() -> None:
        async with recrawl(redis_url, crawl_id, after=60) as bloom:
            await bloom.add([b"a"])
            pattern = CrawlKeys(crawl_id).pattern  # as FLUSHALL would
            await bloom.client.delete(*[k async for k in bloom.client.scan_iter(match=pattern)])
            with pytest.raises(BloomMissing):
                await bloom.check([b"a"])
            bloom.on_missing = "recreate"
            assert await bloom.check([b"a"]) == [False]
            assert await bloom.add([b"a"]) == [True]

    asyncio.run(scenario())


def test_a_seed_claim_lasts_one_interval(redis_url: str, crawl_id: str) -> None:
    async def scenario() -> None:
        async with recrawl(redis_url, crawl_id, after=0.5) as bloom:
            state = CrawlState(bloom.client, crawl_id, stale_after=7.0)
            assert await state.claim_seed("ab", "seeds:0:1")
            assert not await state.claim_seed("ab", "seeds:0:2")
            assert 0 < await bloom.client.pttl(CrawlKeys(crawl_id).seed_claim("ab")) <= 500
            time.sleep(0.6)
            assert await state.claim_seed("ab", "seeds:0:2")  # given again after the interval

    asyncio.run(scenario())
