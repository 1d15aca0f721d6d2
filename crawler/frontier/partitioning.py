"""Which partition of ``<CRAWL_ID>.requests`` a request goes to (pure, but for the
kafka-python adapter :class:`SpreadPartitioner`).

``KAFKA_PARTITION_BY`` names the unit whose requests stay together (``host``, ``domain``, or
``url`` for none) and ``KAFKA_HOST_PARTITIONS`` over how many partitions one unit is spread:
``0`` (the default) is every partition, so the workers of a crawl share one big host's work;
``1`` keeps a host on one partition, and so on one worker (connections and robots.txt of a
host on one machine, at the price of one worker per host). Politeness is cluster-wide either
way (:mod:`crawler.politeness.hostlimit`).

A spread record's key is ``<unit>\\x1f<8 hex digits of the URL's CRC-32>``: the partition is
``(crc32(unit) + bucket * stride) % partitions``, with ``bucket`` the URL's hash modulo the
spread and ``stride = partitions // spread``, so one unit's partitions are evenly apart and
the range assignor gives each worker its share of them. One URL always lands on one
partition (a raced duplicate meets its twin in one worker's recent window). "One URL" is
the URL without its fragment, as for Scrapy's fingerprint: ``p/1.html#top`` and ``p/1.html``
are one page and so one partition. A key without
the separator (``url``, ``KAFKA_HOST_PARTITIONS=1``, any other producer) is placed by
Kafka's own murmur2 rule.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from typing import Any

from kafka.partitioner.default import DefaultPartitioner
from scrapy import Request
from scrapy.utils.httpobj import urlparse_cached

from crawler.politeness.unit import by_domain

PARTITION_BY = ("host", "domain", "url")
SEPARATOR = b"\x1f"


def _page(request: Request) -> str:
    """The URL without its fragment: what the fingerprint and the origin see of it."""
    return request.url.partition("#")[0]


def _unit(by: str) -> Callable[[Request], bytes]:
    if by == "host":
        return lambda request: (urlparse_cached(request).hostname or "").encode()
    return lambda request: by_domain(urlparse_cached(request).hostname or "").encode()


def partitioner(by: str, spread: int = 0) -> Callable[[Request], bytes]:
    """The Kafka record key of a request (see the module's docstring)."""
    if by == "url":
        return lambda request: _page(request).encode()
    unit = _unit(by)
    if spread == 1:
        return unit

    def key(request: Request) -> bytes:
        crc = zlib.crc32(_page(request).encode())
        return unit(request) + SEPARATOR + b"%08x" % crc

    return key


def spread_partition(key: bytes, partitions: int, spread: int = 0) -> int | None:
    """The partition of a spread *key* among *partitions*; None for any other key."""
    unit, sep, digits = key.rpartition(SEPARATOR)
    if not sep or len(digits) != 8:
        return None
    try:
        bucket = int(digits, 16)
    except ValueError:
        return None
    width = partitions if spread <= 0 else min(spread, partitions)
    stride = partitions // width
    return (zlib.crc32(unit) + (bucket % width) * stride) % partitions


class SpreadPartitioner(DefaultPartitioner):  # type: ignore[misc]
    """kafka-python's partitioner: :func:`spread_partition` for spread keys, murmur2 else."""

    def __init__(self, spread: int = 0) -> None:
        self.spread = spread

    def partition(self, topic: str, key: Any, serialized_key: bytes | None, value: Any,
                  serialized_value: Any, cluster: Any) -> int:
        if serialized_key:
            parts = sorted(cluster.partitions_for_topic(topic) or ())
            if parts:
                index = spread_partition(serialized_key, len(parts), self.spread)
                if index is not None:
                    return int(parts[index])
        return int(super().partition(topic, key, serialized_key, value, serialized_value,
                                     cluster))
