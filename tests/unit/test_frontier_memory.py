"""Leases and acknowledgements of the scheduler, on the in-memory transport.

The order that keeps the delivery guarantee: a lease is acknowledged only once every
follow-up request begun before it ended was produced (AckBarrier), and a partition is
committed only up to its first unfinished record.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from conftest import DEAD, REQUESTS, SEEDS, MakeWorker, put, settle
from redis.exceptions import NoPermissionError
from scrapy import Request

from crawler.frontier.memory import MemoryBloom
from crawler.frontier.scheduler import LEASE_KEY


def run(scenario: Callable[[], Awaitable[Any]]) -> Any:
    return asyncio.run(scenario())  # type: ignore[arg-type]


def test_a_lease_is_acknowledged_only_after_its_follow_ups_are_produced(
        make_worker: MakeWorker) -> None:
    async def scenario() -> None:
        w = make_worker()
        put(w.log, "https://a.test/")
        assert w.consumer.poll() == 1
        [request] = w.take()
        w.scraped(request)
        assert w.scheduler.enqueue_request(Request("https://a.test/child"))
        await settle()  # checked in the dupefilter: its send is on its way
        assert len(w.producer.queued) == 1
        w.left(request)
        assert w.stats.get_value("frontier/acked") is None
        assert w.committed() == 0, "acknowledged before its follow-up was produced"
        w.producer.acknowledge()
        assert w.stats.get_value("frontier/acked") == 1
        assert w.committed() == 1
        assert len(w.records(REQUESTS)) == 2  # the parent and the child
        await settle()
        bloom = w.scheduler.bloom
        assert isinstance(bloom, MemoryBloom) and len(bloom.seen) == 1  # added once produced

    run(scenario)


def test_a_commit_stops_at_the_first_unfinished_offset(make_worker: MakeWorker) -> None:
    async def scenario() -> None:
        w = make_worker()
        for i in range(3):
            put(w.log, f"https://a.test/{i}")
        w.consumer.poll()
        first, second, third = w.take()
        w.left(third)
        w.left(second)
        assert w.committed() == 0
        w.left(first)
        assert w.committed() == 3
        assert w.stats.get_value("frontier/acked") == 3

    run(scenario)


def test_a_retry_keeps_its_lease_until_the_last_copy_leaves(make_worker: MakeWorker) -> None:
    async def scenario() -> None:
        w = make_worker()
        put(w.log, "https://a.test/")
        w.consumer.poll()
        [request] = w.take()
        retry = request.replace(dont_filter=True)
        assert retry.meta[LEASE_KEY] == request.meta[LEASE_KEY]
        assert w.scheduler.enqueue_request(retry)  # the retry middleware hands it back
        w.left(request)
        assert w.committed() == 0, "the lease ended while its retry was still waiting"
        assert w.take() == [retry]
        w.left(retry)
        assert w.committed() == 1
        assert w.stats.get_value("frontier/continued") == 1
        assert w.records(REQUESTS) == w.records(REQUESTS)[:1]  # nothing produced

    run(scenario)


def test_unacknowledged_work_holds_requests_back_until_acks_bring_it_down(
        make_worker: MakeWorker) -> None:
    async def scenario() -> None:
        w = make_worker(KAFKA_BUFFER_SIZE=2, KAFKA_MAX_UNACKED=5)
        for i in range(5):
            put(w.log, f"https://a.test/{i}")
        assert w.consumer.poll() == 2  # the buffer's room
        a = w.scheduler.next_request()
        assert a is not None
        w.scraped(a)
        for i in range(3):
            w.scheduler.enqueue_request(Request(f"https://a.test/child/{i}"))
        await settle()
        assert w.scheduler.unacked_work() == 5  # two leases and three sends
        assert w.take() == [], "the engine got a request at KAFKA_MAX_UNACKED"
        assert w.consumer.rooms()[0] <= 0 and w.consumer.poll() == 0
        woken = w.engine._slot.nextcall.scheduled
        w.producer.acknowledge()
        w.left(a)
        assert w.engine._slot.nextcall.scheduled == woken + 1  # the engine asks again
        assert len(w.take()) == 1
        assert w.consumer.poll() == 1  # room again: one lease ended
    run(scenario)


def test_a_raced_copy_is_dropped_and_acknowledged(make_worker: MakeWorker) -> None:
    async def scenario() -> None:
        w = make_worker()
        put(w.log, "https://a.test/same")
        put(w.log, "https://a.test/same")
        put(w.log, "https://a.test/same", dont_filter=True)  # a re-queued copy: kept
        w.consumer.poll()
        first, kept = w.take()
        assert w.stats.get_value("frontier/raced_copies_dropped") == 1
        w.left(first)
        w.left(kept)
        assert w.committed() == 3

    run(scenario)


def test_an_undecodable_record_is_dead_lettered_before_it_is_acknowledged(
        make_worker: MakeWorker) -> None:
    async def scenario() -> None:
        w = make_worker()
        w.log.records[(REQUESTS, 0)].append(b"not json")
        w.consumer.poll()
        assert w.take() == []
        assert w.committed() == 0, "acknowledged before the dead letter was produced"
        w.producer.acknowledge()
        assert len(w.records(DEAD)) == 1
        assert w.committed() == 1

    run(scenario)


def test_a_refused_send_goes_to_the_dead_letter_topic(make_worker: MakeWorker) -> None:
    async def scenario() -> None:
        w = make_worker()
        put(w.log, "https://a.test/")
        w.consumer.poll()
        [request] = w.take()
        w.scraped(request)
        w.scheduler.enqueue_request(Request("https://a.test/huge"))
        await settle()
        w.left(request)
        assert w.committed() == 0
        w.producer.reject(ValueError("too large"))  # the broker can never take it
        assert len(w.producer.queued) == 1  # its URL, on its way to the dead-letter topic
        w.producer.acknowledge()
        assert len(w.records(DEAD)) == 1 and w.committed() == 1
        assert w.stats.get_value("frontier/refused") == 1

    run(scenario)


def test_one_seed_of_two_copies_is_taken_and_both_are_acknowledged(
        make_worker: MakeWorker) -> None:
    async def scenario() -> None:
        w = make_worker()
        for _ in range(2):
            w.scheduler.enqueue_request(Request("https://a.test/seed",
                                                meta={"is_start_request": True}))
        assert w.producer.acknowledge() == 2
        assert w.stats.get_value("frontier/seeds_published") == 2
        w.consumer.poll()
        await settle()  # claimed, checked, on its way
        assert w.stats.get_value("frontier/seeds_taken") == 1
        assert w.stats.get_value("frontier/seeds_duplicate") == 1
        w.producer.acknowledge()
        partition = next(p for (t, p), v in w.log.records.items() if t == SEEDS and v)
        assert w.committed(SEEDS, partition) == 2
        assert len(w.records(REQUESTS)) == 1

    run(scenario)


class RefusingBloom(MemoryBloom):
    async def check(self, fingerprints: Any) -> list[bool]:
        raise NoPermissionError("NOPERM this user has no permissions to run 'evalsha'")


def test_a_dupefilter_that_refuses_for_good_closes_the_worker_and_keeps_the_lease(
        make_worker: MakeWorker) -> None:
    async def scenario() -> None:
        w = make_worker(FRONTIER_DEDUP_CLASS=f"{__name__}.RefusingBloom")
        put(w.log, "https://a.test/")
        w.consumer.poll()
        [request] = w.take()
        w.scraped(request)
        w.scheduler.enqueue_request(Request("https://a.test/child"))
        await settle()
        w.left(request)
        await settle()
        assert w.engine.closed == ["redis_error"]
        assert w.committed() == 0 and w.stats.get_value("frontier/acked") is None
        assert w.scheduler.lifecycle.closing
        w.scheduler.lifecycle.close_finished("again")
        await settle()
        assert w.engine.closed == ["redis_error"]  # closed once

    run(scenario)
