"""Moving a running crawl here from scrapy-redis (``docs/tutorials/from-scrapy-redis.md``).

- :class:`ScrapyRedisFingerprinter`, for ``REQUEST_FINGERPRINTER_CLASS``: the fingerprints
  scrapy-redis 0.9's dupefilter stored, so that its seen set means the same here;
- ``python -m crawler.migrate.scrapy_redis``: imports that seen set (a Redis SET of hex
  fingerprints) into the crawl's Bloom filter. Nothing is unpickled.
"""

from crawler.migrate.fingerprint import ScrapyRedisFingerprinter, scrapy_redis_fingerprint

__all__ = ["ScrapyRedisFingerprinter", "scrapy_redis_fingerprint"]
