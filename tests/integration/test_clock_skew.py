"""Heartbeat freshness on Redis's clock: a worker whose clock is skewed is neither lost nor
forgotten, and the crawl still drains. Real Redis; the skew is injected in the writer."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from scrapy.settings import Settings

from crawler.commands.cluster import Reader, _bloom
from crawler.connections.clients import redis_client
from crawler.frontier.completion import Completion, LocalState
from crawler.frontier.crawlstate import FORGET_AFTER, CrawlState

STALE_AFTER = 7.0  # the default rule: max(3 x 1 s, 6 s session timeout + 1)
PARTITIONS = {"c.requests:0", "c.requests:1"}


@contextmanager
def clock_off_by(seconds: float) -> Iterator[None]:
    """Every ``time.time()`` in this process is *seconds* off while inside (a skewed host)."""
    real = time.time
    time.time = lambda: real() + seconds  # type: ignore[assignment]
    try:
        yield
    finally:
        time.time = real  # type: ignore[assignment]


def local(partition: str) -> LocalState:
    return LocalState(idle=True, assigned=[partition], lag=0, info={"pages": 1})


class Closed:
    def __init__(self) -> None:
        self.why: list[str] = []

    def __call__(self, why: str, reason: str = "finished") -> None:
        self.why.append(why)


async def drain_with_skew(redis_url: str, crawl_id: str, skew: float) -> tuple[Closed, Any]:
    client = redis_client(redis_url)
    try:
        here, there = (CrawlState(client, crawl_id, stale_after=STALE_AFTER) for _ in "ab")
        closed = Closed()
        a = Completion(here, "a", partitions=PARTITIONS, idle_timeout=2.0, interval=0.2,
                       local=lambda: local("c.requests:0"), close=closed)
        b = Completion(there, "b", partitions=PARTITIONS, idle_timeout=2.0, interval=0.2,
                       local=lambda: local("c.requests:1"), close=Closed())
        deadline = time.monotonic() + 60
        while not closed.why and time.monotonic() < deadline:
            with clock_off_by(skew):  # b runs on a host whose clock is off
                await b.beat()
            await a.beat()
            await asyncio.sleep(0.2)
        names = {s.worker for s in await here.workers()}
        return closed, (a.status, names, await client.hexists(here.key, "b"))
    finally:
        await client.aclose()


@pytest.mark.parametrize("skew", [-20.0, -(FORGET_AFTER + 400), 20.0])
def test_a_skewed_worker_is_live_and_the_crawl_drains(redis_url, crawl_id, skew):
    closed, (status, fresh, kept) = asyncio.run(drain_with_skew(redis_url, crawl_id, skew))
    assert kept, "the skewed worker's heartbeat was deleted as forgotten"
    assert fresh == {"a", "b"}, f"the skewed worker is taken for lost: {status}"
    assert closed.why, f"the crawl never drained: {status}"


def test_an_old_format_heartbeat_with_a_skewed_ts_is_judged_on_redis_time(redis_url, crawl_id):
    """A writer of an older version stamps ``ts`` with its own (skewed) clock."""
    async def body() -> tuple[set[str], bool, float]:
        client = redis_client(redis_url)
        state = CrawlState(client, crawl_id, stale_after=STALE_AFTER)
        reader = Reader(client, redis_url, crawl_id, _bloom(client, crawl_id, Settings()))
        try:
            for beat in range(3):
                doc = {"idle": True, "assigned": ["c.requests:1"], "lag": 0,
                       "ts": time.time() - (FORGET_AFTER + 400), "info": {"beat": beat}}
                await client.hset(state.key, "old", json.dumps(doc))
                fresh = {s.worker for s in await state.workers()}
                snapshot = await reader.read()
            age = snapshot.now - snapshot.workers["old"]["ts"]
            return fresh, bool(await client.hexists(state.key, "old")), age
        finally:
            await client.aclose()

    fresh, kept, age = asyncio.run(body())
    assert kept, "a live old-format worker was forgotten"
    assert fresh == {"old"}, "a live old-format worker is taken for lost"
    assert age <= STALE_AFTER, f"scrapy cluster status shows it lost (heartbeat {age:.0f}s old)"

