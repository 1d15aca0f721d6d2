"""What the cluster-wide politeness and priority machinery costs per request (issue 14):
the partition a request goes to, the host gate's admit and release, the buffer's bands, and
the renewal of a worker's shares in a real Redis, amortised over the requests it carries."""

from __future__ import annotations

import time
import timeit
from typing import Any

from kafka.partitioner.default import murmur2
from scrapy import Request

from benchmarks.micro_result import Measurement, Sizes, median_of
from crawler.connections.clients import redis_client
from crawler.frontier.buffer import RequestBuffer
from crawler.frontier.partitioning import partitioner, spread_partition
from crawler.politeness.hostgate import HostGate
from crawler.politeness.hostlimit import (
    Demand,
    HostLimitConfig,
    MemorySlotStore,
    RedisSlotStore,
)

POLITENESS = "Politeness and priority cost per request"
HOSTS = 400
CFG = HostLimitConfig(enabled=True, concurrency=16, delay=0.0, ttl=5.0, interval=0.5)
RATE = 100.0  # requests a second one worker sends (the demo's pace): renewals amortise over it


def _requests(count: int) -> list[Request]:
    return [Request(f"https://h{n % HOSTS}.example.com/p/{n}.html", priority=n % 3)
            for n in range(count)]


def _partition_us(requests: list[Request], sizes: Sizes, repeats: int) -> list[Measurement]:
    spread, by_url = partitioner("host", 0), partitioner("url")

    def spread_key() -> None:
        for r in requests:
            spread_partition(spread(r), 12)

    def url_key() -> None:
        for r in requests:
            murmur2(by_url(r)) % 12  # what kafka-python's default partitioner does with it

    n = len(requests)
    return [median_of(POLITENESS, "record key + partition, default (host spread)",
                      [t / n * 1e6 for t in timeit.repeat(spread_key, number=1, repeat=repeats)],
                      "us", None, f"{n:,} requests over {HOSTS} hosts"),
            median_of(POLITENESS, "record key, KAFKA_PARTITION_BY=url (the old override)",
                      [t / n * 1e6 for t in timeit.repeat(url_key, number=1, repeat=repeats)],
                      "us", None, "kafka-python's pure-Python murmur2 included")]


async def _gate_us(requests: list[Request], repeats: int) -> Measurement:
    gate = HostGate(CFG, MemorySlotStore(), "w", on_free=lambda h, n: None,
                    demand=lambda: {f"h{n}.example.com": 16 for n in range(HOSTS)})
    await gate.renew()

    def admit_release() -> None:
        for r in requests:
            if gate.admit(r) is None:
                gate.release(r)

    n = len(requests)
    return median_of(POLITENESS, "host gate: admit + release", [
        t / n * 1e6 for t in timeit.repeat(admit_release, number=1, repeat=repeats)],
        "us", None, "shares already granted; no I/O on this path")


def _buffer_us(requests: list[Request], sizes: Sizes, repeats: int) -> list[Measurement]:
    out = []
    for label, kwargs in (("one band", {}),
                          ("two bands, min share 0.1 (default)",
                           {"band_of": lambda p: int(p >= 1), "min_share": 0.1})):
        def push_pop(kw: dict[str, Any] = kwargs) -> None:
            buffer: RequestBuffer[int] = RequestBuffer(**kw)
            for i, r in enumerate(requests[:256]):
                buffer.push(r, i)
            for i, r in enumerate(requests[256:]):
                buffer.pop()
                buffer.push(r, i)

        n = len(requests) - 256
        out.append(median_of(POLITENESS, f"buffer push + pop, {label}", [
            t / n * 1e6 for t in timeit.repeat(push_pop, number=1, repeat=repeats)],
            "us", None, "256 buffered, as KAFKA_BUFFER_SIZE"))
    return out


async def _renewal(redis_url: str, hosts: int, repeats: int) -> list[float]:
    client = redis_client(redis_url)
    store = RedisSlotStore(client, f"micro-{time.time_ns()}")
    demands = [Demand(f"h{n}.example.com", 16, 8, 4) for n in range(hosts)]
    times = []
    try:
        for _ in range(max(repeats, 5)):
            started = time.perf_counter()
            await store.renew("w", demands, CFG.ttl)
            times.append((time.perf_counter() - started) * 1e3)
    finally:
        await client.aclose()
    return times


async def run(redis_url: str, sizes: Sizes) -> list[Measurement]:
    repeats = max(sizes.repeats, 3)
    requests = _requests(max(sizes.codec_calls, 2_000))
    out = [*_partition_us(requests, sizes, repeats), await _gate_us(requests, repeats),
           *_buffer_us(requests, sizes, repeats)]
    for hosts in (1, 50, 272):
        times = await _renewal(redis_url, hosts, repeats)
        out.append(median_of(POLITENESS, f"share renewal, {hosts} hosts, one EVALSHA", times,
                             "ms", None, "round trip on loopback, client and Redis"))
    per_request = (await _renewal(redis_url, 272, repeats))
    amortised = [t * 1e3 / (RATE * CFG.interval) for t in per_request]
    out.append(median_of(POLITENESS, "share renewal per request (272 hosts, 100 req/s)",
                         amortised, "us", None,
                         "one renewal every HOSTLIMIT_INTERVAL carries 50 requests; 272 hosts "
                         "is the most one worker can have work for (buffer + engine)"))
    return out
