"""A start request or a re-queued lease that can never travel takes the outbox's path: one
line at the spider, ``frontier/unencodable``, its URL dead-lettered; the crawl goes on (before,
the codec's error escaped ``enqueue_request`` and the heartbeat's lease expiry)."""

from __future__ import annotations

import asyncio
import logging
import threading

import pytest
from conftest import DEAD, REQUESTS, SEEDS, MakeWorker, put, settle
from scrapy import Request

from crawler.ledger import outcomes


def test_a_start_request_that_cannot_travel_is_dead_lettered_not_raised(
        make_worker: MakeWorker, caplog: pytest.LogCaptureFixture) -> None:
    async def scenario() -> None:
        w = make_worker()
        bad = Request("https://a.test/bad", meta={"is_start_request": True,
                                                  "event": threading.Event()})
        good = Request("https://a.test/good", meta={"is_start_request": True})
        with caplog.at_level(logging.ERROR):
            assert w.scheduler.enqueue_request(bad) is False
        assert w.scheduler.enqueue_request(good) is True
        w.producer.acknowledge()
        await settle()
        [line] = [r.getMessage() for r in caplog.records if "a.test/bad" in r.getMessage()]
        assert "meta key 'event' holds a threading.Event" in line
        assert not [r for r in caplog.records if r.exc_info]
        assert w.stats.get_value("frontier/unencodable") == 1
        assert w.stats.get_value("frontier/seeds_published") == 1
        assert len(w.records(SEEDS)) == 1
        assert [b"https://a.test/bad" in v for v in w.records(DEAD)] == [True]

    asyncio.run(scenario())


def test_a_stuck_lease_that_cannot_travel_any_more_is_dead_lettered_and_acknowledged(
        make_worker: MakeWorker, caplog: pytest.LogCaptureFixture) -> None:
    async def scenario() -> None:
        w = make_worker(KAFKA_LEASE_TIMEOUT=1)
        put(w.log, "https://a.test/")
        w.consumer.poll()
        [request] = w.take()
        request.meta["handle"] = threading.Event()  # something gave it a live object
        [lease] = list(w.scheduler.leases.stuck(-1.0))
        lease.started -= 5  # in flight for longer than KAFKA_LEASE_TIMEOUT
        with caplog.at_level(logging.ERROR):
            w.scheduler.lifecycle.local_state()
        assert w.stats.get_value("frontier/lease_expired") == 1
        assert w.stats.get_value("frontier/unencodable") == 1
        assert lease.outcome == outcomes.DEAD
        w.producer.acknowledge()  # the dead letter
        await settle()
        assert w.committed() == 1, "the record is acknowledged once its URL is dead-lettered"
        assert len(w.records(REQUESTS)) == 1  # no copy was produced
        assert len(w.records(DEAD)) == 1
        assert any("meta key 'handle'" in r.getMessage() for r in caplog.records)

    asyncio.run(scenario())


def test_a_stuck_lease_holding_a_browser_page_is_requeued_without_it(
        make_worker: MakeWorker) -> None:
    """The page scrapy-playwright opened for this download stays here (it is closed when the
    request leaves the engine); the copy gets a page of its own on whichever worker."""
    async def scenario() -> None:
        w = make_worker(KAFKA_LEASE_TIMEOUT=1)
        put(w.log, "https://a.test/")
        w.consumer.poll()
        [request] = w.take()
        request.meta.update(playwright=True, playwright_page=threading.Event())
        [lease] = list(w.scheduler.leases.stuck(-1.0))
        lease.started -= 5
        w.scheduler.lifecycle.local_state()
        assert lease.outcome == outcomes.REQUEUED
        assert w.stats.get_value("frontier/unencodable") is None
        w.producer.acknowledge()
        await settle()
        assert w.committed() == 1 and not w.records(DEAD)
        w.consumer.poll()
        [copy] = w.take()
        assert copy.meta["playwright"] is True and "playwright_page" not in copy.meta

    asyncio.run(scenario())
