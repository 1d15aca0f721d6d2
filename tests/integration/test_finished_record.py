"""A crawl's finished record says when its run began (the first worker's first heartbeat),
on a real Redis: ``scrapy cluster status`` gives a finished crawl's duration from it."""

from __future__ import annotations

import asyncio
from typing import Any

from test_clock_skew import PARTITIONS, STALE_AFTER, Closed, local

from crawler.config.keys import CrawlKeys
from crawler.connections.clients import redis_client
from crawler.frontier import crawllife
from crawler.frontier.completion import Completion
from crawler.frontier.crawlstate import CrawlState


async def _run(redis_url: str, crawl_id: str) -> dict[str, Any]:
    client = redis_client(redis_url)
    try:
        states = [CrawlState(client, crawl_id, stale_after=STALE_AFTER) for _ in "ab"]
        closed = Closed()
        a, b = (Completion(state, name, partitions=PARTITIONS, idle_timeout=1.0, interval=0.2,
                           local=lambda p=part: local(p), close=closed)
                for state, name, part in zip(states, "ab", sorted(PARTITIONS), strict=True))
        await a.beat()
        await asyncio.sleep(0.5)  # b joins the run later: the run began with a
        while not closed.why:  # both may finish the crawl in one round: the record is one
            await b.beat()
            await a.beat()
            await asyncio.sleep(0.2)
        record = await crawllife.read_finished(client, crawl_id)
        kept = await client.get(CrawlKeys(crawl_id).run_started)
        again = Completion(states[0], "c", partitions=PARTITIONS, idle_timeout=1.0,
                           interval=0.2, local=lambda: local("c.requests:0"), close=Closed())
        await again.beat()  # a new run of the finished crawl
        return {"a": a.started, "b": b.started, "record": record, "kept": kept,
                "next": await client.get(CrawlKeys(crawl_id).run_started), "c": again.started}
    finally:
        await client.aclose()


def test_the_finished_record_has_the_runs_start_and_the_next_run_its_own(
        redis_url: str, crawl_id: str) -> None:
    seen = asyncio.run(_run(redis_url, crawl_id))
    record = seen["record"]
    assert record is not None and record.reason == "finished"
    assert record.started == seen["a"] < seen["b"]  # the first worker's first heartbeat
    assert record.closed - record.started >= 1.0  # at least the idle timeout
    assert float(seen["kept"]) == record.started  # until the next run begins
    assert float(seen["next"]) == seen["c"] > record.closed
