"""Rebalances on the in-memory transport: partitions revoked, assigned and lost, and epochs.

A record fetched in an epoch that is over belongs to another worker now: its lease is never
acknowledged (the acknowledgement would commit what the new owner has not finished), and
a buffered copy is dropped instead of crawled.
"""

from __future__ import annotations

import asyncio

from conftest import REQUESTS, MakeWorker, put

from crawler.frontier.memory import MemoryLog


def test_a_revoked_lease_is_not_acknowledged_and_its_record_comes_back(
        make_worker: MakeWorker) -> None:
    async def scenario() -> None:
        w = make_worker()
        put(w.log, "https://a.test/")
        w.consumer.poll()
        [request] = w.take()
        w.consumer.lose([(REQUESTS, 0)])  # the session expired
        w.left(request)
        assert w.committed() is None, "a lease of a lost partition was acknowledged"
        w.consumer.assign([(REQUESTS, 0), (REQUESTS, 1)])  # joined again: it comes back
        assert w.consumer.poll() == 1
        [again] = w.take()  # a new epoch's record, not a raced copy
        assert again.url == request.url
        assert w.stats.get_value("frontier/raced_copies_dropped") is None
        w.left(again)
        assert w.committed() == 1

    asyncio.run(scenario())


def test_buffered_records_of_a_partition_given_away_are_dropped(
        make_worker: MakeWorker) -> None:
    async def scenario() -> None:
        w = make_worker()
        put(w.log, "https://a.test/0")
        put(w.log, "https://a.test/1")
        put(w.log, "https://b.test/", partition=1)
        assert w.consumer.poll() == 3
        w.consumer.assign([(REQUESTS, 1)])  # partition 0 moved to another worker
        [kept] = w.take()
        assert kept.url == "https://b.test/"
        assert w.stats.get_value("frontier/stale_dropped") == 2
        assert w.consumer.holding.held == 1  # their room is free again
        w.left(kept)
        assert w.committed(REQUESTS, 1) == 1
        assert w.committed(REQUESTS, 0) == 0  # its records were not finished here

    asyncio.run(scenario())


def test_a_partition_kept_through_a_rebalance_keeps_its_leases(
        make_worker: MakeWorker) -> None:
    async def scenario() -> None:
        w = make_worker()
        put(w.log, "https://a.test/")
        w.consumer.poll()
        [request] = w.take()
        w.consumer.assign([(REQUESTS, 0)])  # partition 1 left, 0 stayed
        w.left(request)
        assert w.committed() == 1

    asyncio.run(scenario())


def test_the_new_owner_fetches_from_what_the_old_one_finished(
        make_worker: MakeWorker) -> None:
    async def scenario() -> None:
        log = MemoryLog(2)
        old = make_worker(log, assign=[(REQUESTS, 0)])
        for i in range(3):
            put(log, f"https://a.test/{i}")
        old.consumer.poll()
        first, second, _third = old.take()
        old.left(first)
        old.left(second)
        old.consumer.assign([])  # revoked: what it finished is committed first
        assert log.committed[(REQUESTS, 0)] == 2
        new = make_worker(log, assign=[(REQUESTS, 0)])
        assert new.consumer.poll() == 1
        assert [r.url for r in new.take()] == ["https://a.test/2"]
        assert old.take() == []  # its copy is stale

    asyncio.run(scenario())
