"""The dupefilter's settings and errors reach the worker: ``BLOOM_ON_MISSING`` through the
scheduler, and a Redis that refuses the Bloom script for good (an ACL, ``OOM``) stops the
worker with one line instead of a retry loop for ever, its leases left unacknowledged.
Real Redis servers of the tests' own (they get ACL users, a tiny ``maxmemory``)."""

from __future__ import annotations

import asyncio
import logging
import re
from pathlib import Path
from typing import Any

import pytest
import redis
from helpers import wait_until
from scrapy import Request
from support.scheduler import scheduler_for

from crawler.connections.clients import redis_client
from crawler.dedup.dupefilter import BloomMissing, RedisBloom
from crawler.dedup.local import LocalBloom
from crawler.frontier.leases import AckBarrier
from crawler.frontier.outbox import Outbox
from crawler.localstack import demo_site as site
from crawler.localstack.demo import running, worker_command, worker_logs
from crawler.localstack.stack import Stack

REFUSED = "retrying cannot help"


@pytest.mark.parametrize("on_missing", ["pause", "recreate"])
def test_bloom_on_missing_reaches_the_scheduler_filter(own_redis: str, crawl_id: str,
                                                       on_missing: str) -> None:
    """The filter the scheduler builds follows BLOOM_ON_MISSING and counts bloom/missing."""
    settings = {} if on_missing == "pause" else {"BLOOM_ON_MISSING": on_missing}
    scheduler = scheduler_for(own_redis, crawl_id, **settings)

    async def scenario() -> tuple[bool, int]:
        scheduler.redis = redis_client(own_redis)
        try:
            bloom = scheduler._bloom()
            await bloom.open()
            await bloom.add([b"a" * 20])
            await scheduler.redis.flushall()
            try:
                await bloom.check([b"a" * 20])
                paused = False
            except BloomMissing:  # only this one: another error is no pause, it fails the test
                paused = True
            return paused, await scheduler.redis.exists(f"{{{crawl_id}}}:bloom:meta")
        finally:
            await scheduler.redis.aclose()

    paused, exists = asyncio.run(scenario())
    assert (paused, exists) == ((True, 0) if on_missing == "pause" else (False, 1))
    assert scheduler.stats.get_value("bloom/missing") == 1


async def _refuse(admin: redis.asyncio.Redis, how: str) -> None:
    """Make Redis refuse the Bloom script for good, as an operator's change would."""
    if how == "oom":
        await admin.config_set("maxmemory-policy", "noeviction")
        await admin.config_set("maxmemory", "1")
    else:
        await admin.execute_command("ACL", "SETUSER", "limited", "-eval", "-evalsha")


class _Unplugged(BaseException):
    """Ends an outbox loop that retries for ever (a broken build) when the test is over."""


class _Unplug:
    async def check(self, fingerprints: Any) -> list[bool]:
        raise _Unplugged

    add = check


class _Stats:
    def __init__(self) -> None:
        self.values: dict[str, int] = {}

    def inc_value(self, key: str, count: int = 1) -> None:
        self.values[key] = self.values.get(key, 0) + count


@pytest.mark.parametrize("how", ["noperm", "oom"])
def test_a_refused_bloom_script_stops_the_outbox_and_keeps_the_lease(
        own_redis: str, how: str, caplog: pytest.LogCaptureFixture) -> None:
    released: list[str] = []
    stops: list[str] = []
    sent: list[bytes] = []
    barrier = AckBarrier(released.append)

    async def scenario() -> None:
        admin = redis_client(own_redis)
        await admin.execute_command("ACL", "SETUSER", "limited", "on", ">pw", "~*", "&*",
                                    "+@all")
        client = redis_client(own_redis.replace("redis://", "redis://limited:pw@"))
        bloom = RedisBloom(client, "{c}:bloom", capacity=1000, error_rate=0.01, growth=2)
        await bloom.open()
        await _refuse(admin, how)
        outbox = Outbox(bloom=bloom, local=LocalBloom(capacity=100, error_rate=0.01),
                        send=lambda _t, _k, value, done, **_: (sent.append(value), done(0, 0)),
                        barrier=barrier, topic="t", dead_topic="t.dead",
                        key_for=lambda r: b"", encode=lambda r: r.url.encode(),
                        stats=_Stats(), backoff=0.01, stop=stops.append)  # type: ignore[arg-type]
        try:
            for i in range(5):
                outbox.submit(Request(f"http://example.com/{i}"), bytes([i]) * 20)
            barrier.finish("the parent lease")
            for _ in range(2000):  # an event-based wait: stop is called, or the test fails
                if stops:
                    break
                await asyncio.sleep(0.01)
            # NOPERM refuses the check: nothing is produced, the 5 requests are given up.
            # OOM lets the read-only check run: the 5 are produced, adding them is refused.
            assert outbox.stopped and outbox.abandoned == (5 if how == "noperm" else 0)
            outbox.submit(Request("http://example.com/later"), b"z" * 20)
            await asyncio.sleep(0.2)  # nothing to wait for: a stopped outbox calls no one
            assert outbox.stats.values.get("bloom/retries") is None  # type: ignore[attr-defined]
        finally:
            outbox.bloom = _Unplug()
            await asyncio.sleep(0.1)
            await admin.config_set("maxmemory", "0")
            await client.aclose()
            await admin.aclose()

    with caplog.at_level(logging.WARNING):
        asyncio.run(scenario())
    if how == "noperm":
        assert released == [] and sent == [], "acknowledged, or produced unchecked"
    else:  # produced, so the lease may end; not marked seen: at worst fetched twice
        assert released == ["the parent lease"] and len(sent) == 5
    assert len(stops) == 1
    expected = "NoPermissionError" if how == "noperm" else "OutOfMemoryError"
    assert expected in stops[0]
    lines = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(lines) == 1 and REFUSED in lines[0].getMessage(), caplog.text[-2000:]
    assert lines[0].levelno == logging.ERROR


