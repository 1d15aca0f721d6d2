"""Lost Redis state does not empty the proxy pool: after ``FLUSHALL`` (or a ``DEL`` of the
members set) every worker keeps its last known proxies and writes them back; an operator
empties the pool on purpose with the tombstone key first. Real Redis, real proxies."""

from __future__ import annotations

import asyncio
import logging
import os
import random

import redis
from helpers import SHORT_IDLE, wait_until
from servers.testproxies import start_proxies

from crawler.connections.clients import redis_client
from crawler.localstack.demo import running, stored_pages, wait_all, worker_command, worker_logs
from crawler.politeness.proxypool import PoolPolicy, ProxyPool, parse_proxy
from crawler.politeness.proxystore import RedisProxyStore

P1, P2 = "http://user:pw@127.0.0.1:3128", "http://127.0.0.1:3129"
LOST = "is missing from Redis"



def store(url: str, crawl: str, seed: int) -> RedisProxyStore:
    pool = ProxyPool(PoolPolicy(), rng=random.Random(seed))
    return RedisProxyStore(pool, redis_client(url), crawl, redis_url=url)


def test_flushall_keeps_the_last_known_proxies_and_a_tombstone_empties_them(
        own_redis, crawl_id, caplog):
    members = f"{{{crawl_id}}}:proxies"

    async def body() -> None:
        one, two = store(own_redis, crawl_id, 1), store(own_redis, crawl_id, 2)
        client = redis_client(own_redis)
        try:
            await one.open([parse_proxy(P1), parse_proxy(P2)])
            await two.open([])
            known = {parse_proxy(P1).id, parse_proxy(P2).id}
            assert set(two.pool.proxies) == known
            await client.flushall()
            for _ in range(3):
                await one.sync()
                await two.sync()
            assert set(one.pool.proxies) == known and set(two.pool.proxies) == known
            assert {m.decode() for m in await client.smembers(members)} == {P1, P2}
            assert caplog.text.count(LOST) == 1, caplog.text  # written back: said once

            await client.set(f"{{{crawl_id}}}:proxy:none", "1")  # the operator's removal
            await client.delete(members)
            await one.sync()
            await two.sync()
            assert not one.pool.proxies and not two.pool.proxies
            assert not await client.exists(members)
        finally:
            await one.close()
            await two.close()
            await client.aclose()

    with caplog.at_level(logging.WARNING, logger="crawler.politeness.proxystore"):
        asyncio.run(body())


def test_requests_keep_flowing_through_proxies_after_the_proxy_set_is_deleted(
        stack, demo_site, demo_site_pages, crawl_id, tmp_path):
    env = {**os.environ, **stack.env(), "CRAWL_ID": crawl_id,
           "SCRAPY_SETTINGS_MODULE": "crawler.settings"}
    members = f"{{{crawl_id}}}:proxies"
    with start_proxies(tmp_path / "proxies", healthy=2) as proxies, \
            redis.Redis.from_url(env["REDIS_URL"]) as client:
        # RATELIMIT_RATE: slows this 50-page crawl to ~5 pages/s, so that the DEL lands
        # mid-crawl (the default has no rate limit)
        cmd = worker_command(demo_site + "/", {"ROTATING_PROXY_LIST": ",".join(proxies.healthy),
                                               "RATELIMIT_RATE": 5, **SHORT_IDLE})
        with running(1, cmd, env, tmp_path / "logs") as workers:
            def started() -> bool:
                return client.exists(members) == 1 and stored_pages(
                    env["MONGO_URI"], "crawler", crawl_id)[0] > 0

            wait_until(started, 180, "the first stored page")
            client.delete(members)  # lost state: FLUSHALL, eviction, restart or DEL
            done = stored_pages(env["MONGO_URI"], "crawler", crawl_id)[0]
            assert done < demo_site_pages, "the crawl ended before the DEL: nothing shown"
            wait_until(lambda: stored_pages(env["MONGO_URI"], "crawler", crawl_id)[0]
                       == demo_site_pages, 300, "every page, through the kept proxies")
            assert wait_all(workers, timeout=300) == [0]
            log = worker_logs(workers)
        assert {m.decode() for m in client.smembers(members)} == set(proxies.healthy)
    assert log.count(LOST) == 1, log[-3000:]
    assert "'proxy/state_lost': 1" in log, log[-3000:]
    assert "proxy/direct" not in log
