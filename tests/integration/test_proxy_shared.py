"""Proxy health shared through a real Redis: two stores stand for two workers."""

from __future__ import annotations

import asyncio
import random
import socket
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import asynccontextmanager
from typing import Any

import pytest
import redis.asyncio as aioredis

from crawler.connections.clients import redis_client
from crawler.politeness.proxypool import Health, Outcome, PoolPolicy, ProxyPool, State, parse_proxy
from crawler.politeness.proxystore import _SYNC, RedisProxyStore

SECRET = "s3cret-pw"
GOOD = f"http://alice:{SECRET}@127.0.0.1:3128"
BAD = "http://127.0.0.2:3128"
POLICY = PoolPolicy(backoff_base=60, backoff_max=600)


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def ids(*addresses: str) -> set[str]:
    return {parse_proxy(a).id for a in addresses}


def store_for(redis_url: str, crawl_id: str, clock: Clock | None = None,
              seed: int = 0) -> RedisProxyStore:
    pool = ProxyPool(POLICY, clock=clock or Clock(), rng=random.Random(seed))
    return RedisProxyStore(pool, redis_client(redis_url), crawl_id, redis_url=redis_url)


@asynccontextmanager
async def workers(redis_url: str, crawl_id: str, seeds: list[str], count: int = 2,
                  clock: Clock | None = None) -> AsyncIterator[list[RedisProxyStore]]:
    stores = [store_for(redis_url, crawl_id, clock, seed=n) for n in range(count)]
    try:
        for store in stores:
            await store.open([parse_proxy(s) for s in seeds])
        yield stores
    finally:
        for store in stores:
            await store.close()


def run(body: Callable[[], Coroutine[Any, Any, None]]) -> None:
    asyncio.run(body())


async def raw(redis_url: str, *command: Any) -> Any:
    client = redis_client(redis_url)
    try:
        return await client.execute_command(*command)
    finally:
        await client.aclose()


def test_a_ban_seen_by_one_worker_is_honoured_by_the_other_after_its_refresh(
        redis_url: str, crawl_id: str) -> None:
    async def body() -> None:
        async with workers(redis_url, crawl_id, [GOOD, BAD]) as (one, two):
            bad = parse_proxy(BAD).id
            one.observe(bad, Outcome.BAN)
            assert one.pool.get(bad).state is State.DEAD  # at once, locally
            assert two.pool.get(bad).state is State.ALIVE  # the other has not refreshed yet
            await one.sync()
            await two.sync()
            assert two.pool.get(bad) == one.pool.get(bad)
            assert two.pool.get(bad).state is State.DEAD
            assert {two.pool.pick().id for _ in range(200)} == ids(GOOD)  # type: ignore[union-attr]
    run(body)


def test_every_observation_of_every_worker_is_applied_once(
        redis_url: str, crawl_id: str) -> None:
    async def worker(store: RedisProxyStore, proxy_id: str, rounds: int) -> None:
        for n in range(rounds):
            store.observe(proxy_id, Outcome.SUCCESS if n % 3 else Outcome.FAILURE, 0.2)
            if n % 4 == 0:
                await store.sync()
            await asyncio.sleep(0)
        await store.sync()

    async def body() -> None:
        async with workers(redis_url, crawl_id, [GOOD], count=4) as stores:
            good = parse_proxy(GOOD).id
            await asyncio.gather(*(worker(s, good, 50) for s in stores))
            for _round in range(2):  # what lost every race of a sync goes with the next one
                for store in stores:
                    await store.sync()
            assert await raw(redis_url, "HLEN", f"{{{crawl_id}}}:proxy:health") == 1
            assert {s.pool.get(good).samples for s in stores} == {4 * 50}
    run(body)


def test_latency_samples_are_shared(redis_url: str, crawl_id: str) -> None:
    async def body() -> None:
        async with workers(redis_url, crawl_id, [GOOD, BAD]) as (one, two):
            good = parse_proxy(GOOD).id
            for _ in range(20):
                one.observe(good, Outcome.SUCCESS, 4.0)
            await one.sync()
            await two.sync()
            assert two.pool.get(good).latency == pytest.approx(4.0)
            weights = pick_counts(two, 2000)
            assert weights[good] < weights[parse_proxy(BAD).id]  # the slow one is picked less
    run(body)


def pick_counts(store: RedisProxyStore, draws: int) -> dict[str, int]:
    counts: dict[str, int] = {}
    for _ in range(draws):
        proxy = store.pool.pick()
        assert proxy is not None
        counts[proxy.id] = counts.get(proxy.id, 0) + 1
    return counts


