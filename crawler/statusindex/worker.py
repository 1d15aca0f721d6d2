"""A distributed worker's status index: opened with the frontier, closed after its acks.

:func:`open_index` connects the index (``STATUS_INDEX_ENABLED``; the crawl's MongoDB, the
worker's shared client) to the frontier's leases, accounting and outbox.
"""

from __future__ import annotations

import logging
from typing import Any

from crawler.connections import shared
from crawler.connections.clients import ServiceUnavailable
from crawler.frontier.leases import AckBarrier
from crawler.statusindex.config import IndexConfig, collection_of
from crawler.statusindex.hooks import IndexHooks, fetch_details
from crawler.statusindex.writer import StatusIndex
from crawler.storage.settings import StorageConfig

logger = logging.getLogger(__name__)


class WorkerIndex:
    """The index of one worker, and the MongoDB client it holds."""

    def __init__(self, crawler: Any, index: StatusIndex, client: Any) -> None:
        self.crawler, self.index, self.client = crawler, index, client
        self.hooks: IndexHooks | None = None

    def attach(self, *, worker: str, accounting: Any, outbox: Any) -> None:
        """Hear the frontier's events (call before any record is consumed)."""
        self.hooks = IndexHooks(self.crawler, self.index, worker)
        accounting.details = fetch_details
        outbox.queued = self.hooks.queued

    async def close(self, timeout: float) -> None:
        try:
            await self.index.close(timeout)
        finally:
            await shared.release_mongo(self.crawler, self.client)
        self.crawler.stats.set_value("statusindex/events", self.index.written)
        self.crawler.stats.set_value("statusindex/batches", self.index.batches)


async def open_index(crawler: Any, crawl_id: str, barrier: AckBarrier) -> WorkerIndex | None:
    """The worker's index, writing (then :meth:`WorkerIndex.attach`); None when
    ``STATUS_INDEX_ENABLED`` is off."""
    cfg = IndexConfig.from_settings(crawler.settings)
    storage = StorageConfig.from_settings(crawler.settings, crawl_id)
    if not cfg.enabled or storage is None:
        return None
    client = shared.mongo_for(crawler)
    collection = client[storage.database][collection_of(crawl_id)]
    index = StatusIndex(collection, barrier, ttl=cfg.ttl, interval=cfg.interval)
    try:
        await index.open()
    except Exception as exc:
        await shared.release_mongo(crawler, client)
        raise ServiceUnavailable("MONGO_URI", storage.uri,
                                 f"creating the status index {collection.full_name}: {exc}"
                                 ) from exc
    logger.info("Status index: %s (STATUS_INDEX_TTL %g s)", collection.full_name, cfg.ttl)
    return WorkerIndex(crawler, index, client)
