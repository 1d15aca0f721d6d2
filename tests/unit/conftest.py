"""Unit tests use no service: the connection settings of the environment are cleared for
each of them. And a worker's frontier on the in-memory transport
(``crawler.frontier.memory``): no broker, no Redis; the test plays the broker, the group
coordinator and Scrapy's engine."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from scrapy import Request, Spider, signals
from scrapy.http import Response
from scrapy.utils.test import get_crawler
from twisted.python.failure import Failure

from crawler.config.readers import KAFKA_SECURITY_SETTINGS
from crawler.dedup.backend import DedupFactory
from crawler.frontier import codec
from crawler.frontier.config import FrontierConfig
from crawler.frontier.memory import (
    MemoryBloom,
    MemoryConsumer,
    MemoryCrawlState,
    MemoryLog,
    MemoryProducer,
    MemoryTransport,
)
from crawler.frontier.scheduler import KafkaScheduler
from crawler.politeness.hostlimit import HostLimitConfig

SERVICE_ENVIRONMENT = ("KAFKA_BOOTSTRAP_SERVERS", "REDIS_URL", "MONGO_URI", "MONGO_DATABASE",
                       "CRAWL_ID", *KAFKA_SECURITY_SETTINGS)


@pytest.fixture(autouse=True)
def _no_services_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """A ``REDIS_URL`` exported in the shell must not turn a unit test into a Redis test."""
    for name in SERVICE_ENVIRONMENT:
        monkeypatch.delenv(name, raising=False)


CRAWL = "mem"
REQUESTS, SEEDS, DEAD = f"{CRAWL}.requests", f"{CRAWL}.seeds", f"{CRAWL}.dead"
SEED_KEY = b"the seed key of the in-memory crawl"  # shared by every worker of a test
HIGH = f"{CRAWL}.requests.1"  # the band of priorities from 1 up (KAFKA_PRIORITY_BANDS)
SETTINGS = {
    "CRAWL_ID": CRAWL, "KAFKA_BOOTSTRAP_SERVERS": "127.0.0.1:1",
    "REDIS_URL": "redis://127.0.0.1:1", "KAFKA_PARTITIONS": 2, "KAFKA_PARTITION_BY": "url",
    "CRAWL_HEARTBEAT_INTERVAL": 60, "CRAWL_IDLE_TIMEOUT": 0,
    "FRONTIER_DEDUP_CLASS": "crawler.frontier.memory.MemoryBloom",
    # The per-host limits make next_request wait for a share from an asynchronous renewal;
    # these tests drive the scheduler synchronously. tests/unit/test_hostgate.py drives the
    # scheduler with the limits on (the default), and the e2e tests run them for real.
    "HOSTLIMIT_ENABLED": False,
}


class MemSpider(Spider):
    name = "mem"

    def parse(self, response: Response) -> Any:
        return None


class NextCall:
    def __init__(self) -> None:
        self.scheduled = 0

    def schedule(self) -> None:
        self.scheduled += 1


class Slot:
    """The two members of Scrapy's engine slot the frontier uses (see crawler/_scrapy.py;
    tests/unit/test_scrapy_contract.py checks the real one has them)."""

    def __init__(self) -> None:
        self.nextcall = NextCall()
        self.removed: list[Request] = []

    def remove_request(self, request: Request) -> None:
        self.removed.append(request)


class Scraper:
    """The member of Scrapy's scraper the frontier hooks: what reached it, in order."""

    def __init__(self) -> None:
        self.scraped: list[tuple[Any, Request]] = []

    def enqueue_scrape(self, result: Any, request: Request) -> None:
        self.scraped.append((result, request))


class Engine:
    def __init__(self) -> None:
        self._slot = Slot()
        self.scraper = Scraper()
        self.paused = False
        self.running = True
        self.closed: list[str] = []

    def pause(self) -> None:
        self.paused = True

    def unpause(self) -> None:
        self.paused = False

    async def close_spider_async(self, *, reason: str = "cancelled") -> None:
        self.closed.append(reason)


