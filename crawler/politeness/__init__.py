"""Politeness and resilience: retry backoff, rate limits shared by the cluster, proxies.

- :mod:`~crawler.politeness.backoff`: how each HTTP status and error is retried
  (:class:`RetryConfig`: the ``RETRY_*`` settings).
- :mod:`~crawler.politeness.tokenbucket` (pure logic) and
  :mod:`~crawler.politeness.ratelimiter` (its Redis store, :class:`RateLimitConfig`):
  per-domain rate limits.
- :mod:`~crawler.politeness.proxypool` (scoring, pure logic),
  :mod:`~crawler.politeness.proxystore` (the pool shared through Redis) and
  :mod:`~crawler.politeness.proxyconfig` (:class:`ProxyConfig`: the ``PROXY_*`` settings).
"""

from crawler.politeness.backoff import RetryConfig
from crawler.politeness.banpolicy import BanPolicy
from crawler.politeness.proxyconfig import ProxyConfig
from crawler.politeness.proxystore import ProxyStore, RedisProxyStore
from crawler.politeness.ratelimiter import RateLimitConfig

__all__ = ["BanPolicy", "ProxyConfig", "ProxyStore", "RateLimitConfig", "RedisProxyStore",
           "RetryConfig"]
