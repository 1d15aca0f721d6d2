"""The Bloom filter's default plan of slices: the pure maths, no Redis (the growth itself is
tested against a real Redis in tests/integration/test_bloom_growth.py)."""

from __future__ import annotations

from crawler.dedup.bloom import plan


def test_the_default_plan_holds_far_more_than_a_crawl() -> None:
    specs = plan(capacity=10_000_000, error_rate=0.001, growth=2)
    assert sum(s.capacity for s in specs) > 10**12  # it stopped at 1.5 * 10**8
    assert sum(s.error_rate for s in specs) <= 0.001
