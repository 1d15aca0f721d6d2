"""The per-host shares in a real Redis: ``lua/host_slots.lua`` gives what its Python twin
(``MemorySlotStore``, the unit tests' store) gives, step for step, and never lets the workers
hold more than the limit; one round trip renews many hosts; a killed worker's shares expire."""

from __future__ import annotations

import asyncio
import random

from crawler.config.keys import CrawlKeys
from crawler.connections.clients import redis_client
from crawler.politeness.hostlimit import Demand, MemorySlotStore, RedisSlotStore

WORKERS = ("w-a", "w-b", "w-c")


def test_the_script_follows_the_python_rule_and_keeps_the_limit(redis_url, crawl_id) -> None:
    async def main() -> None:
        client = redis_client(redis_url)
        store, twin = RedisSlotStore(client, crawl_id), MemorySlotStore()
        rng = random.Random(7)
        in_flight = dict.fromkeys(WORKERS, 0)
        grants = dict.fromkeys(WORKERS, 0)
        try:
            for _step in range(400):
                worker = rng.choice(WORKERS)
                # a worker's in-flight count only falls below what it held, or rises to its grant
                in_flight[worker] = rng.randint(0, max(grants[worker], in_flight[worker]))
                demand = Demand("h.test", 6, rng.choice([0, 2, 6, 6]), in_flight[worker])
                [got] = await store.renew(worker, [demand], 60)
                assert got == twin.renew_one(worker, demand, 60)
                grants[worker] = got
                held = await client.hgetall(CrawlKeys(crawl_id).host_slots("h.test"))
                total = sum(int(v.split(b",")[0]) for v in held.values())
                assert total <= 6, f"the workers hold {total} of 6: {held}"
        finally:
            await client.aclose()

    asyncio.run(main())


def test_one_call_renews_every_host_and_a_silent_worker_expires(redis_url, crawl_id) -> None:
    async def main() -> None:
        client = redis_client(redis_url)
        store = RedisSlotStore(client, crawl_id)
        hosts = [Demand(f"h{n}.test", 4, 4, 0) for n in range(300)]
        try:
            assert await store.renew("w-a", hosts, 1.0) == [4] * 300
            assert await store.renew("w-b", hosts[:1], 1.0) == [0]
            await asyncio.sleep(1.1)  # w-a is silent for longer than its TTL
            assert await store.renew("w-b", hosts[:1], 1.0) == [4]
            key = CrawlKeys(crawl_id).host_slots("h5.test")
            assert 0 < await client.pttl(key) <= 2000  # the hash of an idle host goes too
        finally:
            await client.aclose()

    asyncio.run(main())
