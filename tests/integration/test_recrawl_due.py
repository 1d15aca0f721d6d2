"""The per-request recrawl interval (meta ``recrawl_after``) against a real Redis: the due
scripts on Redis's clock, and the outbox recording a time only after the broker's ack."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from scrapy import Request
from scrapy.statscollectors import MemoryStatsCollector
from scrapy.utils.test import get_crawler

from crawler.config.keys import CrawlKeys
from crawler.connections.clients import redis_client
from crawler.dedup.due import RedisDue
from crawler.frontier.leases import AckBarrier
from crawler.frontier.memory import MemoryBloom
from crawler.frontier.outbox import Outbox

A, B = b"\x01" * 20, b"\x02" * 20


def test_a_fingerprint_is_not_due_for_its_interval_on_redis_time(
        redis_url: str, crawl_id: str) -> None:
    async def scenario() -> None:
        client = redis_client(redis_url)
        due = RedisDue(client, crawl_id)
        try:
            assert await due.check([A], [60]) == [False]  # never queued
            await due.record([A])
            assert await due.check([A, B], [60, 60]) == [True, False]
            stored = await client.hgetall(CrawlKeys(crawl_id).recrawl_due)
            seconds, _micros = await client.time()
            assert set(stored) == {A.hex().encode()}
            assert abs(float(stored[A.hex().encode()]) - seconds) < 5  # Redis's clock
            await asyncio.sleep(0.3)
            assert await due.check([A, A], [0.2, 60]) == [False, True]  # each its interval
            many = [bytes([i % 256, i // 256]) * 10 for i in range(2500)]  # several calls
            await due.record(many)
            assert await due.check(many, [60] * len(many)) == [True] * len(many)
        finally:
            await client.delete(CrawlKeys(crawl_id).recrawl_due)
            await client.aclose()

    asyncio.run(scenario())


def test_the_outbox_records_the_time_only_after_the_ack(redis_url: str, crawl_id: str) -> None:
    acks: list[Callable[[int, int], None]] = []
    stats = MemoryStatsCollector(get_crawler())

    async def scenario() -> None:
        client = redis_client(redis_url)
        key = CrawlKeys(crawl_id).recrawl_due
        outbox = Outbox(bloom=MemoryBloom("b"), local=set(), barrier=AckBarrier(lambda _: None),
                        send=lambda _t, _k, _v, done, **_: acks.append(done), topic="t",
                        dead_topic="t.dead", key_for=lambda r: b"",
                        encode=lambda r: r.url.encode(), stats=stats,
                        due=RedisDue(client, crawl_id))
        hub = Request("http://example.com/", meta={"recrawl_after": 60})
        try:
            assert outbox.submit(hub, A)
            while not acks:
                await asyncio.sleep(0.01)
            await asyncio.sleep(0.1)
            assert await client.hlen(key) == 0  # checked, produced, not acknowledged
            acks.pop()(0, 0)
            while outbox.busy:
                await asyncio.sleep(0.01)
            assert await client.hexists(key, A.hex())
            assert outbox.submit(hub, A)  # not due: filtered by Redis, not locally
            while outbox.busy:
                await asyncio.sleep(0.01)
            assert not acks and stats.get_value("recrawl/not_due") == 1
        finally:
            await outbox.close()
            await client.delete(key)
            await client.aclose()

    asyncio.run(scenario())
