"""Duplicate filtering: Bloom maths, the shared Redis filter and local filters.

- :mod:`~crawler.dedup.bloom`: slice sizes, hash positions (pure logic).
- :mod:`~crawler.dedup.redis_filter`: the Lua scripts (``lua/*.lua``) run by Redis.
- :mod:`~crawler.dedup.dupefilter`: :class:`RedisBloom` (one filter per crawl, shared by
  every worker) and :class:`LocalBloomDupeFilter` (single-node mode).
- :mod:`~crawler.dedup.local`: in-process Bloom filters.
- :mod:`~crawler.dedup.generations`: ``RECRAWL_AFTER`` and the generation clock (pure).
- :mod:`~crawler.dedup.recrawl`: :class:`~crawler.dedup.recrawl.RecrawlBloom`, one filter
  per recrawl generation, two at a time (``docs/recrawl.md``).
- :mod:`~crawler.dedup.due`: the per-request interval (meta ``recrawl_after``), one time
  per such URL in Redis.
"""

from crawler.dedup.dupefilter import BloomMissing, RedisBloom
from crawler.dedup.local import LocalBloomDupeFilter

__all__ = ["BloomMissing", "LocalBloomDupeFilter", "RedisBloom"]
