"""Politeness and resilience: retry backoff, rate limits shared by the cluster, proxies.

- :mod:`~crawler.politeness.backoff`: how each HTTP status and error is retried.
- :mod:`~crawler.politeness.tokenbucket` (pure logic) and
  :mod:`~crawler.politeness.ratelimiter` (its Redis store): per-domain rate limits.
- :mod:`~crawler.politeness.proxypool` (scoring, pure logic) and
  :mod:`~crawler.politeness.proxystore` (the pool shared through Redis).
"""

from crawler.politeness.proxypool import BanPolicy
from crawler.politeness.proxystore import ProxyStore, RedisProxyStore

__all__ = ["BanPolicy", "ProxyStore", "RedisProxyStore"]
