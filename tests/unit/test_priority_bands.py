"""Cluster-wide priority, pure logic: priorities map to bands and their topics, a worker's
buffer serves the highest band first but gives the lower ones their minimum share, and the
consumer fetches the higher bands while the buffer is full of the lowest (the memory
transport; the real consumer's pausing is in test_frontier_unit.py, the cluster in
tests/e2e/test_priority.py)."""

from __future__ import annotations

import asyncio

import pytest
from conftest import HIGH, REQUESTS, MakeWorker, put
from scrapy import Request
from scrapy.settings import Settings

from crawler.config.readers import SettingError, register_defaults
from crawler.frontier.buffer import RequestBuffer
from crawler.frontier.config import FrontierConfig


def _config(**settings: object) -> FrontierConfig:
    s = Settings({"KAFKA_BOOTSTRAP_SERVERS": "127.0.0.1:1", "REDIS_URL": "redis://127.0.0.1:1",
                  **settings})
    register_defaults(s)
    return FrontierConfig.from_settings(s, "spider")


def test_priorities_map_to_bands_and_their_topics() -> None:
    cfg = _config(KAFKA_PRIORITY_BANDS="10, 1")
    assert cfg.priority_bands == (1, 10)
    assert [cfg.band_of(p) for p in (-5, 0, 1, 9, 10, 99)] == [0, 0, 1, 1, 2, 2]
    assert cfg.band_topics == ("spider.requests", "spider.requests.1", "spider.requests.2")
    assert cfg.topic_for(Request("http://a.test/", priority=12)) == "spider.requests.2"
    assert cfg.urgent_topics == {"spider.requests.1", "spider.requests.2", "spider.seeds"}
    assert set(cfg.band_topics) < set(cfg.topics)
    assert _config(KAFKA_PRIORITY_BANDS=[]).band_topics == ("spider.requests",)


@pytest.mark.parametrize("value", ["high", [1.5], list(range(9))])
def test_bad_bands_are_named(value: object) -> None:
    with pytest.raises(SettingError, match="KAFKA_PRIORITY_BANDS"):
        _config(KAFKA_PRIORITY_BANDS=value)


def test_the_lower_bands_get_their_minimum_share() -> None:
    buffer: RequestBuffer[str] = RequestBuffer(band_of=lambda p: int(p >= 1), min_share=0.1)
    for n in range(30):
        buffer.push(Request(f"http://a.test/low/{n}"), "low")
        buffer.push(Request(f"http://a.test/high/{n}", priority=5), "high")
    order = [buffer.pop()[1] for _ in range(30)]  # type: ignore[index]
    assert order.count("low") == 3 and order[9] == "low"
    strict: RequestBuffer[str] = RequestBuffer(band_of=lambda p: int(p >= 1))
    strict.push(Request("http://a.test/low"), "low")
    strict.push(Request("http://a.test/high", priority=5), "high")
    assert [strict.pop()[1], strict.pop()[1]] == ["high", "low"]  # type: ignore[index]


def test_a_high_priority_child_goes_to_its_band_and_is_fetched_first(
        make_worker: MakeWorker) -> None:
    async def main() -> None:
        worker = make_worker(KAFKA_BUFFER_SIZE=4, KAFKA_MAX_UNACKED=100)
        for n in range(10):
            put(worker.log, f"http://a.test/low/{n}", partition=n % 2)
        worker.consumer.poll()
        [first, *_rest] = worker.take()
        worker.scraped(first)
        worker.scheduler.enqueue_request(Request("http://a.test/urgent", priority=3))
        for _ in range(10):
            await asyncio.sleep(0)
        assert worker.producer.acknowledge() == 1
        high = [v for (t, _p), values in worker.log.records.items() if t == HIGH for v in values]
        assert len(high) == 1 and b"/urgent" in high[0]
        assert worker.consumer.rooms()[0] <= 0  # the buffer is full of the low band...
        assert worker.consumer.poll() == 1  # ...and the high band is fetched all the same
        assert [r.url for r in worker.take()] == ["http://a.test/urgent"]
        low = sum(len(v) for (t, _p), v in worker.log.records.items() if t == REQUESTS)
        assert low == 10

    asyncio.run(main())
