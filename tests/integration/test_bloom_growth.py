"""The Redis Bloom filter keeps growing past the size of a Redis string, and a filter that
can grow no more stops filtering instead of taking new URLs for duplicates."""

from __future__ import annotations

import asyncio
import logging

import pytest
from bloom_helpers import batched, fingerprints, fp_bound

from crawler.connections.clients import redis_client
from crawler.dedup import bloom as bloom_module
from crawler.dedup.bloom import plan, slice_spec
from crawler.dedup.dupefilter import RedisBloom


@pytest.fixture
def key(crawl_id: str) -> str:
    return f"{{{crawl_id}}}:bloom"


async def fill_and_probe(redis_url: str, key: str, added: int, **params: object) -> tuple[
        float, int]:
    """Add *added* fingerprints to a new filter, probe 20,000 others: the share it takes
    for seen, and its slices."""
    client = redis_client(redis_url)
    try:
        bloom = RedisBloom(client, key, **params)  # type: ignore[arg-type]
        await bloom.open()
        await batched(bloom.add, fingerprints(added, seed=1))
        probes = 20_000
        seen = sum(await batched(bloom.check, fingerprints(probes, seed=2)))
        return seen / probes, (await bloom.info()).slices
    finally:
        await client.delete(*[k async for k in client.scan_iter(match=f"{key}:*")])
        await client.aclose()


def test_growth_past_four_slices_keeps_the_false_positive_rate(
    redis_url: str, key: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """At the defaults the filter used to stop at four slices (150 M fingerprints), the
    fifth one being larger than a Redis string (MAX_SLICE_BITS, 512 MiB). Here that string
    limit is 16 KiB, so the same happens at four slices of a 500-fingerprint filter:
    7,500 fingerprints. 30,000 need six slices."""
    monkeypatch.setattr(bloom_module, "MAX_SLICE_BITS", 2**17)
    assert slice_spec(4, capacity=500, error_rate=0.01, growth=2).bits > 2**17
    rate, slices = asyncio.run(fill_and_probe(
        redis_url, key, 30_000, capacity=500, error_rate=0.01, growth=2, piece_bits=2**14))
    assert rate <= fp_bound(20_000, 0.01) / 20_000, f"false-positive rate {rate:.2%}"
    assert slices == 6


def test_a_filter_that_cannot_grow_stops_filtering(
    redis_url: str, key: str, caplog: pytest.LogCaptureFixture
) -> None:
    """With BLOOM_GROWTH = 1 every slice holds BLOOM_CAPACITY: after the last slice the plan
    allows, the filter answers "never seen" (duplicates are crawled again, nothing new is
    lost) and says so once."""
    capacity = 100
    total = sum(s.capacity for s in plan(capacity=capacity, error_rate=0.01, growth=1))
    with caplog.at_level(logging.ERROR, logger="crawler.dedup.dupefilter"):
        rate, _ = asyncio.run(fill_and_probe(
            redis_url, key, total + 6_000, capacity=capacity, error_rate=0.01, growth=1))
    assert rate <= fp_bound(20_000, 0.01) / 20_000, f"false-positive rate {rate:.2%}"
    errors = [r.getMessage() for r in caplog.records if "no longer filters" in r.getMessage()]
    assert len(errors) == 1


def test_a_filter_planned_with_fewer_slices_gets_the_rest(redis_url: str, key: str) -> None:
    """A filter made when slices were capped (four slices planned at the defaults) gets the
    slices it lacks when a worker opens it, and keeps those it has."""
    params = {"capacity": 10_000_000, "error_rate": 0.001, "growth": 2}

    async def scenario() -> None:
        client = redis_client(redis_url)
        try:
            await RedisBloom(client, key, **params).open()  # type: ignore[arg-type]
            meta = f"{key}:meta"
            later = [f"s{i}:{f}" for i in range(4, 19) for f in ("capacity", "bits", "hashes")]
            await client.hdel(meta, *later)
            await client.hset(meta, "s0:count", 10_000_000)
            await RedisBloom(client, key, **params).open()  # type: ignore[arg-type]
            stored = await client.hgetall(meta)
            assert int(stored[b"s18:capacity"]) == 10_000_000 * 2**18
            assert int(stored[b"s0:count"]) == 10_000_000
        finally:
            await client.delete(*[k async for k in client.scan_iter(match=f"{key}:*")])
            await client.aclose()

    asyncio.run(scenario())
