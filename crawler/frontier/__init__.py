"""The frontier: requests flow through Kafka topics shared by every worker of a crawl.

- :mod:`~crawler.frontier.scheduler`: :class:`KafkaScheduler`, Scrapy's adapter.
- :mod:`~crawler.frontier.consumer` and :mod:`~crawler.frontier.producer`: the Kafka
  consumer loop and sender, in their own threads.
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
