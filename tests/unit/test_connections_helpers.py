"""The one retry loop, the background-task helper and the shared-client registry (no I/O)."""

from __future__ import annotations

import asyncio
import gc
import logging
import sys
from collections.abc import Awaitable, Callable

import pytest
from scrapy import Spider, signals
from scrapy.utils.test import get_crawler

from crawler.config.readers import SettingError
from crawler.connections import tasks as tasks_module
from crawler.connections.retry import RedisRetry, RetryStopped, backoff, retry
from crawler.connections.shared import mongo_for, redis_for, release_mongo, release_redis, shared
from crawler.connections.tasks import Tasks, every, wait_event

pytestmark = pytest.mark.unit


class Flaky:
    """Fails *failures* times with *error*, then returns "done"."""

    def __init__(self, failures: int, error: Exception | None = None) -> None:
        self.failures, self.calls = failures, 0
        self.error = error or ConnectionError("down")

    async def __call__(self) -> str:
        self.calls += 1
        if self.calls <= self.failures:
            raise self.error
        return "done"


def test_backoff_doubles_from_base_up_to_the_cap() -> None:
    assert [backoff(n, 0.5, 3.0) for n in range(5)] == [0.5, 1.0, 2.0, 3.0, 3.0]
    assert backoff(10_000, 0.5, 30.0) == 30.0


def test_retry_waits_the_backoff_between_attempts_and_reports_each_failure() -> None:
    waits: list[float] = []
    seen: list[tuple[str, int, float]] = []

    async def sleep(delay: float) -> None:
        waits.append(delay)

    call = Flaky(3)
    result = asyncio.run(retry(call, base=0.1, cap=0.3, sleep=sleep,
                               on_retry=lambda e, n, d: seen.append((str(e), n, d)) and None))
    assert (result, call.calls) == ("done", 4)
    assert waits == [0.1, 0.2, 0.3]
    assert seen == [("down", 0, 0.1), ("down", 1, 0.2), ("down", 2, 0.3)]


def test_on_retry_may_choose_the_delay_and_redis_retry_does() -> None:
    waits: list[float] = []

    async def sleep(delay: float) -> None:
        waits.append(delay)

    state = RedisRetry("test", base=1.0, cap=8.0)
    asyncio.run(retry(Flaky(3), on_retry=state.on_retry, base=100.0, cap=100.0, sleep=sleep))
    assert waits == [1.0, 2.0, 4.0]


def test_an_error_retrying_cannot_cure_or_of_another_kind_is_raised_at_once() -> None:
    not_transient = Flaky(5, ValueError("bad"))
    with pytest.raises(ValueError, match="bad"):
        asyncio.run(retry(not_transient, is_transient=lambda e: not isinstance(e, ValueError)))
    assert not_transient.calls == 1
    other = Flaky(5, KeyError("bug"))
    with pytest.raises(KeyError):
        asyncio.run(retry(other, errors=(ConnectionError,)))
    assert other.calls == 1


def test_stop_ends_the_loop_before_a_call_and_after_a_failure() -> None:
    never = Flaky(0)
    with pytest.raises(RetryStopped):
        asyncio.run(retry(never, stop=lambda: True))
    assert never.calls == 0
    failing, stopping = Flaky(5), [False]

    def failed(_exc: Exception, _n: int, _d: float) -> None:
        stopping[0] = True

    with pytest.raises(RetryStopped) as info:
        asyncio.run(retry(failing, on_retry=failed, stop=lambda: stopping[0], base=0.0))
    assert failing.calls == 1 and isinstance(info.value.__cause__, ConnectionError)


