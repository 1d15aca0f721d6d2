"""The shared token bucket against a real Redis, and RateLimitMiddleware."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import random
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from functools import partial
from http.server import SimpleHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest
from helpers import tracebacks_outside_kafka
from scrapy import Request
from scrapy.http import Response
from scrapy.settings import Settings
from support.ratelimit import CLOCK as _CLOCK
from support.ratelimit import HOST, cleanup, opened, run

from crawler.connections.clients import redis_client
from crawler.frontier.delay import NOT_BEFORE_KEY, UNIT_FREED, WAITS_FOR_KEY
from crawler.middlewares.ratelimit import META_KEY
from crawler.politeness.ratelimiter import LocalLimiter, RateLimitConfig, RedisLimiter
from crawler.politeness.tokenbucket import (
    LUA_ENDED,
    LUA_RESERVE,
    Bucket,
    Limit,
    LocalBuckets,
    reserve,
)

ROOT = Path(__file__).resolve().parents[2]
KAFKA = "crawler.frontier.scheduler.KafkaScheduler"


def settings_for(redis_url: str, crawl_id: str, **extra: Any) -> dict[str, Any]:
    """A rate for every host (the default, 0, gives one only to Crawl-delay hosts)."""
    return {"REDIS_URL": redis_url, "CRAWL_ID": crawl_id, "RATELIMIT_ENABLED": True,
            "RATELIMIT_RATE": 1.0, **extra}


@asynccontextmanager
async def limiter(redis_url: str, crawl_id: str, **extra: Any) -> AsyncIterator[RedisLimiter]:
    settings = Settings(settings_for(redis_url, crawl_id, **extra))
    cfg = RateLimitConfig.from_settings(settings, "rate")
    limiter = RedisLimiter(redis_client(redis_url), crawl_id, cfg)
    try:
        yield limiter
    finally:
        await cleanup(limiter.client, crawl_id)
        await limiter.close()


async def _until(predicate: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    """Wait on the event loop until *predicate* holds; fail naming *what* after *timeout*."""
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.02)


def test_lua_reservations_match_the_python_maths(redis_url: str, crawl_id: str) -> None:
    rng = random.Random(3)
    keys = [f"{{{crawl_id}}}:ratelimit:{HOST}", f"{{{crawl_id}}}:ratelimit:overrides"]

    async def scenario() -> None:
        client = redis_client(redis_url)
        script = client.register_script(LUA_RESERVE)
        bucket: Bucket | None = None
        now = 1000.0
        try:
            for _ in range(300):
                now += rng.choice([0.0, 0.0, rng.random(), rng.random() * 5])
                limit = Limit(rng.choice([0.5, 2.0, 10.0]), rng.choice([1.0, 3.0]))
                expected, bucket = reserve(bucket, limit, now, 4.0)
                got = await script(keys=keys, args=[repr(now), HOST, repr(limit.rate),
                                                    repr(limit.burst), "60", "4.0"])
                assert bool(got[0]) == expected.reserved
                assert float(got[1]) == pytest.approx(expected.wait, abs=1e-9)
        finally:
            await cleanup(client, crawl_id)
            await client.aclose()

    run(scenario)


def test_a_gap_restarts_when_its_request_ends(redis_url: str, crawl_id: str) -> None:
    """A host with a gap (Crawl-delay, DOWNLOAD_DELAY): its next token is a whole gap after
    the previous request ended, not after that request's token; the same in memory."""
    limit = Limit(1 / 0.5, 1.0)  # a 0.5 s gap

    async def scenario() -> None:
        async with limiter(redis_url, crawl_id) as redis_limiter:
            local = LocalLimiter(redis_limiter.cfg)
            for each in (redis_limiter, local):
                first = await each.reserve(HOST, limit, 0.001)
                assert first.reserved and first.wait == 0.0
                await asyncio.sleep(0.3)  # the answer takes 0.3 s
                await each.ended(HOST, limit)
                second = await each.reserve(HOST, limit, 0.001)  # not at 0.5 s: at 0.8 s
                assert not second.reserved and second.wait == pytest.approx(0.5, abs=0.05)

    run(scenario)


