"""The crawl ledger: where every URL of a crawl went, counted in Redis for the whole cluster.

- :mod:`~crawler.ledger.outcomes`: the names of what becomes of a record, and the
  :data:`~crawler.ledger.outcomes.OUTCOME` signal components use to say it;
- :mod:`~crawler.ledger.recorder`: a worker's batches, written before their records' acks;
- :mod:`~crawler.ledger.report`: the reconciliation ``scrapy cluster report`` prints.
"""

from crawler.ledger.outcomes import OUTCOME, tell

__all__ = ["OUTCOME", "tell"]
