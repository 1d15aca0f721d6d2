"""The request fingerprint scrapy-redis 0.9 stores, as Scrapy's ``REQUEST_FINGERPRINTER_CLASS``.

scrapy-redis 0.9's ``RFPDupeFilter.request_fingerprint`` is the SHA1 of the JSON of a
request's method, canonical URL and body (``json.dumps(..., sort_keys=True)``), kept in its
dupefilter SET as 40 hex digits. Scrapy's default fingerprinter hashes the same JSON with one
key more (``"headers": {}``), so none of its fingerprints is in that SET. A crawl whose
workers use :class:`ScrapyRedisFingerprinter` computes exactly the SET's fingerprints, as
bytes: its Bloom filter, seed claims and MongoDB ``_id`` all agree with what scrapy-redis
recorded, and ``python -m crawler.migrate.scrapy_redis`` can import that SET.
"""

from __future__ import annotations

import hashlib
import json
from typing import TYPE_CHECKING, Self
from weakref import WeakKeyDictionary

from scrapy.utils.python import to_unicode
from w3lib.url import canonicalize_url

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.crawler import Crawler

_cache: WeakKeyDictionary[Request, bytes] = WeakKeyDictionary()


def scrapy_redis_fingerprint(request: Request) -> bytes:
    """The 20-byte SHA1 whose hex scrapy-redis 0.9's ``RFPDupeFilter`` stores for *request*."""
    cached = _cache.get(request)
    if cached is None:
        data = {
            "method": to_unicode(request.method),
            "url": canonicalize_url(request.url),
            "body": (request.body or b"").hex(),
        }
        cached = _cache[request] = hashlib.sha1(  # scrapy-redis's hash, not a secret
            json.dumps(data, sort_keys=True).encode()).digest()
    return cached


class ScrapyRedisFingerprinter:
    """``REQUEST_FINGERPRINTER_CLASS = "crawler.migrate.ScrapyRedisFingerprinter"``: the
    fingerprints of scrapy-redis 0.9's dupefilter, for a crawl that took over its seen set
    (``docs/tutorials/from-scrapy-redis.md``). Keep it for the whole life of that
    ``CRAWL_ID``: a crawl that changes fingerprinter forgets what it has seen."""

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        return cls()

    def fingerprint(self, request: Request) -> bytes:
        return scrapy_redis_fingerprint(request)