def test_a_held_host_in_redis_is_the_held_host_in_memory(redis_url: str, crawl_id: str) -> None:
    """A gap's token holds its host until its request ends (or the hold runs out): the Lua
    scripts give what LocalBuckets gives, step by step, on the same clock."""
    keys = [f"{{{crawl_id}}}:ratelimit:{HOST}", f"{{{crawl_id}}}:ratelimit:overrides"]
    limit, hold = Limit(2.0, 1.0), 35.0  # a 0.5 s gap
    steps = [("reserve", 0.0, None), ("reserve", 2.0, None), ("ended", 2.5, 1.0),
             ("ended", 3.0, 0.0), ("reserve", 3.4, None), ("reserve", 3.5, None),
             ("reserve", 38.9, None), ("reserve", 39.0, None)]

    async def scenario() -> None:
        client = redis_client(redis_url)
        reserve_lua, ended_lua = client.register_script(LUA_RESERVE), client.register_script(
            LUA_ENDED)
        local = LocalBuckets()
        common = [HOST, repr(limit.rate), repr(limit.burst), "60"]
        try:
            for what, now, holder in steps:
                clock = repr(1000.0 + now)
                if what == "reserve":
                    got = await reserve_lua(keys=keys, args=[clock, *common, "0.001", repr(hold)])
                    want = local.reserve(HOST, limit, 1000.0 + now, 0.001, hold)
                    assert (bool(got[0]), float(got[1])) == pytest.approx(
                        (want.reserved, want.wait)), (what, now)
                else:
                    mark = repr(1000.0 + holder)
                    got = await ended_lua(keys=keys, args=[clock, *common, mark])
                    want_next = local.ended(HOST, 1000.0 + now, limit.rate, 1000.0 + holder)
                    assert float(got) == pytest.approx(want_next), (what, now)
        finally:
            await cleanup(client, crawl_id)
            await client.aclose()

    run(scenario)


_CHILD = """
import asyncio, json, sys
from scrapy.settings import Settings
from crawler.connections.clients import redis_client
from crawler.politeness.ratelimiter import RateLimitConfig, RedisLimiter

async def main(url, crawl_id, host, count):
    cfg = RateLimitConfig.from_settings(Settings({
        "REDIS_URL": url, "CRAWL_ID": crawl_id, "RATELIMIT_RATE": 20, "RATELIMIT_BURST": 5,
        "RATELIMIT_MAX_WAIT": 1e6}), "rate")
    limiter = RedisLimiter(redis_client(url), crawl_id, cfg)
    limit = cfg.limit(host)
    print("ready", flush=True)
    await limiter.client.blpop([host + ":go"], timeout=30)
    async def one():
        grant = await limiter.reserve(host, limit)
        return grant.now + grant.wait if grant.reserved else None
    slots = []
    for _ in range(count // 50):  # 50 calls in flight at a time
        slots += await asyncio.gather(*[one() for _ in range(50)])
    await limiter.close()
    print(json.dumps(slots), flush=True)

asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])))
"""


def test_reservations_are_atomic_across_two_processes(redis_url: str, crawl_id: str) -> None:
    rate, burst, count = 20, 5, 1000
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    children = [subprocess.Popen([sys.executable, "-c", _CHILD, redis_url, crawl_id, HOST,
                                  str(count)], stdout=subprocess.PIPE, text=True, env=env, cwd=ROOT)
                for _ in range(2)]
    try:
        for child in children:
            assert child.stdout is not None and child.stdout.readline().strip() == "ready"

        async def go() -> None:
            client = redis_client(redis_url)
            await client.rpush(f"{HOST}:go", 1, 1)
            await client.aclose()

        run(go)
        outputs = [child.communicate(timeout=120)[0] for child in children]
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
    assert [child.returncode for child in children] == [0, 0]
    slots = sorted(s for out in outputs for s in json.loads(out.strip().splitlines()[-1]))
    assert len(slots) == 2 * count and None not in slots
    windows: dict[int, int] = {}
    for slot in slots:  # one-second windows from the first slot
        windows[int(slot - slots[0])] = windows.get(int(slot - slots[0]), 0) + 1
    assert max(windows.values()) <= rate + burst
    # and sliding ones: no second, wherever it starts, holds more
    assert all(sum(1 for t in slots[i:i + rate + burst + 1] if t < s + 1) <= rate + burst
               for i, s in enumerate(slots))
    # no slot was lost either: the schedule is as tight as the bucket allows
    assert slots[-1] - slots[0] == pytest.approx((2 * count - burst) / rate, abs=0.5)

    async def clean() -> None:
        client = redis_client(redis_url)
        await cleanup(client, crawl_id)
        await client.aclose()

    run(clean)


