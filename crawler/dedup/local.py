"""In-memory Bloom filters of one worker: the pre-filter in front of Redis, and the
single-node dupefilter.

:class:`LocalBloom` is the pre-filter of the distributed crawl (the outbox asks it before
Redis). It keeps two *generations* of fixed-size filters of ``capacity`` fingerprints
each: when the current one is full it becomes the previous one and the oldest is dropped,
so its memory is that of two filters whatever the crawl's size (7.5 MB at the defaults:
``BLOOM_LOCAL_CAPACITY = 1000000``, ``BLOOM_LOCAL_ERROR_RATE = 0.000001``). Forgetting
is safe: a fingerprint the pre-filter does not know goes to the Redis filter, which knows
every fingerprint of the crawl. Each generation gets half of ``error_rate``, so a
fingerprint is taken for one it never saw with a probability of at most ``error_rate``
(the union of two filters). A probe costs at most two lookups, not one per slice.

:class:`ScalableLocalBloom` never forgets: it is the whole dupefilter of a single-node
crawl (:class:`LocalBloomDupeFilter`, Scrapy's ``DUPEFILTER_CLASS``), and it grows with the crawl.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Self

from pybloom_live import BloomFilter, ScalableBloomFilter
from scrapy.dupefilters import BaseDupeFilter
from scrapy.utils.request import referer_str

from crawler.config import readers as config
from crawler.dedup.bloom import validate

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from scrapy.http import Request
    from scrapy.spiders import Spider
    from scrapy.statscollectors import StatsCollector
    from scrapy.utils.request import RequestFingerprinterProtocol

logger = logging.getLogger(__name__)


class LocalBloom:
    """Two generations of at most *capacity* fingerprints each; a false-positive rate of
    at most *error_rate* and a bounded memory (see the module docstring)."""

    GENERATIONS = 2

    def __init__(self, capacity: int, error_rate: float, *,
                 recrawl: Callable[[], int] | None = None) -> None:
        """*recrawl*: the recrawl generation it is now (``RECRAWL_AFTER > 0``); when it
        changes, everything held is forgotten, so a URL due again is asked of Redis."""
        validate(capacity=capacity, error_rate=error_rate, prefix="BLOOM_LOCAL", max_bits=None)
        self.capacity = capacity
        self.error_rate = error_rate
        self.rotations = 0  # generations dropped so far
        self._share = error_rate / self.GENERATIONS
        self._current = BloomFilter(capacity, self._share)
        self._previous: BloomFilter | None = None
        self._recrawl = recrawl
        self._recrawl_generation = recrawl() if recrawl is not None else 0

    def __contains__(self, fp: bytes) -> bool:
        self._forget_on_recrawl()
        key = fp.hex()
        return key in self._current or (self._previous is not None and key in self._previous)

    def _forget_on_recrawl(self) -> None:
        if self._recrawl is None:
            return
        generation = self._recrawl()
        if generation != self._recrawl_generation:
            self._recrawl_generation = generation
            self._current, self._previous = BloomFilter(self.capacity, self._share), None

    def add(self, fp: bytes) -> bool:
        """Add *fp* to the current generation; True if neither generation knew it."""
        if fp in self:
            return False
        if self._current.count >= self.capacity:
            self._previous, self._current = self._current, BloomFilter(self.capacity,
                                                                       self._share)
            self.rotations += 1
        self._current.add(fp.hex(), skip_check=True)
        return True

    @property
    def memory_bytes(self) -> int:
        """Bytes of the bit arrays of the generations held."""
        filters = [f for f in (self._current, self._previous) if f is not None]
        return sum(len(f.bitarray) // 8 for f in filters)

    def __len__(self) -> int:
        """Fingerprints held (those of the generations not dropped)."""
        return int(self._current.count) + (0 if self._previous is None
                                           else int(self._previous.count))


class ScalableLocalBloom:
    """A per-worker in-memory scalable Bloom filter of fingerprints (pybloom-live) whose
    false-positive rate stays below *error_rate* however much it grows."""

    _RATIO = 0.9  # pybloom-live's tightening ratio: its slices sum to rate * r / (1 - r)

    def __init__(self, capacity: int, error_rate: float) -> None:
        validate(capacity=capacity, error_rate=error_rate, prefix="BLOOM_LOCAL", max_bits=None)
        self._filter = ScalableBloomFilter(
            initial_capacity=capacity,
            error_rate=error_rate * (1 - self._RATIO) / self._RATIO,
            mode=ScalableBloomFilter.SMALL_SET_GROWTH,
        )

    def __contains__(self, fp: bytes) -> bool:
        return bool(fp.hex() in self._filter)

    def add(self, fp: bytes) -> bool:
        """Add *fp*; True if it was new."""
        return not self._filter.add(fp.hex())

    def __len__(self) -> int:
        return len(self._filter)


class LocalBloomDupeFilter(BaseDupeFilter):
    """``DUPEFILTER_CLASS`` for single-node crawls: a :class:`ScalableLocalBloom` of request
    fingerprints, sized by ``BLOOM_LOCAL_CAPACITY`` and ``BLOOM_LOCAL_ERROR_RATE``."""

    def __init__(
        self,
        *,
        capacity: int,
        error_rate: float,
        fingerprinter: RequestFingerprinterProtocol,
        stats: StatsCollector | None = None,
        debug: bool = False,
    ) -> None:
        self.bloom = ScalableLocalBloom(capacity=capacity, error_rate=error_rate)
        self.fingerprinter = fingerprinter
        self.stats = stats
        self.debug = debug
        self.logdupes = True

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        settings = crawler.settings
        return cls(
            capacity=config.get_int(settings, "BLOOM_LOCAL_CAPACITY", minimum=1),
            error_rate=config.get_float(
                settings, "BLOOM_LOCAL_ERROR_RATE", minimum=0, exclusive_min=True
            ),
            fingerprinter=crawler.request_fingerprinter,
            stats=crawler.stats,
            debug=settings.getbool("DUPEFILTER_DEBUG"),
        )

    def request_seen(self, request: Request) -> bool:
        return not self.bloom.add(self.fingerprinter.fingerprint(request))

    def log(self, request: Request, spider: Spider) -> None:
        if self.debug:
            msg = "Filtered duplicate request: %(request)s (referer: %(referer)s)"
            args = {"request": request, "referer": referer_str(request)}
            logger.debug(msg, args, extra={"spider": spider})
        elif self.logdupes:
            msg = (
                "Filtered duplicate request: %(request)s - no more duplicates will be shown"
                " (see DUPEFILTER_DEBUG to show all duplicates)"
            )
            logger.debug(msg, {"request": request}, extra={"spider": spider})
            self.logdupes = False
        if self.stats is not None:
            self.stats.inc_value("bloom/filtered")
