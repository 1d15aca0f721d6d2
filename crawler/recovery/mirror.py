"""A durable copy, in MongoDB, of the small crawl state Redis holds and cannot rebuild.

Redis keeps the crawl's seed key and its finished record; a Redis that comes back empty
forgets both. The crawl's MongoDB database keeps a copy in ``<CRAWL_ID>.state`` (one document
each, ``_id`` ``seed_key`` and ``finished``), written when Redis is, and read back by the
repair (:mod:`crawler.recovery.guard`). MongoDB is the crawl's store of record, behind the
same credentials as Redis; the key is never logged nor put in stats.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from crawler.frontier.crawllife import Finished

if TYPE_CHECKING:
    from pymongo.asynchronous.collection import AsyncCollection

logger = logging.getLogger(__name__)
SUFFIX = ".state"


@dataclass(frozen=True)
class Mirrored:
    """What the copy holds: the seed key (bytes, as Redis held it) and the finished record."""

    seed_key: bytes | None = None
    finished: Finished | None = None

    @property
    def kept(self) -> bool:
        """Whether the crawl ran with a copy kept (and was not purged since)."""
        return self.seed_key is not None or self.finished is not None


def collection_of(crawl_id: str) -> str:
    """The crawl's state copy's collection: ``<CRAWL_ID>.state``."""
    return crawl_id + SUFFIX


class StateMirror:
    """The copy of crawl *crawl*'s seed key and finished record in *collection*."""

    def __init__(self, collection: AsyncCollection[dict[str, Any]]) -> None:
        self.collection = collection

    async def save_seed_key(self, key: bytes) -> None:
        """Keep the first key the crawl had (a key is never replaced)."""
        await self.collection.update_one({"_id": "seed_key"},
                                         {"$setOnInsert": {"key": key.decode()}}, upsert=True)

    async def save_finished(self, record: Finished) -> None:
        await self.collection.replace_one({"_id": "finished"}, asdict(record), upsert=True)

    async def forget_finished(self) -> None:
        await self.collection.delete_one({"_id": "finished"})

    async def load(self) -> Mirrored:
        docs = {doc["_id"]: doc async for doc in self.collection.find({})}
        key = docs.get("seed_key", {}).get("key")
        done = docs.get("finished")
        started = None if done is None else done.get("started")
        finished = None if done is None else Finished(
            float(done["at"]), float(done["closed"]), str(done.get("reason") or "finished"),
            None if started is None else float(started))
        return Mirrored(key.encode() if isinstance(key, str) else None, finished)


async def purge(settings: Any, crawl_id: str) -> bool:
    """Drop crawl *crawl_id*'s state copy and its status index (``scrapy cluster purge``):
    run again, the crawl starts anew instead of being taken for one whose Redis lost its
    state, and no URL answers for the old run. False without MongoDB settings."""
    from crawler.connections.clients import mongo_client_from
    from crawler.connections.options import MongoOptions
    from crawler.statusindex import collection_of as urls_of
    from crawler.storage.settings import StorageConfig

    storage = StorageConfig.from_settings(settings, crawl_id)
    if storage is None:
        return False
    client = mongo_client_from(MongoOptions.from_settings(settings))
    try:
        database = client[storage.database]
        await database.drop_collection(collection_of(crawl_id))
        await database.drop_collection(urls_of(crawl_id))
    finally:
        await client.close()
    return True

