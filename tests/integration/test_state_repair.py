"""Redis loses a crawl's state: the guard notices and rebuilds it from MongoDB and Kafka.

Real Redis, Apache Kafka and MongoDB. A crawl is laid down as workers would have left it:
items stored under their URL's fingerprint, a failure, a refused item, request records the
group committed and some it had not, a dead letter; its Redis holds nothing (a restart
without persistence). The guard must find the loss, rebuild the Bloom filter with every
fingerprint those hold, restore the seed key from its copy, mark the ledger reset, and do
it once however many workers ask at the same time.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import pytest
import redis.asyncio as aioredis
from kafka import KafkaConsumer, KafkaProducer, OffsetAndMetadata, TopicPartition
from pymongo import AsyncMongoClient
from scrapy import Request
from scrapy.settings import Settings
from scrapy.utils.request import fingerprint

from crawler.config.keys import CrawlKeys
from crawler.dedup.dupefilter import RedisBloom
from crawler.frontier.clients import ensure_crawl_topics
from crawler.frontier.codec import encode_request
from crawler.frontier.config import FrontierConfig
from crawler.frontier.seedtrust import crawl_seed_key
from crawler.recovery import CrawlStateLost, StateGuard, StateMirror

URL = "https://site.test/p/{}"
STORED, COMMITTED, PENDING = range(0, 40), range(40, 50), range(50, 60)
FAILED, REFUSED, DEAD, NEVER = 60, 61, 62, range(63, 100)


class Stats(dict[str, Any]):
    def set_value(self, key: str, value: Any) -> None:
        self[key] = value

    def inc_value(self, key: str, count: int = 1) -> None:
        self[key] = self.get(key, 0) + count


def fp(n: int) -> bytes:
    return fingerprint(Request(URL.format(n)))


@pytest.fixture
def cfg(stack: Any, crawl_id: str) -> FrontierConfig:
    env = stack.env()
    return FrontierConfig.from_settings(Settings({
        "KAFKA_BOOTSTRAP_SERVERS": env["KAFKA_BOOTSTRAP_SERVERS"], "REDIS_URL": env["REDIS_URL"],
        "CRAWL_ID": crawl_id, "KAFKA_PARTITIONS": 2}), "spider")


@pytest.fixture
def crawl(cfg: FrontierConfig, stack: Any) -> Iterator[FrontierConfig]:
    """The crawl as its workers left it in Kafka: 20 request records, the first 10 of each
    partition's committed, and one dead letter."""
    ensure_crawl_topics(cfg)
    producer = KafkaProducer(bootstrap_servers=cfg.kafka.bootstrap)
    for n in [*COMMITTED, *PENDING]:
        producer.send(cfg.requests_topic, encode_request(Request(URL.format(n))),
                      partition=0 if n < 50 else 1)
    dead = {"reason": "too large", "source": {"url": URL.format(DEAD)}, "value": ""}
    producer.send(cfg.dead_topic, json.dumps(dead).encode())
    producer.flush()
    producer.close()
    consumer = KafkaConsumer(bootstrap_servers=cfg.kafka.bootstrap, group_id=cfg.group_id,
                             enable_auto_commit=False)
    consumer.commit({TopicPartition(cfg.requests_topic, 0): OffsetAndMetadata(10, "", -1)})
    consumer.close()
    yield cfg


def guard(cfg: FrontierConfig, client: aioredis.Redis, db: Any, worker: str,
          mode: str = "repair", stats: Stats | None = None) -> StateGuard:
    return StateGuard(
        client, cfg, mode=mode, worker=worker, stats=stats if stats is not None else Stats(),
        make_filter=lambda key: RedisBloom(client, key, capacity=1000, error_rate=1e-6,
                                           growth=2),
        database=db, by_url_id=True, fingerprint=fingerprint, state_ttl=3600.0)


async def _lay_down_mongo(db: Any, crawl: str) -> None:
    await db[crawl].insert_many([{"_id": fp(n).hex(), "url": URL.format(n)} for n in STORED])
    await db[f"{crawl}.failures"].insert_one({"_id": fp(FAILED).hex(), "url": URL.format(FAILED)})
    await db[f"{crawl}.rejected"].insert_one({"_id": "x", "url": URL.format(REFUSED)})


