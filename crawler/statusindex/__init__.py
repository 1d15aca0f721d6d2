"""The per-URL status index: what happened to each URL of a crawl (``docs/trace.md``).

A worker records its URLs' events (:mod:`~crawler.statusindex.hooks`) in batches
(:class:`~crawler.statusindex.writer.StatusIndex`, opened by
:func:`~crawler.statusindex.worker.open_index`) in the MongoDB collection
``<CRAWL_ID>.urls``; ``scrapy cluster trace`` reads them (:mod:`crawler.operations.trace`).
Components tell it of drops and stores through :mod:`~crawler.statusindex.signals`.
"""

from crawler.statusindex.config import IndexConfig, collection_of
from crawler.statusindex.signals import ITEM_STORED, URL_FILTERED, filtered

__all__ = ["ITEM_STORED", "URL_FILTERED", "IndexConfig", "collection_of", "filtered"]
