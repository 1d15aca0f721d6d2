"""The per-request recrawl interval (meta ``recrawl_after``) on the in-memory transport: due
or not by the time its fingerprint was last queued, recorded only once the broker has it,
whatever RECRAWL_AFTER; a bad value is ignored with a warning; the key survives the codec."""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import pytest
from conftest import REQUESTS, SEEDS, MakeWorker, Worker, put, settle
from scrapy import Request

from crawler.dedup.due import MemoryDue
from crawler.frontier import codec
from crawler.frontier.memory import MemoryBloom

HUB = "https://a.test/"


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def _worker(make_worker: MakeWorker, **settings: Any) -> tuple[Worker, MemoryDue, Clock]:
    w = make_worker(**settings)
    due = w.scheduler.outbox.due
    assert isinstance(due, MemoryDue)
    due.clock = clock = Clock()
    return w, due, clock


async def _yield(w: Worker, url: str, **meta: Any) -> bool:
    """The spider yields *url*; whether the broker got it (acknowledged at once)."""
    before = len(w.records(REQUESTS))
    w.scheduler.enqueue_request(Request(url, meta=meta))
    await settle()
    w.producer.acknowledge()
    await settle()
    return len(w.records(REQUESTS)) > before


def test_a_request_with_the_key_is_queued_again_once_its_interval_is_over(
        make_worker: MakeWorker) -> None:
    async def scenario() -> None:
        w, due, clock = _worker(make_worker)  # RECRAWL_AFTER = 0: the Bloom never forgets
        assert await _yield(w, HUB, recrawl_after=600)
        assert not await _yield(w, HUB, recrawl_after=600)  # queued 0 s ago
        clock.t += 599.9
        assert not await _yield(w, HUB, recrawl_after=600)
        clock.t += 0.2
        assert await _yield(w, HUB, recrawl_after=600)  # 600.1 s after it was queued
        assert not await _yield(w, HUB)  # without the key: the Bloom filter has it
        queued_at = clock.t
        assert await _yield(w, "https://a.test/x")
        clock.t += 10_000
        assert not await _yield(w, "https://a.test/x")  # others are filtered as ever
        assert w.stats.get_value("recrawl/not_due") == 2
        assert w.stats.get_value("bloom/race_duplicates") is None  # a recrawl is no race
        bloom = w.scheduler.bloom
        assert isinstance(bloom, MemoryBloom)
        fp = w.scheduler.crawler.request_fingerprinter.fingerprint(Request(HUB))
        assert fp in bloom.seen and due.queued == {fp: queued_at}  # only the keyed URL

    asyncio.run(scenario())


def test_the_time_is_recorded_only_after_the_broker_acknowledged(
        make_worker: MakeWorker) -> None:
    async def scenario() -> None:
        w, due, _clock = _worker(make_worker)
        w.scheduler.enqueue_request(Request(HUB, meta={"recrawl_after": 60}))
        await settle()
        assert w.producer.pending == 1 and due.queued == {}  # checked, not recorded
        assert not w.scheduler.enqueue_request(Request(HUB, meta={"recrawl_after": 60}))
        w.producer.reject(RuntimeError("too large"))  # never in the log
        await settle()
        assert due.queued == {}
        assert await _yield(w, HUB, recrawl_after=60)  # due again: nothing was lost
        assert len(due.queued) == 1

    asyncio.run(scenario())


@pytest.mark.parametrize("bad", [-5, 0, "soon", "600", True, [60]])
def test_a_bad_value_is_ignored_with_a_warning(make_worker: MakeWorker, bad: Any,
                                               caplog: pytest.LogCaptureFixture) -> None:
    async def scenario() -> None:
        w, due, clock = _worker(make_worker)
        with caplog.at_level(logging.WARNING, logger="crawler.dedup.due"):
            assert await _yield(w, HUB, recrawl_after=bad)
            clock.t += 10_000
            assert not await _yield(w, HUB, recrawl_after=bad)  # as without the key: Bloom
        assert w.stats.get_value("recrawl/bad_meta") == 2
        assert due.queued == {}
        warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
        assert len(warnings) == 2 and not any(r.exc_info for r in warnings)
        assert HUB in warnings[0].getMessage() and "recrawl_after" in warnings[0].getMessage()

    asyncio.run(scenario())


def test_dont_filter_wins_and_the_key_is_not_recorded(make_worker: MakeWorker) -> None:
    async def scenario() -> None:
        w, due, _clock = _worker(make_worker)
        w.scheduler.enqueue_request(Request(HUB, meta={"recrawl_after": 60}, dont_filter=True))
        w.scheduler.enqueue_request(Request(HUB, meta={"recrawl_after": 60}, dont_filter=True))
        await settle()
        assert w.producer.acknowledge() == 2
        await settle()
        assert due.queued == {}

    asyncio.run(scenario())


def test_a_consumed_copy_with_the_key_is_not_dropped_as_a_raced_copy(
        make_worker: MakeWorker) -> None:
    async def scenario() -> None:
        w, _due, _clock = _worker(make_worker)
        put(w.log, HUB, meta={"recrawl_after": 60})
        put(w.log, HUB, meta={"recrawl_after": 60})  # queued again later, same partition
        put(w.log, "https://a.test/p")
        put(w.log, "https://a.test/p")  # a raced copy: dropped as ever
        w.consumer.poll()
        assert [r.url for r in w.take()] == [HUB, HUB, "https://a.test/p"]
        assert w.stats.get_value("frontier/raced_copies_dropped") == 1

    asyncio.run(scenario())


def test_a_seed_with_the_key_is_judged_by_its_interval_not_by_its_claim(
        make_worker: MakeWorker) -> None:
    async def scenario() -> None:
        w, due, clock = _worker(make_worker)
        seed = json.dumps({"url": HUB, "meta": {"recrawl_after": 600}}).encode()
        for _ in range(3):
            w.log.records[(SEEDS, 0)].append(seed)
            w.consumer.poll()
            await settle()
            w.producer.acknowledge()
            await settle()
            clock.t += 300
        assert len(w.records(REQUESTS)) == 2  # at 0 s and at 600 s; not at 300 s
        assert w.stats.get_value("recrawl/not_due") == 1 and len(due.queued) == 1

    asyncio.run(scenario())


def test_the_key_survives_the_codec_as_a_json_number() -> None:
    value = codec.encode_request(Request(HUB, meta={"recrawl_after": 600.5}))
    assert json.loads(value)["meta"]["recrawl_after"] == 600.5
    assert codec.decode_request(value).meta["recrawl_after"] == 600.5
    seed = codec.decode_seed(json.dumps({"url": HUB, "meta": {"recrawl_after": 600}}).encode())
    assert seed.meta["recrawl_after"] == 600
