"""The frontier: requests flow through Kafka topics shared by every worker of a crawl.

- :mod:`~crawler.frontier.scheduler`: :class:`KafkaScheduler`, Scrapy's adapter; its
  records in and out are :mod:`~crawler.frontier.records`.
- :mod:`~crawler.frontier.transport`: the consumer and producer Protocols the scheduler
  talks to. :mod:`~crawler.frontier.clients` builds the Kafka ones
  (:mod:`~crawler.frontier.consumer` and :mod:`~crawler.frontier.producer`: the consumer
  loop and sender, in their own threads); :mod:`~crawler.frontier.memory` keeps records,
  dedup and crawl state in memory, for tests without a broker or Redis.
- :mod:`~crawler.frontier.lifecycle`: the worker's heartbeat, operator control, lag,
  lease expiry and close.
- :mod:`~crawler.frontier.leases`: a consumed record is a lease, acknowledged only after
  its follow-ups are durably produced; :mod:`~crawler.frontier.buffer`,
  :mod:`~crawler.frontier.outbox`, :mod:`~crawler.frontier.codec`,
  :mod:`~crawler.frontier.seeding`, :mod:`~crawler.frontier.recent`.
- :mod:`~crawler.frontier.completion`, :mod:`~crawler.frontier.crawlstate` and
  :mod:`~crawler.frontier.crawllife`: heartbeats, completion and a crawl's lifetime.
- :mod:`~crawler.frontier.delay`: :func:`delayed`, for middlewares that want a request
  scheduled later without holding a download slot.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from crawler.frontier.delay import delayed

if TYPE_CHECKING:
    from crawler.frontier.scheduler import KafkaScheduler

__all__ = ["KafkaScheduler", "delayed"]


def __getattr__(name: str) -> Any:
    """``KafkaScheduler`` is imported when it is first asked for, not with the package: the
    ledger imports this package's crawl-state modules, and the scheduler imports the ledger,
    so an eager import here made ``import crawler.ledger.balance`` (or the metrics
    extension, before the frontier) fail with a circular import."""
    if name == "KafkaScheduler":
        from crawler.frontier.scheduler import KafkaScheduler

        return KafkaScheduler
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
