"""Storage: items and failure records written to MongoDB, idempotently and durably.

- :mod:`~crawler.storage.writer`: batched upserts that stall and retry through outages.
- :mod:`~crawler.storage.errors`: which MongoDB errors pass and which never will.
- :mod:`~crawler.storage.failures`: one record per URL given up, with its reason.
- :mod:`~crawler.storage.settings`: the MongoDB settings, read one way.
"""

from crawler.storage.failures import Failure, FailureStore
from crawler.storage.writer import BatchWriter

__all__ = ["BatchWriter", "Failure", "FailureStore"]
