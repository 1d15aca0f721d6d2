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

from crawler.frontier.delay import delayed
from crawler.frontier.scheduler import KafkaScheduler

__all__ = ["KafkaScheduler", "delayed"]
