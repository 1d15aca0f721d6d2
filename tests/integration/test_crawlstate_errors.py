"""A Redis that refuses the crawl state for good (an ACL without the needed commands) stops
the worker with one clear line instead of a retry loop for ever. Real Redis, real ACL."""

from __future__ import annotations

import asyncio
import logging
import time

from crawler.connections.clients import redis_client
from crawler.frontier.completion import Completion, LocalState
from crawler.frontier.crawlstate import CrawlState


class Closed:
    def __init__(self) -> None:
        self.reasons: list[str] = []

    def __call__(self, why: str, reason: str = "finished") -> None:
        self.reasons.append(reason)


def test_heartbeats_refused_by_an_acl_close_the_worker_with_one_line(own_redis, crawl_id,
                                                                   caplog):
    async def body() -> list[str]:
        admin = redis_client(own_redis)
        await admin.execute_command("ACL", "SETUSER", "limited", "on", ">pw", "~*", "&*",
                                    "+@all", "-hset", "-eval", "-evalsha")
        await admin.aclose()
        client = redis_client(own_redis.replace("redis://", "redis://limited:pw@"))
        closed = Closed()
        completion = Completion(
            CrawlState(client, crawl_id, stale_after=7.0), "w", partitions={"t:0"},
            idle_timeout=30, interval=0.1, close=closed,
            local=lambda: LocalState(idle=False, assigned=["t:0"], lag=0))
        task = asyncio.ensure_future(completion.run())
        deadline = time.monotonic() + 60
        while not closed.reasons and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await client.aclose()
        return closed.reasons

    with caplog.at_level(logging.WARNING):
        reasons = asyncio.run(body())
    assert reasons == ["redis_error"], caplog.text[-2000:]
    refused = [r for r in caplog.records if "retrying cannot help" in r.getMessage()]
    assert len(refused) == 1 and refused[0].levelno == logging.ERROR, caplog.text[-2000:]
    assert "NoPermissionError" in refused[0].getMessage()
