"""Frontier microbenchmark: requests through the broker by one process, with the worker's
own pieces: :func:`crawler.frontier.codec.encode_request` and
:class:`crawler.frontier.producer.Sender` on the way in,
:class:`crawler.frontier.consumer.ConsumerLoop` and :func:`crawler.frontier.codec.decode_request`
on the way out, the clients of
:mod:`crawler.connections.clients` and the settings' defaults. An asyncio event loop stands in for
the Twisted reactor; each consumed request is taken from the buffer and acknowledged
as soon as it is decoded (an engine with nothing else to do).
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from scrapy import Request, Spider
from scrapy.settings import Settings

from benchmarks.micro_result import Measurement, Sizes, at_least, median_of
from crawler.config import defaults
from crawler.connections import clients as connection
from crawler.connections.options import KafkaOptions
from crawler.frontier.codec import decode_request, encode_request
from crawler.frontier.consumer import ConsumerLoop, Record
from crawler.frontier.partitioning import partitioner
from crawler.frontier.producer import Sender

logger = logging.getLogger(__name__)

FRONTIER = "Frontier throughput"
HOSTS = 400
YIELD_EVERY = 500  # requests encoded and sent between two turns of the event loop


class MicroSpider(Spider):
    name = "micro"

    def parse(self, response: object) -> None:
        """A callback for the requests to name."""


def make_requests(count: int, spider: MicroSpider, tag: str) -> list[Request]:
    """Follow-up requests as a crawl makes them: a few hundred hosts, article-like paths."""
    return [
        Request(f"https://www{i % HOSTS}.example-{tag}.com/articles/{i * 7919 % 100_003}/"
                f"a-title-of-some-length-{i}.html?ref=listing&page={i % 40}",
                callback=spider.parse, meta={"depth": 1 + i % 5}, priority=-(i % 5))
        for i in range(count)
    ]


@dataclass
class Consumed:
    """Counts what a consumer got; *done* is set once it has *expected* records."""

    expected: int
    count: int = 0
    first: float | None = None
    last: float = 0.0
    done: asyncio.Event = field(default_factory=asyncio.Event)


async def new_topic(bootstrap: connection.Kafka) -> str:
    topic = f"micro-{secrets.token_hex(4)}.requests"
    await asyncio.to_thread(connection.ensure_topics, bootstrap,
                            {topic: defaults.KAFKA_PARTITIONS},
                            connect_timeout=defaults.CONNECT_TIMEOUT)
    return topic


async def new_sender(bootstrap: connection.Kafka) -> Sender:
    loop = asyncio.get_running_loop()
    producer = await asyncio.to_thread(
        connection.kafka_producer, bootstrap, connect_timeout=defaults.CONNECT_TIMEOUT,
        linger_ms=defaults.KAFKA_PRODUCER_LINGER_MS, client_id="micro-producer")
    sender = Sender(producer, call_from_thread=loop.call_soon_threadsafe,
                    call_later=loop.call_later, backoff=defaults.KAFKA_SEND_RETRY_BACKOFF,
                    backoff_max=defaults.KAFKA_SEND_RETRY_BACKOFF_MAX)
    sender.start()
    return sender


async def produce(sender: Sender, topic: str, requests: list[Request],
                  spider: MicroSpider) -> float:
    """Seconds to encode and send *requests* until the broker acknowledged them all."""
    done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    left, key_for = len(requests), partitioner(defaults.KAFKA_PARTITION_BY)

    def acked(_partition: int, _offset: int) -> None:
        nonlocal left
        left -= 1
        if left == 0:
            done.set_result(None)

    start = time.perf_counter()
    for i, request in enumerate(requests):
        sender.send(topic, key_for(request), encode_request(request, spider), acked)
        if i % YIELD_EVERY == YIELD_EVERY - 1:
            await asyncio.sleep(0)
    await done
    return time.perf_counter() - start


def deliver_to(state: Consumed, spider: MicroSpider) -> Callable[[ConsumerLoop,
                                                                  list[Record]], None]:
    def deliver(loop: ConsumerLoop, records: list[Record]) -> None:
        if state.first is None:
            state.first = time.perf_counter()
        for record in records:
            decode_request(record.value, spider)
            loop.holding.took(record.topic)
            loop.ack((record.topic, record.partition), record.offset, record.epoch)
        state.count += len(records)
        state.last = time.perf_counter()
        if state.count >= state.expected:
            state.done.set()
    return deliver


async def start_consumer(bootstrap: connection.Kafka, topic: str, state: Consumed,
                         spider: MicroSpider) -> ConsumerLoop:
    """A ConsumerLoop in a new group on *topic*, once it has its partitions."""
    consumer = await asyncio.to_thread(
        connection.kafka_consumer, bootstrap, group_id=f"{topic}.{secrets.token_hex(3)}",
        connect_timeout=defaults.CONNECT_TIMEOUT, client_id="micro-consumer",
        session_timeout_ms=defaults.KAFKA_SESSION_TIMEOUT_MS,
        heartbeat_interval_ms=defaults.KAFKA_HEARTBEAT_INTERVAL_MS,
        max_poll_interval_ms=defaults.KAFKA_MAX_POLL_INTERVAL_MS)
    deliver = deliver_to(state, spider)
    loop = ConsumerLoop(consumer, [topic], buffer_size=defaults.KAFKA_BUFFER_SIZE,
                        commit_interval=defaults.KAFKA_COMMIT_INTERVAL,
                        deliver=lambda records: deliver(loop, records),
                        call_from_thread=asyncio.get_running_loop().call_soon_threadsafe)
    loop.start()
    while not loop.epochs:  # set when the group assigns the partitions
        await asyncio.sleep(0.02)
    return loop


async def stop_consumer(loop: ConsumerLoop) -> None:
    loop.stop()
    await asyncio.to_thread(loop.stopped.wait, 10)


async def one_round(bootstrap: connection.Kafka, sender: Sender, sizes: Sizes,
                    spider: MicroSpider) -> tuple[float, float, float, float]:
    """(produce, consume, end-to-end) requests a second and the group join in seconds."""
    n = sizes.frontier_requests
    topic = await new_topic(bootstrap)
    produced = n / await produce(sender, topic, make_requests(n, spider, topic[6:14]), spider)
    state, started = Consumed(n), time.perf_counter()
    loop = await start_consumer(bootstrap, topic, state, spider)
    joined = time.perf_counter() - started
    await state.done.wait()
    await stop_consumer(loop)
    consumed = n / (state.last - (state.first or state.last) or 1e-9)
    topic, state = await new_topic(bootstrap), Consumed(n)
    loop = await start_consumer(bootstrap, topic, state, spider)
    started = time.perf_counter()
    await produce(sender, topic, make_requests(n, spider, topic[6:14]), spider)
    await state.done.wait()
    both = n / (state.last - started)
    await stop_consumer(loop)
    return produced, consumed, both, joined


def kafka_options(servers: str) -> KafkaOptions:
    """*servers* with the Kafka security settings of the environment, as a crawl reads them."""
    return KafkaOptions.from_settings(Settings({"KAFKA_BOOTSTRAP_SERVERS": servers}))


async def run(servers: str, sizes: Sizes) -> list[Measurement]:
    bootstrap = kafka_options(servers)
    spider = MicroSpider()
    sender = await new_sender(bootstrap)
    try:
        rounds = [await one_round(bootstrap, sender, sizes, spider)
                  for _ in range(sizes.repeats)]
    finally:
        await asyncio.to_thread(sender.close, 10)
    n, parts = sizes.frontier_requests, defaults.KAFKA_PARTITIONS
    common = f"{n:,} requests, a topic of {parts} partitions, acks=all"
    joins = ", ".join(f"{r[3]:.1f}" for r in rounds)
    notes = (f"{common}: encode, Sender, until every send is acknowledged",
             f"{common}: ConsumerLoop (buffer {defaults.KAFKA_BUFFER_SIZE}), decode, take, "
             f"ack; from the first record to the last (group join before it: {joins} s)",
             f"{common}: produced while the group consumes; from the first send to the last "
             "record decoded")
    names = ("produce", "consume", "end to end (produce and consume at once)")
    return [median_of(FRONTIER, name, [r[i] for r in rounds], "requests/s", at_least(20_000),
                      note) for i, (name, note) in enumerate(zip(names, notes, strict=True))]
