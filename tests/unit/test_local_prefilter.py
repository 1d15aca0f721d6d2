"""The per-worker pre-filter in front of Redis: bounded memory, however many fingerprints
a worker sees (pure logic: forgetting is safe because Redis knows every fingerprint)."""

from __future__ import annotations

import hashlib
import math
import tracemalloc

from crawler.dedup.local import LocalBloom, LocalBloomDupeFilter

CAPACITY = 2000


def fps(start: int, count: int, tag: str = "seen") -> list[bytes]:
    return [hashlib.sha1(f"{tag}-{i}".encode()).digest() for i in range(start, start + count)]


def traced_bytes(bloom: LocalBloom, start: int, count: int) -> int:
    """Memory held (tracemalloc) after adding *count* more fingerprints to *bloom*."""
    for fp in fps(start, count):
        bloom.add(fp)
    return tracemalloc.get_traced_memory()[0]


def test_memory_stays_bounded_over_many_generations() -> None:
    tracemalloc.start()
    try:
        bloom = LocalBloom(500, 0.0001)
        after_two = traced_bytes(bloom, 0, 2 * 500)
        after_thirty = traced_bytes(bloom, 2 * 500, 28 * 500)
    finally:
        tracemalloc.stop()
    # Two generations of 500: about 2 * 1.2 KB of bits. A filter that kept every
    # fingerprint would hold 15 times as many bits after 30 generations.
    assert after_thirty <= after_two * 1.2 + 4096, (after_two, after_thirty)
    assert len(bloom) <= 2 * 500


def test_the_latest_fingerprints_are_always_known() -> None:
    bloom = LocalBloom(CAPACITY, 0.0001)
    added = fps(0, 10 * CAPACITY)
    for n, fp in enumerate(added, 1):
        assert bloom.add(fp) or fp in added[:n - 1]  # new, or a (rare) false positive
        if n % CAPACITY == 0:  # the last CAPACITY are all known, whatever the rotations
            assert all(f in bloom for f in added[n - CAPACITY:n])
    assert bloom.add(added[-1]) is False
    # long-gone generations are forgotten: Redis answers for them
    assert sum(f in bloom for f in added[:CAPACITY]) < CAPACITY * 0.01


def test_false_positive_rate_stays_under_the_target() -> None:
    rate = 0.001
    bloom = LocalBloom(CAPACITY, rate)
    for fp in fps(0, 7 * CAPACITY + CAPACITY // 2):
        bloom.add(fp)
    trials = 50_000
    false = sum(fp in bloom for fp in fps(0, trials, tag="never"))
    mean = trials * rate
    assert false <= mean + 4 * math.sqrt(mean)


def test_the_single_node_dupefilter_never_forgets() -> None:
    """In single-node mode the local filter is the whole dupefilter: it must not rotate."""
    dupefilter = LocalBloomDupeFilter(capacity=CAPACITY, error_rate=0.0001,
                                      fingerprinter=None)  # type: ignore[arg-type]
    added = fps(0, 10 * CAPACITY)
    for fp in added:
        dupefilter.bloom.add(fp)
    assert all(fp in dupefilter.bloom for fp in added)