def test_a_failed_task_is_logged_once_with_its_name_and_never_as_not_retrieved(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def boom() -> None:
        raise RuntimeError("kaput")

    async def main() -> None:
        tasks = Tasks("owner")
        tasks.spawn(boom(), "exploding")
        await asyncio.sleep(0.01)
        assert len(tasks) == 0
        gc.collect()

    loop_errors: list[dict[str, object]] = []

    async def run() -> None:
        asyncio.get_running_loop().set_exception_handler(lambda _l, c: loop_errors.append(c))
        await main()

    with caplog.at_level(logging.ERROR, logger="crawler.connections.tasks"):
        asyncio.run(run())
    lines = [r.getMessage() for r in caplog.records]
    assert lines == ["Background task owner: exploding failed: kaput"]
    assert loop_errors == []


def test_close_cancels_every_running_task_and_every_stops_on_false() -> None:
    async def main() -> None:
        tasks, ticks = Tasks("owner"), []

        async def tick() -> bool:
            ticks.append(1)
            return len(ticks) < 3

        ended = tasks.spawn(every(0.001, tick, wait_first=False), "ticks")
        forever = tasks.spawn(asyncio.sleep(3600), "sleeper")
        await asyncio.wait_for(ended, 1)
        assert len(ticks) == 3 and not forever.done()
        await tasks.close()
        assert forever.cancelled() and len(tasks) == 0

    asyncio.run(main())


SETTINGS = {"REDIS_URL": "redis://127.0.0.1:1/0", "MONGO_URI": "mongodb://127.0.0.1:1/"}


def test_close_cancels_again_a_task_that_swallowed_its_cancellation(monkeypatch) -> None:
    monkeypatch.setattr(tasks_module, "RECANCEL", 0.05)

    async def swallows_once() -> None:
        swallowed = False
        while True:
            try:
                await asyncio.sleep(10)
            except asyncio.CancelledError:
                if swallowed:
                    raise
                swallowed = True  # as a loop around Python 3.11's wait_for may

    async def scenario() -> bool:
        tasks = Tasks("test")
        task = tasks.spawn(swallows_once(), "stubborn")
        await asyncio.sleep(0)
        await asyncio.wait_for(tasks.close(), 5)  # was: for ever
        return task.cancelled()

    assert asyncio.run(scenario())


def test_wait_event_never_swallows_a_cancellation_that_comes_as_the_event_is_set() -> None:
    """The race that hung a worker's close: the per-host limits' loop, woken by a rebalance
    as the scheduler cancelled it."""
    async def loop(wait: Callable[[asyncio.Event], Awaitable[object]],
                   event: asyncio.Event) -> None:
        while True:
            await wait(event)
            event.clear()

    async def wait_for(event: asyncio.Event) -> None:
        try:
            await asyncio.wait_for(event.wait(), 10)
        except TimeoutError:
            pass

    async def cancelled_as_set(wait: Callable[[asyncio.Event], Awaitable[object]]) -> bool:
        event = asyncio.Event()
        task = asyncio.ensure_future(loop(wait, event))
        await asyncio.sleep(0.01)
        event.set()
        task.cancel()
        await asyncio.sleep(0.05)
        ended = task.done()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        return ended

    assert asyncio.run(cancelled_as_set(lambda event: wait_event(event, 10)))
    if sys.version_info < (3, 12):  # the bug itself, on the Python CI runs
        assert not asyncio.run(cancelled_as_set(wait_for))


def test_one_client_per_crawler_closed_by_its_last_user() -> None:
    crawler, other = get_crawler(Spider, SETTINGS), get_crawler(Spider, SETTINGS)

    async def main() -> None:
        first, second = redis_for(crawler), redis_for(crawler)
        assert first is second and redis_for(other) is not first
        mongo = mongo_for(crawler)
        assert mongo_for(crawler) is mongo
        registry = shared(crawler)
        assert (registry.redis_built, registry.mongo_built) == (1, 1)
        await release_redis(crawler, first)
        await release_mongo(crawler, mongo)
        assert registry.open  # one user of each left
        await release_redis(crawler, second)
        await release_mongo(crawler, mongo)
        assert not registry.open
        await release_redis(crawler, second)  # once too often: nothing happens
        assert redis_for(crawler) is not first  # a new user after the last: a new client
        await shared(other).close()
        await shared(crawler).close()

    asyncio.run(main())


def test_the_engine_stopping_closes_what_users_still_hold() -> None:
    crawler = get_crawler(Spider, SETTINGS)

    async def main() -> None:
        redis_for(crawler)
        mongo_for(crawler)
        assert shared(crawler).open
        await crawler.signals.send_catch_log_async(signal=signals.engine_stopped)
        assert not shared(crawler).open

    asyncio.run(main())


def test_settings_are_checked_when_a_client_is_first_needed() -> None:
    with pytest.raises(SettingError, match="REDIS_URL"):
        redis_for(get_crawler(Spider, {}))
    with pytest.raises(SettingError, match="REDIS_MAX_CONNECTIONS"):
        redis_for(get_crawler(Spider, {**SETTINGS, "REDIS_MAX_CONNECTIONS": 1}))
    with pytest.raises(SettingError, match="MONGO_URI"):
        mongo_for(get_crawler(Spider, {}))