def test_live_overrides_take_effect_on_the_next_call(redis_url: str, crawl_id: str) -> None:
    async def scenario() -> None:
        async with limiter(redis_url, crawl_id, RATELIMIT_RATE=1, RATELIMIT_BURST=1) as rl:
            limit = rl.cfg.limit(HOST)
            assert [(await rl.reserve(HOST, limit)).wait > 0.5 for _ in range(2)] == [False, True]
            await rl.client.hset(rl.overrides_key, HOST, json.dumps({"rate": 1000, "burst": 50}))
            other = await rl.reserve("other.example", limit)  # other hosts keep the settings
            assert other.configured == 1.0
            await asyncio.sleep(1.1)  # the queued slot passes; then 50 go at once
            waits = [await rl.reserve(HOST, limit) for _ in range(50)]
            assert max(w.wait for w in waits) < 0.05
            assert waits[0].configured == 1000.0 and not waits[0].bad_override
            await rl.client.hset(rl.overrides_key, HOST, '{"rate": 0.5}')
            slow = [await rl.reserve(HOST, limit) for _ in range(3)]
            assert [g.configured for g in slow] == [0.5] * 3
            slots = [g.now + g.wait for g in slow]  # on the limiter's clock: no wall time
            assert slots[2] - slots[1] == pytest.approx(2.0, abs=1e-6)
            await rl.client.hset(rl.overrides_key, HOST, '{"rate": "fast"')
            assert (await rl.reserve(HOST, limit)).bad_override

    run(scenario)


def test_adaptive_decrease_is_visible_to_another_client(redis_url: str, crawl_id: str) -> None:
    extra = {"RATELIMIT_RATE": 8, "RATELIMIT_BURST": 1, "RATELIMIT_RECOVER_AFTER": 2,
             "RATELIMIT_RECOVER_STEP": 0.25, "RATELIMIT_MIN_RATE": 1}

    async def scenario() -> None:
        async with limiter(redis_url, crawl_id, **extra) as a, \
                limiter(redis_url, crawl_id, **extra) as b:
            limit = a.cfg.limit(HOST)
            sent = await a.reserve(HOST, limit)
            assert await a.decrease(HOST, limit, sent.now) == (True, 4.0)
            seen = await b.reserve(HOST, limit)
            assert (seen.rate, seen.configured) == (4.0, 8.0)
            # a second 429 from a request sent before the decrease counts once
            assert await b.decrease(HOST, limit, sent.now) == (False, 4.0)
            assert await b.decrease(HOST, limit, seen.now) == (True, 2.0)
            for _ in range(3):
                await b.decrease(HOST, limit, (await a.reserve(HOST, limit)).now)
            assert (await a.reserve(HOST, limit)).rate == 1.0  # the floor
            results = [await b.recover(HOST, limit) for _ in range(4)]
            assert results == [(False, 1.0), (True, 3.0), (False, 3.0), (True, 5.0)]
            assert (await a.reserve(HOST, limit)).rate == 5.0
            for _ in range(4):
                await a.recover(HOST, limit)
            assert (await b.reserve(HOST, limit)).rate == 8.0
            assert await a.client.hget(a.key(HOST), "rate") is None

    run(scenario)