def test_operators_edit_the_pool_live(redis_url: str, crawl_id: str) -> None:
    members = f"{{{crawl_id}}}:proxies"
    extra = "http://bob:other-pw@127.0.0.3:8080"

    async def body() -> None:
        async with workers(redis_url, crawl_id, [GOOD, BAD]) as (one, two):
            await raw(redis_url, "SADD", members, extra, "not a proxy::")
            await raw(redis_url, "SREM", members, BAD)
            await one.sync()
            await two.sync()
            assert set(one.pool.proxies) == set(two.pool.proxies) == ids(GOOD, extra)
        # a worker that starts later does not bring back what an operator removed
        async with workers(redis_url, crawl_id, [GOOD, BAD], count=1) as (three,):
            assert set(three.pool.proxies) == ids(GOOD, extra)
    run(body)


def test_deleting_a_health_record_forgets_the_proxy_s_history(
        redis_url: str, crawl_id: str, caplog: pytest.LogCaptureFixture) -> None:
    async def body() -> None:
        async with workers(redis_url, crawl_id, [GOOD, BAD]) as (one, two):
            bad = parse_proxy(BAD).id
            one.observe(bad, Outcome.BAN)
            await one.sync()
            await two.sync()
            await raw(redis_url, "HDEL", f"{{{crawl_id}}}:proxy:health", bad)
            await raw(redis_url, "SADD", f"{{{crawl_id}}}:proxies", f"ftp://x:{SECRET}@h:1")
            for _ in range(3):
                await one.sync()
                await two.sync()
            assert one.pool.get(bad).state is two.pool.get(bad).state is State.ALIVE
    run(body)
    warnings = [r.getMessage() for r in caplog.records if "not proxy addresses" in r.getMessage()]
    assert len(warnings) == 2 and SECRET not in caplog.text  # once per worker, no address


def test_the_first_worker_seeds_the_shared_set_from_the_settings(
        redis_url: str, crawl_id: str) -> None:
    async def body() -> None:
        async with workers(redis_url, crawl_id, [GOOD, BAD], count=1) as (one,):
            assert set(one.pool.proxies) == ids(GOOD, BAD)
        stored = await raw(redis_url, "SMEMBERS", f"{{{crawl_id}}}:proxies")
        assert {m.decode() for m in stored} == {GOOD, BAD}
    run(body)


def test_no_credentials_in_redis_keys_or_health_fields(redis_url: str, crawl_id: str) -> None:
    async def body() -> None:
        async with workers(redis_url, crawl_id, [GOOD, BAD]) as (one, _two):
            one.observe(parse_proxy(GOOD).id, Outcome.SUCCESS, 0.1)
            one.observe(parse_proxy(BAD).id, Outcome.BAN)
            await one.sync()
        keys = [k.decode() for k in await raw(redis_url, "KEYS", f"{{{crawl_id}}}*")]
        assert sorted(keys) == sorted(f"{{{crawl_id}}}:{k}" for k in
                                      ("proxies", "proxy:seeded", "proxy:health"))
        health = await raw(redis_url, "HGETALL", f"{{{crawl_id}}}:proxy:health")
        assert set(health) == {i.encode() for i in ids(GOOD, BAD)}
        assert not any(SECRET in text.decode() or "alice" in text.decode()
                       for text in [*health, *health.values()])
        assert Health.from_json(health[parse_proxy(BAD).id.encode()]).state is State.DEAD
    run(body)


def test_a_worker_that_cannot_reach_redis_keeps_its_view_and_its_evidence(
        redis_url: str, crawl_id: str) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed = f"redis://127.0.0.1:{probe.getsockname()[1]}/0"
    bad = parse_proxy(BAD).id

    async def body() -> None:
        async with workers(redis_url, crawl_id, [GOOD, BAD], count=1) as (one,):
            healthy = one._sync_script
            unreachable = redis_client(closed, connect_timeout=0.5)
            one._sync_script = unreachable.register_script(_SYNC)  # Redis goes away
            one.observe(bad, Outcome.BAN)
            with pytest.raises(aioredis.ConnectionError):
                await one.sync()
            await unreachable.aclose()
            assert one.pool.get(bad).state is State.DEAD  # still dead locally
            one._sync_script = healthy  # Redis is back
            await one.sync()
        async with workers(redis_url, crawl_id, [], count=1) as (two,):
            assert two.pool.get(bad).state is State.DEAD  # the kept evidence arrived
    run(body)
