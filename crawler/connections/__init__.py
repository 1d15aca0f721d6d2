"""Connections to the services: client construction, sharing, error classification, retries.

- :mod:`~crawler.connections.clients`: the Redis, MongoDB and Kafka clients, built one way,
  with :class:`ServiceUnavailable` for a service that cannot be reached at start-up
  (:mod:`~crawler.connections.unavailable`); the Kafka builders are written in
  :mod:`~crawler.connections.kafka_clients` and imported through ``clients``.
- :mod:`~crawler.connections.options`: the client settings, read once.
- :mod:`~crawler.connections.shared`: one Redis pool and one MongoDB client per crawler.
- :mod:`~crawler.connections.redis_errors`: which Redis errors pass and which never will.
- :mod:`~crawler.connections.retry`: the one retry-until-it-works loop and its backoff.
- :mod:`~crawler.connections.tasks`: background tasks, kept, logged and cancelled.
"""

from crawler.connections.clients import ServiceUnavailable, mongo_client, redis_client
from crawler.connections.retry import RedisRetry, RetryStopped, backoff, retry
from crawler.connections.shared import mongo_for, redis_for, release_mongo, release_redis
from crawler.connections.tasks import Tasks, every

__all__ = ["RedisRetry", "RetryStopped", "ServiceUnavailable", "Tasks", "backoff", "every",
           "mongo_client", "mongo_for", "redis_client", "redis_for", "release_mongo",
           "release_redis", "retry"]