def test_middleware_returns_a_delayed_copy_under_the_kafka_scheduler(
    redis_url: str, crawl_id: str
) -> None:
    settings = settings_for(redis_url, crawl_id, SCHEDULER=KAFKA, RATELIMIT_RATE=1,
                            RATELIMIT_BURST=1)

    async def scenario() -> None:
        async with opened(settings) as mw:
            # Slots follow the first token (taken at some t1 in [before, after of its call]):
            # t1 + 1 and t1 + 2 at one request a second, however slowly the calls run.
            before = time.time() - _CLOCK
            first = Request(f"https://{HOST}/1")
            assert await mw.process_request(first) is None  # a token was there
            assert first.meta[META_KEY]["host"] == HOST
            second = Request(f"https://{HOST}/2")
            copy = await mw.process_request(second)
            assert isinstance(copy, Request) and copy.url == second.url and copy.dont_filter
            assert before + 1.0 <= copy.meta[NOT_BEFORE_KEY] <= time.time() + 1.0 + _CLOCK
            assert copy.meta[META_KEY]["reserved"] is True
            assert await mw.process_request(Request("https://other.example/")) is None
            # back when due: it holds its slot, takes no other token
            copy.meta[META_KEY]["due"] = time.time()
            assert await mw.process_request(copy) is None
            third = await mw.process_request(Request(f"https://{HOST}/3"))
            assert isinstance(third, Request)
            assert before + 2.0 <= third.meta[NOT_BEFORE_KEY] <= time.time() + 2.0 + _CLOCK
            spent = time.time() + _CLOCK - before  # the waits are 1 and 2 s less time passed
            stats = mw.stats.get_stats()
            assert (stats["ratelimit/granted"], stats["ratelimit/waits"]) == (4, 2)
            assert stats["ratelimit/redeemed"] == 1
            assert 3.0 - 2 * spent <= stats["ratelimit/wait_seconds"] <= 3.0 + _CLOCK

    run(scenario)


def test_a_gap_token_holds_its_host_until_its_request_left_the_downloader(
    redis_url: str, crawl_id: str
) -> None:
    """A host with a gap (here DOWNLOAD_DELAY 0.5 s): while its request is on its way, a
    gap's time later is not enough for the next one, which waits for that request's end
    (the origin saw two requests 0.045 s apart when the first was late); the end tells the
    buffer when the next one may go, once."""
    settings = {"REDIS_URL": redis_url, "CRAWL_ID": crawl_id, "SCHEDULER": KAFKA,
                "RATELIMIT_ENABLED": True, "HOSTLIMIT_ENABLED": True, "DOWNLOAD_DELAY": 0.5}
    freed: list[tuple[str, float]] = []

    async def scenario() -> None:
        async with opened(settings) as mw:
            mw.crawler.signals.connect(lambda unit, delay: freed.append((unit, delay)),
                                       UNIT_FREED, weak=False)
            first = Request(f"https://{HOST}/1")
            assert await mw.process_request(first) is None
            holder = first.meta[META_KEY].get("holder")
            await asyncio.sleep(0.6)  # past the gap, but the first has not left yet
            copy = await mw.process_request(Request(f"https://{HOST}/2"))
            assert isinstance(copy, Request) and copy.meta[WAITS_FOR_KEY] == HOST
            assert holder is not None  # the first one's slot
            gap = 0.5 * 1.03 + 0.02  # GAP_MARGIN, GAP_SLACK: the limiter's 0.535 s
            assert copy.meta[NOT_BEFORE_KEY] <= time.time() + gap + _CLOCK  # it asks again
            mw.left_downloader(first)  # its answer came
            mw.left_downloader(first)  # heard twice (process_response too): ends once
            await _until(lambda: bool(freed), "the host's next turn")
            assert freed == [(HOST, pytest.approx(gap, abs=0.05))]
            assert isinstance(await mw.process_request(Request(f"https://{HOST}/3")), Request)
            await asyncio.sleep(freed[0][1])
            assert await mw.process_request(Request(f"https://{HOST}/3")) is None
            await asyncio.sleep(0.1)
            assert len(freed) == 1

    run(scenario)