@dataclass
class Worker:
    scheduler: KafkaScheduler
    transport: MemoryTransport
    state: MemoryCrawlState
    engine: Engine
    spider: Spider
    taken: list[Request] = field(default_factory=list)

    @property
    def consumer(self) -> MemoryConsumer:
        consumer = self.scheduler.consumer
        assert isinstance(consumer, MemoryConsumer)
        return consumer

    @property
    def producer(self) -> MemoryProducer:
        producer = self.scheduler.sender
        assert isinstance(producer, MemoryProducer)
        return producer

    @property
    def log(self) -> MemoryLog:
        return self.transport.log

    @property
    def stats(self) -> Any:
        return self.scheduler.stats

    def take(self) -> list[Request]:
        """What the engine gets from the scheduler now."""
        requests = []
        while (request := self.scheduler.next_request()) is not None:
            requests.append(request)
        self.taken += requests
        return requests

    def scraped(self, request: Request) -> None:
        """*request*'s response reached the spider (its new requests are children)."""
        response = Response(request.url, request=request)
        self.scheduler.crawler.signals.send_catch_log(
            signals.response_received, response=response, request=request, spider=self.spider)

    def failed(self, request: Request, exception: BaseException) -> None:
        """*request*'s download ended with *exception* (it reaches the scraper)."""
        self.engine.scraper.enqueue_scrape(Failure(exception), request)

    def left(self, request: Request) -> None:
        """The engine lets go of *request* (through the slot the frontier hooked)."""
        self.engine._slot.remove_request(request)

    def committed(self, topic: str = REQUESTS, partition: int = 0) -> int | None:
        self.consumer.commit()
        return self.log.committed.get((topic, partition))

    def records(self, topic: str) -> list[bytes]:
        return [v for (t, _p), values in sorted(self.log.records.items()) if t == topic
                for v in values]


def put(log: MemoryLog, url: str, *, partition: int = 0, spider: Spider | None = None,
        **kwargs: Any) -> None:
    """A request record in partition *partition* of the requests topic (as a worker made it)."""
    value = codec.encode_request(Request(url, **kwargs), spider or MemSpider())
    log.records[(REQUESTS, partition)].append(value)


async def settle() -> None:
    """Let the outbox's call_soon batches and their tasks run."""
    for _ in range(10):
        await asyncio.sleep(0)


MakeWorker = Callable[..., Worker]


@pytest.fixture
def make_worker() -> MakeWorker:
    """``make_worker(log=None, assign=[(topic, partition)...], crawl_state=None, **settings)``:
    a started worker (call it inside a running event loop); *crawl_state* replaces the
    in-memory heartbeats and seed claims (the in-memory ledger stays)."""

    def make(log: MemoryLog | None = None, assign: list[tuple[str, int]] | None = None,
             crawl_state: Any = None, **settings: Any) -> Worker:
        crawler = get_crawler(MemSpider, {**SETTINGS, **settings})
        engine = Engine()
        crawler.engine = engine  # type: ignore[assignment]
        spider = MemSpider()
        crawler.spider = spider
        config = FrontierConfig.from_settings(crawler.settings, MemSpider.name)
        transport = MemoryTransport(config, log)
        scheduler = KafkaScheduler(crawler, config, transport=transport,
                                   dedup=DedupFactory.from_crawler(crawler),
                                   host_limit=HostLimitConfig.from_settings(crawler.settings))
        state = MemoryCrawlState(CRAWL)
        bloom = scheduler._bloom()
        assert isinstance(bloom, MemoryBloom)
        scheduler.start(spider, bloom=bloom, state=crawl_state or state, ledger=state,
                        state_ttl=60.0, seed_key=SEED_KEY)
        worker = Worker(scheduler, transport, state, engine, spider)
        worker.consumer.assign(assign if assign is not None else [
            (REQUESTS, 0), (REQUESTS, 1), (HIGH, 0), (HIGH, 1), (SEEDS, 0), (SEEDS, 1)])
        return worker

    return make
