"""Closing a worker's frontier: its background tasks end even mid-call to a Redis that never
answers; the dupefilter's retries (``bloom/retries``) and its stop when Redis refuses for
good; what a closing outbox lets finish."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager

from conftest import SEEDS, MakeWorker, settle
from redis import exceptions as rex
from scrapy import Request

from crawler.connections.clients import redis_client
from crawler.frontier.crawlstate import CrawlState
from crawler.frontier.memory import MemoryBloom


@asynccontextmanager
async def black_hole() -> AsyncIterator[str]:
    """A Redis URL whose server accepts connections and never answers (an outage that
    hangs instead of refusing)."""
    held: list[asyncio.StreamWriter] = []

    async def swallow(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)
        while await reader.read(65536):
            pass

    server = await asyncio.start_server(swallow, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"redis://127.0.0.1:{port}"
    finally:
        for writer in held:
            writer.close()
        server.close()


def test_close_cancels_heartbeats_and_seed_claims_blocked_in_redis(
        make_worker: MakeWorker) -> None:
    async def scenario() -> None:
        async with black_hole() as url:
            client = redis_client(url, {"socket_timeout": 2.0})  # a reply times out in 2 s
            w = make_worker(crawl_state=CrawlState(client, "mem", stale_after=7.0))
            w.log.records[(SEEDS, 0)].append(b"https://a.test/")
            w.consumer.poll()
            await asyncio.sleep(0.2)  # the heartbeat and the claim are waiting for Redis
            tasks = list(w.scheduler._tasks)
            assert sorted(t.get_name() for t in tasks) == ["frontier: heartbeats",
                                                           "frontier: seed claim"]
            assert not any(t.done() for t in tasks)
            closing = asyncio.ensure_future(w.scheduler._close("shutdown"))
            await asyncio.wait(tasks, timeout=1.0)  # well before any reply times out
            assert all(t.cancelled() for t in tasks) and not len(w.scheduler._tasks)
            await asyncio.wait_for(closing, 5.0)  # its heartbeat's removal times out: 2 s
            assert w.committed(SEEDS, 0) in (None, 0), "an unclaimed seed was acknowledged"
            assert w.stats.get_value("frontier/seeds_taken") is None
            await client.aclose()

    asyncio.run(scenario())


class FlakyBloom(MemoryBloom):
    """Raises *errors* one by one, then behaves; counts the calls Redis would have seen."""

    def __init__(self, errors: Sequence[Exception]) -> None:
        super().__init__("{mem}:bloom")
        self.errors = list(errors)
        self.calls = 0

    async def check(self, fingerprints: Sequence[bytes]) -> list[bool]:
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)
        return await super().check(fingerprints)


def test_transient_dupefilter_errors_stall_and_count_then_the_request_goes_out(
        make_worker: MakeWorker) -> None:
    async def scenario() -> None:
        w = make_worker()
        outbox = w.scheduler.outbox
        outbox.retry.base = outbox.retry.cap = 0.01
        bloom = FlakyBloom([rex.ConnectionError("refused"), rex.TimeoutError("slow")])
        outbox.bloom = bloom
        assert w.scheduler.enqueue_request(Request("https://a.test/new"))
        for _ in range(50):
            await asyncio.sleep(0.01)
            if w.producer.pending:
                break
        assert bloom.calls == 3 and w.stats.get_value("bloom/retries") == 2
        assert w.producer.pending == 1 and not outbox.stopped
        assert not w.engine.closed

    asyncio.run(scenario())


def test_a_deterministic_dupefilter_error_stops_the_worker_once_and_nothing_goes_out(
        make_worker: MakeWorker) -> None:
    async def scenario() -> None:
        w = make_worker()
        outbox = w.scheduler.outbox
        bloom = FlakyBloom([rex.NoPermissionError("NOPERM no permissions to run 'evalsha'")])
        outbox.bloom = bloom
        w.scheduler.enqueue_request(Request("https://a.test/one"))
        await settle()
        assert outbox.stopped and "NoPermissionError" in (outbox.fatal or "")
        w.scheduler.enqueue_request(Request("https://a.test/two"))
        await settle()
        assert bloom.calls == 1, "Redis was asked again after it refused for good"
        assert outbox.abandoned == 2 and w.producer.pending == 0
        assert w.stats.get_value("bloom/retries") is None
        assert w.engine.closed == ["redis_error"]  # once, for both batches
        assert not w.scheduler._acks_to_wait_for()  # closing does not wait for them
        await asyncio.wait_for(w.scheduler._close("redis_error"), 5.0)

    asyncio.run(scenario())


class SlowBloom(MemoryBloom):
    def __init__(self, delay: float) -> None:
        super().__init__("{mem}:bloom")
        self.delay = delay

    async def add(self, fingerprints: Sequence[bytes]) -> list[bool]:
        await asyncio.sleep(self.delay)
        return await super().add(fingerprints)


def test_closing_lets_a_running_dupefilter_call_end_within_the_grace_then_cancels(
        make_worker: MakeWorker) -> None:
    async def scenario(delay: float, grace: float) -> tuple[int, bool]:
        w = make_worker()
        outbox = w.scheduler.outbox
        bloom = SlowBloom(delay)
        outbox.bloom = bloom
        w.scheduler.enqueue_request(Request("https://a.test/new"))
        await settle()
        w.producer.acknowledge()  # produced: now it is marked seen, slowly
        await settle()
        assert outbox.busy
        await asyncio.wait_for(outbox.close(grace=grace), 5.0)
        return len(bloom.seen), outbox.busy

    assert asyncio.run(scenario(0.05, 2.0)) == (1, False)  # marked seen before the close
    seen, busy = asyncio.run(scenario(60.0, 0.05))  # not within the grace: cancelled
    assert seen == 0 and busy  # its fingerprint is still in progress: never marked seen