def test_a_lost_state_is_rebuilt_once_from_mongodb_and_kafka(
        crawl: FrontierConfig, stack: Any, caplog: pytest.LogCaptureFixture) -> None:
    env = stack.env()

    async def scenario() -> dict[str, Any]:
        client = aioredis.Redis.from_url(env["REDIS_URL"])
        mongo: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(env["MONGO_URI"])
        db = mongo["crawler"]
        try:
            await _lay_down_mongo(db, crawl.crawl_id)
            key = await crawl_seed_key(client, crawl.crawl_id)
            await StateMirror(db[f"{crawl.crawl_id}.state"]).save_seed_key(key)
            keys = CrawlKeys(crawl.crawl_id)
            await client.delete(keys.seed_key)  # Redis comes back empty
            stats = [Stats(), Stats(), Stats()]
            guards = [guard(crawl, client, db, f"w{i}", stats=stats[i]) for i in range(3)]
            await asyncio.gather(*(g.ensure() for g in guards))  # three workers at once
            bloom = RedisBloom(client, keys.bloom, capacity=1000, error_rate=1e-6, growth=2)
            await bloom.open(create=False)
            seen = await bloom.check([fp(n) for n in range(100)])
            return {"seen": seen, "stats": stats, "seed_key": await client.get(keys.seed_key),
                    "key": key, "ledger": await client.hgetall(keys.ledger),
                    "lock": await client.exists(keys.repair),
                    "rebuild": [k async for k in client.scan_iter(f"{keys.rebuild}*")]}
        finally:
            await client.aclose()
            await mongo.close()

    result = asyncio.run(scenario())
    seen = result["seen"]
    kept = [*STORED, *PENDING, FAILED, REFUSED, DEAD]
    assert [n for n in kept if not seen[n]] == [], "fingerprints the rebuilt filter misses"
    assert [n for n in COMMITTED if seen[n]] == [], "committed records without an item are " \
        "not in the filter (their pages yielded nothing to store)"
    assert sum(seen[n] for n in NEVER) == 0
    assert result["seed_key"] == result["key"], "the seed key was not restored from its copy"
    assert result["ledger"][b"reset/committed"] == b"10" and b"reset/at" in result["ledger"]
    assert result["lock"] == 0 and result["rebuild"] == []
    assert [s.get("crawl/state_lost") for s in result["stats"]] == [1, 1, 1]
    assert sum("crawl/state_repair_seconds" in s for s in result["stats"]) == 1  # one repairs
    errors = [r.getMessage() for r in caplog.records
              if r.levelname == "ERROR" and r.name.startswith("crawler.")]
    assert len(errors) == 3 and all("Redis has lost the state of crawl" in e for e in errors)
    assert "10 records committed" in errors[0] and "40 documents in MongoDB" in errors[0]


def test_stop_mode_refuses_in_one_line_naming_the_setting(crawl: FrontierConfig,
                                                          stack: Any) -> None:
    env = stack.env()

    async def scenario() -> None:
        client = aioredis.Redis.from_url(env["REDIS_URL"])
        try:
            await guard(crawl, client, None, "w", mode="stop").ensure()
        finally:
            await client.aclose()

    with pytest.raises(CrawlStateLost) as error:
        asyncio.run(scenario())
    line = str(error.value)
    assert line.startswith("Setting CRAWL_STATE_LOST: Redis has lost the state of crawl")
    assert "\n" not in line and "10 records committed" in line


def test_a_new_crawl_is_not_a_loss(cfg: FrontierConfig, stack: Any) -> None:
    env = stack.env()

    async def scenario() -> list[Any]:
        client = aioredis.Redis.from_url(env["REDIS_URL"])
        mongo: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(env["MONGO_URI"])
        stats = Stats()
        try:
            await guard(cfg, client, mongo["crawler"], "w", mode="stop", stats=stats).ensure()
            keys = CrawlKeys(cfg.crawl_id)
            return [stats, await client.exists(f"{keys.bloom}:meta")]
        finally:
            await client.aclose()
            await mongo.close()

    assert asyncio.run(scenario()) == [{}, 0]  # nothing said, nothing built: the scheduler's


def test_the_scope_hosts_a_running_worker_knew_are_written_back(stack: Any,
                                                               crawl_id: str) -> None:
    """``scrapy seed`` added a host to the crawl's scope; Redis comes back empty. A running
    worker's next read of the scope puts back every host it knew (nothing removes a host)."""
    from crawler.frontier.scope import CrawlScope

    class Spider:
        allowed_domains = ["site.test"]

    async def scenario() -> tuple[set[bytes], bool]:
        client = aioredis.Redis.from_url(stack.env()["REDIS_URL"])
        try:
            scope = CrawlScope(Spider(), client, crawl_id)
            await scope.open()
            await client.sadd(CrawlKeys(crawl_id).scope, "added.test")  # scrapy seed
            await scope.refresh()
            await client.delete(CrawlKeys(crawl_id).scope)  # Redis lost it
            await scope.refresh()
            return await client.smembers(CrawlKeys(crawl_id).scope), scope.admits_host(
                "www.added.test")
        finally:
            await client.aclose()

    members, admitted = asyncio.run(scenario())
    assert members == {b"site.test", b"added.test"} and admitted


def test_a_purged_crawl_run_again_is_new_though_its_items_stay(cfg: FrontierConfig,
                                                                stack: Any) -> None:
    """``scrapy cluster purge`` removes the Redis keys, the topics and the group, and drops
    the state copy; the items stay. Run again, the crawl starts anew: not a loss."""
    env = stack.env()

    async def scenario() -> Stats:
        client = aioredis.Redis.from_url(env["REDIS_URL"])
        mongo: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(env["MONGO_URI"])
        stats = Stats()
        try:
            await _lay_down_mongo(mongo["crawler"], cfg.crawl_id)
            await guard(cfg, client, mongo["crawler"], "w", mode="stop", stats=stats).ensure()
            return stats
        finally:
            await client.aclose()
            await mongo.close()

    assert asyncio.run(scenario()) == {}

