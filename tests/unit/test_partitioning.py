"""Where a request's record goes (crawler.frontier.partitioning): pure functions."""

from __future__ import annotations

import pytest
from scrapy import Request

from crawler.frontier.partitioning import SEPARATOR, partitioner, spread_partition

pytestmark = pytest.mark.unit
PARTITIONS = 12


def _partition(url: str, spread: int = 0, by: str = "host") -> int | None:
    return spread_partition(partitioner(by, spread)(Request(url)), PARTITIONS, spread)


def test_a_page_and_its_fragments_share_one_partition():
    # the demo site links p/1.html#top: a raced copy must meet its twin in one partition
    urls = ["http://a.test/p/1.html", "http://a.test/p/1.html#top", "http://a.test/p/1.html#x"]
    for spread in (0, 3):
        assert len({_partition(u, spread) for u in urls}) == 1
    keys = {partitioner("url")(Request(u)) for u in urls}
    assert keys == {b"http://a.test/p/1.html"}


def test_one_host_is_spread_over_every_partition_by_default():
    parts = {_partition(f"http://a.test/p/{n}.html") for n in range(500)}
    assert parts == set(range(PARTITIONS))


def test_a_spread_of_k_uses_k_partitions_evenly_apart():
    parts = sorted({_partition(f"http://a.test/p/{n}.html", 3) for n in range(500)})
    assert len(parts) == 3
    assert {(b - a) % PARTITIONS for a, b in zip(parts, parts[1:] + parts[:1], strict=True)} == {4}


def test_host_affinity_and_foreign_keys_fall_back_to_murmur2():
    key = partitioner("host", 1)(Request("http://a.test/p/1.html"))
    assert key == b"a.test" and SEPARATOR not in key
    assert spread_partition(key, PARTITIONS, 1) is None
    assert spread_partition(b"a.test" + SEPARATOR + b"nothex!!", PARTITIONS) is None