def test_a_worker_whose_bloom_calls_are_refused_closes_with_redis_error(
        stack: Stack, own_redis: str, crawl_id: str, tmp_path: Path) -> None:
    """A real worker, default settings (its Redis is the test's own, so that an ACL can be
    set). Mid-crawl the Bloom filter's keys become forbidden to it: it says so in one ERROR
    line and closes by itself with finish reason redis_error (old code: retried for ever)."""
    env = {**stack.env(), "REDIS_URL": own_redis, "CRAWL_ID": crawl_id}
    site.generate(tmp_path / "site", 3000)
    server = site.serve(tmp_path / "site")
    admin = redis.Redis.from_url(own_redis)
    try:
        with running(1, worker_command(server.base_url + "/", {}), env,
                     tmp_path / "logs") as workers:
            log = Path(workers[0].log.name)
            wait_until(lambda: "Kafka frontier open" in log.read_text(errors="replace"), 180,
                       "the worker to open the frontier")
            wait_until(lambda: admin.exists(f"{{{crawl_id}}}:bloom:s0"), 180,
                       "the worker to add to the filter")
            # every key but the filter's: heartbeats and seed claims still work
            admin.execute_command("ACL", "SETUSER", "default", "resetkeys",
                                  f"~{{{crawl_id}}}:[^b]*", "~[^{]*")
            wait_until(lambda: workers[0].process.poll() is not None, 180,
                       "the worker to close by itself")
            logs = worker_logs(workers)
    finally:
        admin.execute_command("ACL", "SETUSER", "default", "allkeys")
        admin.close()
        server.close()
    refused = [line for line in logs.splitlines() if REFUSED in line]
    assert len(refused) == 1 and "ERROR" in refused[0], logs[-3000:]
    assert "Redis refuses dupefilter" in refused[0] and "NoPermissionError" in refused[0]
    assert re.search(r"'finish_reason': 'redis_error'", logs), logs[-3000:]
    assert "heartbeats" not in refused[0]


def test_a_missing_filter_stalls_the_outbox_until_it_is_back(
        own_redis: str, caplog: pytest.LogCaptureFixture) -> None:
    """BloomMissing is transient: retried with a backoff, nothing given up or stopped."""
    stops: list[str] = []
    sent: list[bytes] = []
    stats = _Stats()

    async def scenario() -> None:
        client = redis_client(own_redis)
        params: dict[str, Any] = {"capacity": 1000, "error_rate": 0.01, "growth": 2}
        bloom = RedisBloom(client, "{c}:bloom", **params)
        await bloom.open()
        await client.flushall()
        outbox = Outbox(bloom=bloom, local=LocalBloom(capacity=100, error_rate=0.01),
                        send=lambda _t, _k, value, done, **_: (sent.append(value), done(0, 0)),
                        barrier=AckBarrier(lambda _: None), topic="t", dead_topic="t.dead",
                        key_for=lambda r: b"", encode=lambda r: r.url.encode(),
                        stats=stats, backoff=0.01, backoff_max=0.05,  # type: ignore[arg-type]
                        stop=stops.append)
        outbox.submit(Request("http://example.com/"), b"a" * 20)
        for _ in range(2000):
            if stats.values.get("bloom/retries", 0) >= 3:
                break
            await asyncio.sleep(0.01)
        assert sent == [] and not outbox.stopped
        await RedisBloom(client, "{c}:bloom", **params).open()  # e.g. a worker started
        for _ in range(2000):
            if sent:
                break
            await asyncio.sleep(0.01)
        await client.aclose()

    with caplog.at_level(logging.INFO):
        asyncio.run(scenario())
    assert len(sent) == 1 and stops == []
    assert stats.values["bloom/retries"] >= 3
    messages = [r.getMessage() for r in caplog.records]
    assert sum("Redis dupefilter unavailable, retrying: BloomMissing" in m for m in messages) == 1
    assert any("Redis dupefilter reachable again" in m for m in messages)
    assert not any(REFUSED in m for m in messages)
