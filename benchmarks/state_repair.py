"""How long the repair of a crawl's lost Redis state takes, per million stored pages::

    .venv/bin/python -m benchmarks.state_repair                  # 1,000,000 stored pages
    .venv/bin/python -m benchmarks.state_repair --pages 100000   # smoke

A local stack (Redis, Apache Kafka, mongod) holds a crawl as its workers would have left it:
``--pages`` items stored under their URL's fingerprint, ``--pending`` request records not yet
committed. Redis holds nothing (it came back empty). The state guard
(:mod:`crawler.recovery`) then detects the loss and rebuilds the Bloom filter at the default
``BLOOM_*`` sizes; the time of the repair and its parts are printed as JSON, with the
seconds per million stored pages. Writes ``docs/benchmarks/state_repair.json`` with ``--out``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import tempfile
import time
from pathlib import Path
from typing import Any

import redis.asyncio as aioredis
from kafka import KafkaProducer
from pymongo import AsyncMongoClient, InsertOne
from scrapy import Request
from scrapy.settings import Settings
from scrapy.utils.request import fingerprint

from crawler.config import defaults
from crawler.dedup.dupefilter import RedisBloom
from crawler.frontier.clients import ensure_crawl_topics
from crawler.frontier.codec import encode_request
from crawler.frontier.config import FrontierConfig
from crawler.localstack.stack import Stack
from crawler.recovery import StateGuard, StateMirror

CRAWL = "repair-bench"
URL = "https://bench.test/p/{}"


class _Stats(dict[str, Any]):
    def set_value(self, key: str, value: Any) -> None:
        self[key] = value

    def inc_value(self, key: str, count: int = 1) -> None:
        self[key] = self.get(key, 0) + count


async def _store(mongo_uri: str, pages: int) -> float:
    """Insert *pages* items as the pipeline would key them; seconds taken (not measured)."""
    started = time.monotonic()
    client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(mongo_uri)
    try:
        await StateMirror(client["crawler"][f"{CRAWL}.state"]).save_seed_key(b"0" * 64)
        items = client["crawler"][CRAWL]
        for first in range(0, pages, 20_000):
            await items.bulk_write([
                InsertOne({"_id": fingerprint(Request(URL.format(n))).hex(),
                           "url": URL.format(n), "title": f"Page {n}"})
                for n in range(first, min(first + 20_000, pages))], ordered=False)
    finally:
        await client.close()
    return time.monotonic() - started


def _queue(cfg: FrontierConfig, first: int, count: int) -> None:
    ensure_crawl_topics(cfg)
    producer = KafkaProducer(bootstrap_servers=cfg.kafka.bootstrap, linger_ms=20)
    for n in range(first, first + count):
        producer.send(cfg.requests_topic, encode_request(Request(URL.format(n))))
    producer.flush()
    producer.close()


async def _repair(env: dict[str, str], cfg: FrontierConfig) -> dict[str, Any]:
    client = aioredis.Redis.from_url(env["REDIS_URL"])
    mongo: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(env["MONGO_URI"])
    stats = _Stats()
    guard = StateGuard(
        client, cfg, mode="repair", worker="bench", stats=stats,
        make_filter=lambda key: RedisBloom(client, key, capacity=defaults.BLOOM_CAPACITY,
                                           error_rate=defaults.BLOOM_ERROR_RATE,
                                           growth=defaults.BLOOM_GROWTH),
        database=mongo["crawler"], by_url_id=True, fingerprint=fingerprint, state_ttl=0)
    try:
        started = time.monotonic()
        await guard.ensure()
        took = time.monotonic() - started
        memory = (await client.info("memory"))["used_memory"]
    finally:
        await client.aclose()
        await mongo.close()
    return {"seconds": round(took, 2), "rebuild_seconds": stats.get("crawl/state_repair_seconds"),
            "redis_used_memory": memory}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pages", type=int, default=1_000_000)
    parser.add_argument("--pending", type=int, default=10_000)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    with tempfile.TemporaryDirectory() as tmp:
        stack = Stack(Path(tmp) / "stack")
        try:
            env = stack.start()
            cfg = FrontierConfig.from_settings(Settings({
                "KAFKA_BOOTSTRAP_SERVERS": env["KAFKA_BOOTSTRAP_SERVERS"],
                "REDIS_URL": env["REDIS_URL"], "CRAWL_ID": CRAWL}), "bench")
            stored_in = asyncio.run(_store(env["MONGO_URI"], args.pages))
            _queue(cfg, args.pages, args.pending)
            result = asyncio.run(_repair(env, cfg))
        finally:
            stack.stop()
    result.update(pages=args.pages, pending=args.pending, setup_seconds=round(stored_in, 1),
                  seconds_per_million_pages=round(result["seconds"] * 1e6 / args.pages, 1))
    text = json.dumps(result, indent=2)
    print(text)
    if args.out is not None:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
