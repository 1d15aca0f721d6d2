"""``scrapy cluster purge CRAWL_ID`` against real Redis and a real broker: it removes every
key and topic of one crawl and nothing of another, only with ``--yes``, never while a
worker of the crawl is live."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time

import redis
from kafka import KafkaAdminClient
from pymongo import MongoClient

from crawler.connections import clients as connection
from crawler.connections.clients import redis_client
from crawler.dedup.dupefilter import RedisBloom
from crawler.frontier import crawllife
from crawler.frontier.crawlstate import CrawlState


async def make_crawl(url: str, bootstrap: str, crawl: str) -> None:
    """The state a finished crawl leaves: filter, seed claim, proxies, finished mark,
    an old heartbeat, topics."""
    client = redis_client(url)
    try:
        await RedisBloom(client, f"{{{crawl}}}:bloom", capacity=1000, error_rate=0.01,
                         growth=2).open()
        await CrawlState(client, crawl, stale_after=7.0).claim_seed("ab" * 20, "seeds:0:0")
        await client.sadd(f"{{{crawl}}}:proxies", "http://127.0.0.1:9")
        await client.hset(f"{{{crawl}}}:proxy:health", "127.0.0.1:9", "{}")
        await crawllife.mark_finished(client, crawl, crawllife.Finished(1.0, 1.0))
        old = {"idle": True, "assigned": [], "lag": 0, "ts": time.time() - 3600, "info": {}}
        await client.hset(f"{{{crawl}}}:workers", "gone", json.dumps(old))
    finally:
        await client.aclose()
    await asyncio.to_thread(connection.ensure_topics, bootstrap,
                            {t: 2 for t in crawllife.topics_of(crawl)},
                            connect_timeout=10)


def keys(url: str, crawl: str) -> set[str]:
    with redis.Redis.from_url(url) as client:
        return {k.decode() for k in client.scan_iter(match=f"{{{crawl}}}:*")}


def topics(bootstrap: str) -> set[str]:
    admin = KafkaAdminClient(**connection.kafka_common(bootstrap, 10))
    try:
        return set(admin.list_topics())
    finally:
        admin.close()


def purge(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "scrapy", "cluster", "purge", *args], env=env,
                          capture_output=True, text=True, timeout=120)


def test_purge_removes_one_crawl_and_nothing_of_another(stack, crawl_id):
    env = {**os.environ, **stack.env(), "SCRAPY_SETTINGS_MODULE": "crawler.settings"}
    url, bootstrap = env["REDIS_URL"], env["KAFKA_BOOTSTRAP_SERVERS"]
    other = crawl_id + ".2"  # a name that starts like the purged one
    for crawl in (crawl_id, other):
        asyncio.run(make_crawl(url, bootstrap, crawl))
    before, theirs = keys(url, crawl_id), keys(url, other)
    assert {crawllife.family(crawl_id, k) for k in before} >= {
        "bloom", "seed", "proxies", "proxy", "finished", "workers"}, before
    assert set(crawllife.topics_of(crawl_id)) <= topics(bootstrap)

    with MongoClient(env["MONGO_URI"]) as mongo:  # the copy of each crawl's state
        for crawl in (crawl_id, other):
            mongo["crawler"][f"{crawl}.state"].insert_one({"_id": "seed_key", "key": "k"})
            mongo["crawler"][f"{crawl}.urls"].insert_one({"_id": "http://a.test/"})
    dry = purge(env, crawl_id)  # without --yes: lists, removes nothing
    assert dry.returncode == 1, dry.stderr[-2000:]
    assert f"would remove {len(before)} Redis keys" in dry.stdout, dry.stdout
    assert keys(url, crawl_id) == before

    done = purge(env, crawl_id, "--yes")
    assert done.returncode == 0, done.stderr[-2000:]
    assert f"removed {len(before)} Redis keys" in done.stdout, done.stdout
    assert "3 Kafka topics" in done.stdout, done.stdout
    assert keys(url, crawl_id) == set()
    left = topics(bootstrap)
    assert not set(crawllife.topics_of(crawl_id)) & left, left
    assert keys(url, other) == theirs  # the other crawl is untouched
    with MongoClient(env["MONGO_URI"]) as mongo:  # run again, the crawl starts anew
        names = set(mongo["crawler"].list_collection_names())
    assert f"{crawl_id}.state" not in names and f"{other}.state" in names, names
    assert f"{crawl_id}.urls" not in names and f"{other}.urls" in names, names  # the index
    assert set(crawllife.topics_of(other)) <= left
    print(done.stdout)  # the sample in docs/cluster.md comes from here (pytest -s)


def test_purge_refuses_a_crawl_with_a_live_worker(stack, crawl_id):
    env = {**os.environ, **stack.env(), "SCRAPY_SETTINGS_MODULE": "crawler.settings"}
    url = env["REDIS_URL"]

    async def live_worker() -> None:
        client = redis_client(url)
        try:
            await CrawlState(client, crawl_id, stale_after=7.0).beat(
                "w1", idle=False, assigned=[], lag=0, info={})
        finally:
            await client.aclose()

    asyncio.run(live_worker())
    before = keys(url, crawl_id)
    proc = purge(env, crawl_id, "--yes")
    assert proc.returncode == 1
    assert "live worker" in proc.stderr and "scrapy cluster stop" in proc.stderr, proc.stderr
    assert keys(url, crawl_id) == before