def test_middleware_lowers_the_rate_on_429_and_recovers(redis_url: str, crawl_id: str) -> None:
    settings = settings_for(redis_url, crawl_id, SCHEDULER=KAFKA, RATELIMIT_RATE=100,
                            RATELIMIT_BURST=100, RATELIMIT_RECOVER_AFTER=1,
                            RATELIMIT_RECOVER_STEP=0.5)

    async def scenario() -> None:
        async with opened(settings) as mw:
            sent = [Request(f"https://{HOST}/{i}") for i in range(3)]
            for request in sent:
                assert await mw.process_request(request) is None
            for request in sent:  # a volley of 429s: one decrease
                response = Response(request.url, status=429, request=request)
                assert await mw.process_response(request, response) is response
            later = Request(f"https://{HOST}/later")
            await mw.process_request(later)
            assert later.meta[META_KEY]["lowered"] is True
            await mw.process_response(later, Response(later.url, status=200, request=later))
            ok = Request(f"https://{HOST}/ok")
            await mw.process_request(ok)
            assert ok.meta[META_KEY]["lowered"] is False
            stats = mw.stats.get_stats()
            assert stats["ratelimit/slowdowns"] == 3
            assert (stats["ratelimit/rate_decreased"], stats["ratelimit/rate_recovered"]) == (1, 1)

    run(scenario)


def test_a_redis_outage_stalls_requests_without_dropping_them(
    redis_url: str, crawl_id: str, caplog: pytest.LogCaptureFixture
) -> None:
    dead = "redis://127.0.0.1:1/0"

    async def scenario() -> None:
        async with opened(settings_for(redis_url, crawl_id, RATELIMIT_RETRY_BACKOFF=0.05)) as mw:
            working = mw.limiter
            assert isinstance(working, RedisLimiter)
            mw.limiter = RedisLimiter(redis_client(dead, connect_timeout=0.2), crawl_id, mw.cfg)
            stalled = asyncio.ensure_future(mw.process_request(Request(f"https://{HOST}/")))
            await _until(lambda: mw.stats.get_value("ratelimit/redis_errors", 0) >= 2,
                         "two failed Redis calls")
            assert not stalled.done()
            await mw.limiter.close()
            mw.limiter = working  # Redis is back
            assert await asyncio.wait_for(stalled, 5) is None
            # with the Kafka frontier, the request goes back to the buffer instead
            mw.delays = True
            mw.limiter = RedisLimiter(redis_client(dead, connect_timeout=0.2), crawl_id, mw.cfg)
            copy = await mw.process_request(Request(f"https://{HOST}/b"))
            assert isinstance(copy, Request) and copy.dont_filter and NOT_BEFORE_KEY in copy.meta
            await mw.limiter.close()
            mw.limiter = working

    with caplog.at_level(logging.INFO, logger="crawler"):  # redis_retry logs the stall
        run(scenario)
    # the one retry rule's stall lines (crawler.connections.retry): said once, not at every failure
    assert caplog.text.count("Redis rate limit unavailable, retrying") == 2  # two outages
    assert "Redis rate limit reachable again" in caplog.text
    assert "retrying cannot help" not in caplog.text


class _Engine:
    """Records the close the middleware asks for (the Redis and its ACL are real)."""

    def __init__(self) -> None:
        self.reasons: list[str] = []
        self.running = True

    async def close_spider_async(self, *, reason: str) -> None:
        self.reasons.append(reason)


