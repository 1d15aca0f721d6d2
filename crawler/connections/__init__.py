"""Connections to the services: client construction, error classification, retries.

- :mod:`~crawler.connections.clients`: the Redis, MongoDB and Kafka clients, built one way,
  with :class:`ServiceUnavailable` for a service that cannot be reached at start-up.
- :mod:`~crawler.connections.redis_errors`: which Redis errors pass and which never will.
- :mod:`~crawler.connections.retry`: the one retry-until-it-works rule for Redis calls.
"""

from crawler.connections.clients import ServiceUnavailable, mongo_client, redis_client
from crawler.connections.retry import RedisRetry

__all__ = ["RedisRetry", "ServiceUnavailable", "mongo_client", "redis_client"]
