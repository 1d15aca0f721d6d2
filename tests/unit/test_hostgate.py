"""Cluster-wide per-host limits, pure logic: the fair shares, the in-memory store (the Lua
script's rule: tests/integration/test_host_slots.py runs the same cases on Redis), the gate's
holds and renewals, the buffer's blocked requests, and the scheduler with the gate on."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from conftest import MakeWorker, put
from scrapy import Request
from scrapy.settings import Settings

from crawler.config.readers import SettingError, register_defaults
from crawler.frontier.buffer import RequestBuffer
from crawler.politeness.hostgate import BLOCKED, RETRY, HostGate, host_key
from crawler.politeness.hostlimit import Demand, HostLimitConfig, MemorySlotStore, fair_share

CFG = HostLimitConfig(enabled=True, concurrency=8, delay=0.0, ttl=5.0, interval=0.5)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_fair_shares_fill_the_small_wants_first_and_split_the_rest() -> None:
    wants = [(8, "a", 0.0), (8, "b", 0.0), (1, "c", 0.0)]
    shares = {w: fair_share(list(wants), 8, w) for w in "abc"}
    assert shares["c"] == 1 and shares["a"] + shares["b"] == 7
    assert sorted((shares["a"], shares["b"])) == [3, 4]


def test_fewer_slots_than_workers_go_to_the_least_recently_served() -> None:
    wants = [(5, "a", 10.0), (5, "b", 20.0), (5, "c", 0.0)]
    shares = {w: fair_share(list(wants), 2, w) for w in "abc"}
    assert shares == {"a": 1, "b": 0, "c": 1}


def _demand(want: int, in_flight: int = 0, limit: int = 8) -> Demand:
    return Demand("h", limit, want, in_flight)


def test_a_second_worker_gets_its_share_only_once_the_first_one_holds_less() -> None:
    clock = Clock()
    store = MemorySlotStore(clock)
    assert store.renew_one("a", _demand(8), 5) == 8
    assert store.renew_one("b", _demand(8), 5) == 0  # a holds all 8
    assert store.renew_one("a", _demand(8, in_flight=8), 5) == 4  # its fair share now...
    assert store.renew_one("b", _demand(8), 5) == 0  # ...but its 8 in flight still count
    assert store.renew_one("a", _demand(8, in_flight=4), 5) == 4
    assert store.renew_one("b", _demand(8), 5) == 4
    held = sum(e.held for e in store.hosts["h"].values())
    assert held == 8


def test_the_shares_of_a_silent_worker_expire() -> None:
    clock = Clock()
    store = MemorySlotStore(clock)
    store.renew_one("a", _demand(8), 5)
    clock.now += 4.9
    assert store.renew_one("b", _demand(8), 5) == 0
    clock.now += 0.2
    assert store.renew_one("b", _demand(8), 5) == 8


def test_a_worker_without_work_for_the_host_leaves_it() -> None:
    store = MemorySlotStore(Clock())
    store.renew_one("a", _demand(3), 5)
    assert store.renew_one("a", _demand(0), 5) == 0
    assert "a" not in store.hosts["h"]


def test_settings_default_to_what_one_scrapy_process_would_do() -> None:
    settings = Settings({"CONCURRENT_REQUESTS_PER_DOMAIN": 5, "DOWNLOAD_DELAY": 0.25})
    register_defaults(settings)
    cfg = HostLimitConfig.from_settings(settings)
    assert (cfg.concurrency, cfg.delay, cfg.enabled) == (5, 0.25, True)
    settings.set("HOSTLIMIT_INTERVAL", 3)
    with pytest.raises(SettingError, match="HOSTLIMIT_INTERVAL"):
        HostLimitConfig.from_settings(settings)


def _gate(store: Any, clock: Clock, freed: list[tuple[str, int]],
          waiting: dict[str, int] | None = None, cfg: HostLimitConfig = CFG) -> HostGate:
    return HostGate(cfg, store, "w1", on_free=lambda h, n: freed.append((h, n)),
                    demand=lambda: waiting or {}, clock=clock)


def test_the_gate_admits_up_to_its_share_and_frees_on_release() -> None:
    clock, freed = Clock(), []
    store = MemorySlotStore(clock)
    gate = _gate(store, clock, freed, {"a.test": 3})
    first = Request("http://a.test/1")
    assert gate.admit(first) == BLOCKED  # no share yet
    asyncio.run(gate.renew())
    assert gate.grants == {"a.test": 3} and freed == [("a.test", 3)]
    requests = [Request(f"http://a.test/{n}") for n in range(4)]
    assert [gate.admit(r) for r in requests] == [None, None, None, BLOCKED]
    gate.release(requests[0])
    gate.release(requests[0])  # twice (downloader, then engine): once
    assert freed[-1] == ("a.test", 1) and gate.in_flight["a.test"] == 2


def test_a_share_is_not_used_past_its_time_without_a_renewal() -> None:
    clock, freed = Clock(), []
    gate = _gate(MemorySlotStore(clock), clock, freed, {"a.test": 1})
    asyncio.run(gate.renew())
    clock.now += CFG.ttl - CFG.interval
    assert gate.admit(Request("http://a.test/")) == BLOCKED


def test_a_failed_renewal_keeps_the_shares_until_they_expire(caplog) -> None:
    clock, freed = Clock(), []

    class Down:
        async def renew(self, *args: Any) -> list[int]:
            raise ConnectionError("refused")

    gate = _gate(MemorySlotStore(clock), clock, freed, {"a.test": 2})
    asyncio.run(gate.renew())
    gate.store = Down()
    asyncio.run(gate.renew())
    asyncio.run(gate.renew())
    assert gate.admit(Request("http://a.test/")) is None
    assert caplog.text.count("Cannot renew the per-host limits") == 1


def test_a_delay_spreads_the_hosts_requests_over_the_cluster() -> None:
    clock, freed = Clock(), []
    cfg = HostLimitConfig(enabled=True, concurrency=4, delay=1.0, ttl=5.0, interval=0.5)
    store = MemorySlotStore(clock)
    store.renew_one("other", Demand("a.test", 4, 2, 0), 5)  # another worker holds 2 of 4
    gate = _gate(store, clock, freed, {"a.test": 4}, cfg)
    asyncio.run(gate.renew())
    assert gate.grants == {"a.test": 2}
    assert gate.admit(Request("http://a.test/1")) is None
    wait = gate.admit(Request("http://a.test/2"))
    assert wait == pytest.approx(2.0)  # half the slots: every other second
    clock.now += 2.0
    assert gate.admit(Request("http://a.test/2")) is None


def test_the_host_is_scrapys_download_slot() -> None:
    assert host_key(Request("http://A.test:8080/x")) == "a.test"
    assert host_key(Request("http://a.test/", meta={"download_slot": "pool"})) == "pool"


def test_blocked_requests_come_back_best_first_as_slots_free() -> None:
    buffer: RequestBuffer[int] = RequestBuffer()
    for n, priority in enumerate([0, 5, 1]):
        buffer.block("a.test", Request(f"http://a.test/{n}", priority=priority), n)
    assert len(buffer) == 3 and buffer.blocked_hosts() == {"a.test": 3}
    assert buffer.pop() is None
    assert buffer.unblock("a.test", 2) == 2
    assert [buffer.pop()[1], buffer.pop()[1]] == [1, 2]  # type: ignore[index]
    assert buffer.unblock("a.test", 5) == 1 and buffer.blocked == 0


def test_the_scheduler_holds_a_hosts_requests_to_its_share(make_worker: MakeWorker) -> None:
    async def main() -> None:
        worker = make_worker(HOSTLIMIT_ENABLED=True, HOSTLIMIT_CONCURRENCY=2)
        for n in range(5):
            put(worker.log, f"http://a.test/{n}")
        worker.consumer.poll()
        assert worker.take() == []  # every request waits for the first renewal
        assert worker.scheduler.buffer.blocked == 5
        await asyncio.sleep(0.1)  # the gate asked for a share as soon as one was missing
        first = worker.take()
        assert len(first) == 2 and worker.stats.get_value("hostlimit/blocked") >= 5
        worker.left(first[0])  # the engine lets go of it: one share free
        assert len(worker.take()) == 1 and worker.take() == []
        assert worker.scheduler.has_pending_requests()

    asyncio.run(main())


def test_the_downloader_signal_releases_the_share(make_worker: MakeWorker) -> None:
    from scrapy import signals

    async def main() -> None:
        worker = make_worker(HOSTLIMIT_ENABLED=True, HOSTLIMIT_CONCURRENCY=1)
        put(worker.log, "http://a.test/1")
        put(worker.log, "http://a.test/2")
        worker.consumer.poll()
        worker.take()
        await asyncio.sleep(0.1)
        [request] = worker.take()
        worker.scheduler.crawler.signals.send_catch_log(
            signals.request_left_downloader, request=request, spider=worker.spider)
        assert [r.url for r in worker.take()] == ["http://a.test/2"]

    asyncio.run(main())


def test_the_switch_leaves_the_gate_out(make_worker: MakeWorker) -> None:
    async def main() -> None:
        worker = make_worker(HOSTLIMIT_ENABLED=False)
        put(worker.log, "http://a.test/1")
        worker.consumer.poll()
        assert len(worker.take()) == 1 and worker.scheduler.hosts is None

    asyncio.run(main())


def test_a_request_blocked_while_a_renewal_was_in_flight_is_freed_by_it() -> None:
    """The shares expire while a renewal sent before their end is on its way; a request
    blocked meanwhile has nothing in flight to wait for, so the renewal must free it (it
    compared the new grant with the old one and freed nothing: the worker held its
    buffered requests for ever)."""
    clock, freed = Clock(), []
    store = MemorySlotStore(clock)
    gate = _gate(store, clock, freed, {"a.test": 1})
    asyncio.run(gate.renew())
    freed.clear()
    blocked: list[float | None] = []

    class Slow:
        async def renew(self, *args: Any) -> list[int]:
            clock.now += 0.2  # the answer comes after the shares' end
            blocked.append(gate.admit(Request("http://a.test/late")))
            return await store.renew(*args)

    clock.now += CFG.ttl - CFG.interval - 0.1  # sent just before the shares' end
    gate.store = Slow()
    asyncio.run(gate.renew())
    assert blocked == [BLOCKED] and gate.in_flight["a.test"] == 0
    assert freed == [("a.test", 1)]


def test_requests_started_while_a_renewal_is_on_its_way_count_against_the_limit() -> None:
    """The old share is used until the renewal's answer comes: the worker tells the store it
    may hold all of it, not only what it had in flight when it sent the renewal. (It told
    its in-flight count: the store shrank its hold to 4 while it started 4 more under its
    old share of 8, another worker was granted the 4 others, and the host got 12 requests at
    once with a limit of 8; tests/e2e/test_spread.py saw 17 with a limit of 16.)"""
    clock = Clock()
    store = MemorySlotStore(clock)
    gate = _gate(store, clock, [], {"a.test": 8})
    asyncio.run(gate.renew())
    requests = [Request(f"http://a.test/{n}") for n in range(8)]
    assert [gate.admit(r) for r in requests[:4]] == [None] * 4
    assert store.renew_one("w2", Demand("a.test", 8, 8, 0), 5) == 0  # w1 holds all 8

    class OnItsWay:
        async def renew(self, *args: Any) -> list[int]:
            started = [gate.admit(r) for r in requests[4:]]  # under the share of 8
            assert started == [None] * 4
            return await store.renew(*args)

    gate.store = OnItsWay()
    asyncio.run(gate.renew())
    assert gate.in_flight["a.test"] == 8
    other = store.renew_one("w2", Demand("a.test", 8, 8, 0), 5)
    assert gate.in_flight["a.test"] + other <= 8, f"w2 granted {other} beside 8 in flight"


def test_a_share_shrunk_below_what_the_store_counts_is_told_at_once() -> None:
    """The store counted the old share (8) until the answer came; with fewer in flight than
    the new share (4) the worker renews again at once, not an interval later."""
    clock = Clock()
    store = MemorySlotStore(clock)
    gate = _gate(store, clock, [], {"a.test": 8})
    asyncio.run(gate.renew())
    assert [gate.admit(Request(f"http://a.test/{n}")) for n in range(2)] == [None, None]
    assert store.renew_one("w2", Demand("a.test", 8, 8, 0), 5) == 0
    asyncio.run(gate.renew())
    assert gate.grants == {"a.test": 4} and gate._wanted.is_set()
    assert store.renew_one("w2", Demand("a.test", 8, 8, 0), 5) == 0  # the old 8 still count
    gate._wanted.clear()
    asyncio.run(gate.renew())
    assert not gate._wanted.is_set()
    assert store.renew_one("w2", Demand("a.test", 8, 8, 0), 5) == 4


def test_a_holder_tells_the_store_once_its_holds_are_down_to_a_shrunk_share() -> None:
    """A second worker's share is free only once the first one's holds are down to its new
    share and the store knows it: the first renews then, not an interval later."""
    clock = Clock()
    store = MemorySlotStore(clock)
    gate = _gate(store, clock, [], {"a.test": 8})
    asyncio.run(gate.renew())
    requests = [Request(f"http://a.test/{n}") for n in range(8)]
    assert [gate.admit(r) for r in requests] == [None] * 8
    assert store.renew_one("w2", Demand("a.test", 8, 8, 0), 5) == 0  # w1 holds all 8
    asyncio.run(gate.renew())
    assert gate.grants == {"a.test": 4} and not gate._wanted.is_set()
    for request in requests[:3]:
        gate.release(request)
    assert not gate._wanted.is_set()  # 5 in flight: still more than its share
    gate.release(requests[3])
    assert gate._wanted.is_set()
    gate._wanted.clear()
    asyncio.run(gate.renew())
    assert store.renew_one("w2", Demand("a.test", 8, 8, 0), 5) == 4


def test_a_worker_whose_host_is_all_held_retries_soon_for_an_interval() -> None:
    """The holders renew within an interval and give up what they hold above their shares:
    the worker left out asks every RETRY s meanwhile, then at its usual pace."""
    clock = Clock()
    store = MemorySlotStore(clock)
    store.renew_one("w0", Demand("a.test", 8, 8, 8), 5)
    gate = _gate(store, clock, [], {"a.test": 2})
    assert gate.wait() == CFG.interval
    waits = []
    for _ in range(4):
        asyncio.run(gate.renew())
        waits.append(gate.wait())
        clock.now += 0.2
    assert waits == [RETRY, RETRY, RETRY, CFG.interval]
    store.renew_one("w0", Demand("a.test", 8, 6, 6), 5)
    asyncio.run(gate.renew())
    assert gate.grants == {"a.test": 2} and gate.wait() == CFG.interval
    store.renew_one("w0", Demand("a.test", 8, 8, 8), 5)
    gate.grants.clear()
    gate.in_flight.clear()
    clock.now += 10  # w1's entry expired; w0 holds all again: a new wait, fast again
    store.renew_one("w0", Demand("a.test", 8, 8, 8), 5)
    asyncio.run(gate.renew())
    assert gate.wait() == RETRY


def test_a_rebalance_makes_the_gate_renew_often_for_two_intervals(
        make_worker: MakeWorker) -> None:
    """A worker joining the crawl asks for its shares right after the rebalance; the others
    renew every RETRY s for a while, so that they give up what it is owed without waiting
    for their next renewal."""
    async def main() -> None:
        worker = make_worker(HOSTLIMIT_ENABLED=True)
        gate = worker.scheduler.hosts.gate
        assert gate.wait() == RETRY  # the first assignment was a rebalance too
        gate._hurry_until = 0.0
        assert gate.wait() == gate.cfg.interval
        gate._wanted.clear()
        worker.consumer.assign([])
        assert gate.wait() == RETRY and gate._wanted.is_set()
        gate._hurry_until = time.monotonic() - 0.001
        assert gate.wait() == gate.cfg.interval

    asyncio.run(main())