def test_a_refused_rate_limit_script_closes_the_worker_with_one_line(
    redis_url: str, crawl_id: str, caplog: pytest.LogCaptureFixture
) -> None:
    """NOPERM (an ACL without EVALSHA) can never pass: one ERROR line, the worker closes
    with redis_error, and the request goes back to the buffer (its lease kept) instead of
    being retried for ever (the old code logged and retried every failure)."""
    user = f"limited-{crawl_id}"

    async def scenario() -> None:
        admin = redis_client(redis_url)
        await admin.execute_command("ACL", "SETUSER", user, "on", ">pw", "~*", "&*", "+@all",
                                    "-eval", "-evalsha")
        limited = redis_url.replace("redis://", f"redis://{user}:pw@")
        try:
            async with opened(settings_for(redis_url, crawl_id,
                                           RATELIMIT_RETRY_BACKOFF=0.05)) as mw:
                engine = _Engine()
                mw.crawler.engine = engine  # type: ignore[assignment]
                mw.limiter = RedisLimiter(redis_client(limited), crawl_id, mw.cfg)
                for path in ("/a", "/b", "/c"):  # Scrapy's scheduler: it would sleep-retry
                    copy = await asyncio.wait_for(
                        mw.process_request(Request(f"https://{HOST}{path}")), 30)
                    assert isinstance(copy, Request) and NOT_BEFORE_KEY in copy.meta
                await _until(lambda: engine.reasons == ["redis_error"], "the close")
                assert mw.stats.get_value("ratelimit/redis_errors") == 1  # no retry after it
                await mw.limiter.close()
        finally:
            await admin.execute_command("ACL", "DELUSER", user)
            await admin.aclose()

    with caplog.at_level(logging.INFO, logger="crawler"):
        run(scenario)
    errors = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(errors) == 1 and errors[0].levelno == logging.ERROR, caplog.text[-2000:]
    assert "Redis refuses rate limit and retrying cannot help: NoPermissionError" in (
        errors[0].getMessage())


class _Recording(SimpleHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    arrivals: list[float] = []
    robots: list[float] = []  # robots.txt, once per worker: distributed mode obeys it

    def do_GET(self) -> None:
        (self.robots if self.path == "/robots.txt" else self.arrivals).append(time.time())
        super().do_GET()

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.mark.e2e
@pytest.mark.serial  # the shared rate is judged by arrival times
def test_two_workers_share_one_rate_for_a_host(
    stack: Any, crawl_id: str, tmp_path: Path
) -> None:
    """Both workers fetch the one host (partitioned by URL) through the Kafka frontier;
    the origin records when each request arrives."""
    from crawler.localstack import demo_site as site
    from crawler.localstack.demo import running, wait_all, worker_command, worker_logs

    rate, burst, pages = 10, 2, 40
    _Recording.arrivals, _Recording.robots = [], []
    site.generate(tmp_path / "site", pages)
    handler = partial(_Recording, directory=str(tmp_path / "site"))
    server = site.DemoServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    middleware = {"crawler.middlewares.ratelimit.RateLimitMiddleware": 560}
    cmd = worker_command(server.base_url + "/", {
        "CRAWL_IDLE_TIMEOUT": 3, "RATELIMIT_ENABLED": True,
        "RATELIMIT_RATE": rate, "RATELIMIT_BURST": burst,
        "DOWNLOADER_MIDDLEWARES": json.dumps(middleware),
    })
    try:
        with running(2, cmd, {**stack.env(), "CRAWL_ID": crawl_id}, tmp_path) as workers:
            assert wait_all(workers, timeout=180) == [0, 0], worker_logs(workers)[-3000:]
            logs = worker_logs(workers)
    finally:
        server.shutdown()
        server.server_close()
    assert len(_Recording.arrivals) == pages and len(_Recording.robots) <= 2
    arrivals = sorted(_Recording.arrivals + _Recording.robots)  # the wire holds both
    assert not tracebacks_outside_kafka(logs), logs[-3000:]
    assert logs.count("'ratelimit/waits'") == 2  # both waited
    # no request is sent before its slot, so the whole crawl takes at least this long
    assert arrivals[-1] - arrivals[0] >= (len(arrivals) - burst) / rate - 0.05
    # the frontier releases each delayed request when it is due, so the bound holds on the wire
    busiest = most_in_window(arrivals, 1.0)
    assert busiest <= rate + burst, f"{busiest} requests reached the origin in one second"


def most_in_window(times: list[float], width: float) -> int:
    return max(sum(1 for t in times[i:] if t < start + width) for i, start in enumerate(times))
