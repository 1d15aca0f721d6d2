"""The worker lifecycle on the in-memory transport: what a heartbeat reports, operator
control, lease expiry, per-partition lag and the crawl's completion."""

from __future__ import annotations

import asyncio

from conftest import HIGH, REQUESTS, SEEDS, MakeWorker, put, settle
from scrapy import Request

from crawler.frontier.crawllife import Finished


def test_a_worker_is_idle_only_once_everything_it_holds_is_acknowledged(
        make_worker: MakeWorker) -> None:
    async def scenario() -> None:
        w = make_worker()
        life = w.scheduler.lifecycle
        assert life.local_idle()
        put(w.log, "https://a.test/")
        w.consumer.poll()
        assert not life.local_idle()  # buffered
        [request] = w.take()
        w.scraped(request)
        w.scheduler.enqueue_request(Request("https://a.test/child"))
        await settle()
        w.left(request)
        assert not life.local_idle()  # its follow-up is still being sent
        w.producer.acknowledge()
        await settle()
        w.consumer.tick()
        assert life.local_idle()
        state = life.local_state()
        assert state.idle and state.info["acked"] == 1 and state.info["unacked"] == 0
        assert state.assigned == sorted(f"{t}:{p}" for t in (REQUESTS, HIGH, SEEDS)
                                        for p in (0, 1))

    asyncio.run(scenario())


def test_pause_resume_and_stop_from_the_operator(make_worker: MakeWorker) -> None:
    async def scenario() -> None:
        w = make_worker()
        completion = w.scheduler.lifecycle.completion
        assert completion is not None
        w.state.command = "pause"
        await completion.beat()
        assert w.engine.paused
        w.state.command = None  # scrapy cluster resume
        await completion.beat()
        assert not w.engine.paused
        w.engine.paused = True  # paused by something else: resume does not touch it
        await completion.beat()
        assert w.engine.paused
        w.state.command = "stop"
        await completion.beat()
        await completion.beat()
        await settle()
        assert w.engine.closed == ["stopped"] and not w.engine.paused

    asyncio.run(scenario())


def test_a_stuck_lease_is_produced_again_and_its_record_acknowledged(
        make_worker: MakeWorker) -> None:
    async def scenario() -> None:
        w = make_worker(KAFKA_LEASE_TIMEOUT=1)
        put(w.log, "https://a.test/")
        w.consumer.poll()
        [request] = w.take()
        [lease] = [x for x in w.scheduler.leases.stuck(-1.0)]
        lease.started -= 5  # in flight for longer than KAFKA_LEASE_TIMEOUT
        w.scheduler.lifecycle.local_state()
        assert w.stats.get_value("frontier/lease_expired") == 1
        assert w.committed() == 0, "acknowledged before its new copy was produced"
        w.producer.acknowledge()
        assert w.committed() == 1
        assert len(w.records(REQUESTS)) == 2
        w.consumer.poll()
        [copy] = w.take()  # dont_filter: not mistaken for a raced copy
        assert copy.url == request.url and copy.dont_filter

    asyncio.run(scenario())


def test_lag_stats_follow_the_partitions_this_worker_owns(make_worker: MakeWorker) -> None:
    async def scenario() -> None:
        w = make_worker()
        put(w.log, "https://a.test/")
        w.consumer.tick()
        w.scheduler.lifecycle.local_state()
        assert w.stats.get_value(f"frontier/lag/{REQUESTS}:0") == 1
        w.consumer.assign([(REQUESTS, 1)])
        w.scheduler.lifecycle.local_state()
        assert w.stats.get_value(f"frontier/lag/{REQUESTS}:0") is None
        assert w.stats.get_value(f"frontier/lag/{REQUESTS}:1") == 0

    asyncio.run(scenario())


def test_a_drained_crawl_finishes_after_the_idle_timeout(make_worker: MakeWorker) -> None:
    async def scenario() -> None:
        w = make_worker(CRAWL_IDLE_TIMEOUT=0.2, CRAWL_HEARTBEAT_INTERVAL=0.1)
        put(w.log, "https://a.test/")
        w.consumer.poll()
        [request] = w.take()
        completion = w.scheduler.lifecycle.completion
        assert completion is not None
        await completion.beat()
        assert completion.status.startswith("busy")
        w.left(request)
        w.consumer.tick()
        await completion.beat()
        assert completion.status == "drained" and not w.engine.closed
        await asyncio.sleep(0.25)
        await completion.beat()
        await settle()
        assert w.engine.closed == ["finished"]
        assert w.state.finished is not None and w.state.expires_in == 60.0

    asyncio.run(scenario())


def test_a_worker_missing_a_partition_keeps_the_crawl_open(make_worker: MakeWorker) -> None:
    async def scenario() -> None:
        w = make_worker(assign=[(REQUESTS, 0), (HIGH, 0), (HIGH, 1), (SEEDS, 0), (SEEDS, 1)],
                        CRAWL_IDLE_TIMEOUT=0.2, CRAWL_HEARTBEAT_INTERVAL=0.1)
        completion = w.scheduler.lifecycle.completion
        assert completion is not None
        for _ in range(3):
            await completion.beat()
            await asyncio.sleep(0.1)
        assert completion.status == "1 partitions unassigned" and not w.engine.closed

    asyncio.run(scenario())


def test_a_worker_without_partitions_follows_a_crawl_another_worker_closed(
        make_worker: MakeWorker) -> None:
    """CI: a worker whose consumer never finished joining the group (no partitions) ran on for
    300 s after the other two had finished the crawl and exited."""
    async def scenario() -> None:
        w = make_worker(assign=[], CRAWL_IDLE_TIMEOUT=0.2, CRAWL_HEARTBEAT_INTERVAL=0.1)
        completion = w.scheduler.lifecycle.completion
        assert completion is not None
        await completion.beat()
        assert not w.engine.closed and completion.started is not None
        w.state.finished = Finished(completion.started + 1, completion.started + 1)
        await completion.beat()
        await settle()
        assert w.engine.closed == ["finished"]

    asyncio.run(scenario())
