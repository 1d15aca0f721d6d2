"""Store items in MongoDB with idempotent, batched upserts that survive outages.

Each item becomes a document whose ``_id`` is a key stable across redeliveries
(the request fingerprint of its ``url``, or a SHA1 of ``MONGO_KEY_FIELDS``).
``process_item`` returns only once the item's batch is durably written, so a
request is never acknowledged while one of its items sits in memory. Every
MongoDB operation is bounded by ``MONGO_TIMEOUT``; a failed write is retried
for ever unless the document itself can never be stored (``docs/delivery.md``).
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Awaitable, Callable
from functools import partial
from typing import TYPE_CHECKING, Any, Self

import bson
import pymongo
from bson.raw_bson import RawBSONDocument
from itemadapter import ItemAdapter
from pymongo import ASCENDING, IndexModel
from pymongo.errors import PyMongoError
from scrapy import Request
from scrapy.exceptions import DropItem, NotConfigured

from crawler.config import defaults
from crawler.config.readers import mask_url
from crawler.connections import shared
from crawler.connections.clients import ServiceUnavailable, check_mongo, mongo_client
from crawler.statusindex.config import IndexConfig
from crawler.statusindex.signals import ITEM_STORED
from crawler.storage.errors import describe
from crawler.storage.settings import StorageConfig
from crawler.storage.writer import (
    TRANSIENT_CODES,
    BatchWriter,
    is_transient,
    is_transient_write_error,
    rejects_document,
    retry_delay,
)

if TYPE_CHECKING:
    from pymongo import AsyncMongoClient
    from pymongo.asynchronous.collection import AsyncCollection
    from scrapy import Spider
    from scrapy.crawler import Crawler
    from scrapy.statscollectors import StatsCollector
    from scrapy.utils.request import RequestFingerprinterProtocol

# The batching and retry helpers live in crawler.storage.writer; importable from here too.
__all__ = ["TRANSIENT_CODES", "MongoPipeline", "is_transient", "is_transient_write_error",
           "rejects_document", "retry_delay"]

logger = logging.getLogger(__name__)

_DOC_LIMIT = 16 * 1024 * 1024  # until the server's hello says otherwise


def _stored_signal(crawler: Crawler) -> Callable[[Any, str, str], None]:
    def stored(item: Any, collection: str, key: str) -> None:
        crawler.signals.send_catch_log(ITEM_STORED, item=item, collection=collection, key=key)
    return stored


class MongoPipeline:
    """Upsert items into ``MONGO_DATABASE``.``<crawl id>`` in batches, exactly once."""

    def __init__(
        self, *, uri: str, collection: str, fingerprinter: RequestFingerprinterProtocol,
        stats: StatsCollector | None = None, database: str = defaults.MONGO_DATABASE,
        params: dict[str, Any] | None = None,
        batch_size: int = defaults.MONGO_BATCH_SIZE,
        batch_timeout: float = defaults.MONGO_BATCH_TIMEOUT,
        key_fields: list[str] | None = None,
        write_concern: str | int = defaults.MONGO_WRITE_CONCERN,
        journal: bool = defaults.MONGO_JOURNAL, indexes: list[str] | None = None,
        retry_backoff: float = defaults.MONGO_RETRY_BACKOFF,
        retry_backoff_max: float = defaults.MONGO_RETRY_BACKOFF_MAX,
        connect_timeout: float = defaults.CONNECT_TIMEOUT,
        timeout: float = defaults.MONGO_TIMEOUT,
        write_timeout: float = defaults.MONGO_WRITE_TIMEOUT,
        index_timeout: float = defaults.MONGO_INDEX_TIMEOUT,
        connect: Callable[[], AsyncMongoClient[dict[str, Any]]] | None = None,
        release: Callable[[AsyncMongoClient[dict[str, Any]]], Awaitable[None]] | None = None,
        stored: Callable[[Any, str, str], None] | None = None,
    ) -> None:
        """*connect* gives the client at :meth:`open_spider`, *release* takes it back at
        :meth:`close_spider`; by default the pipeline builds its own and closes it.
        *stored(item, collection, key)* hears of each item written (the status index)."""
        self.uri, self.database, self.collection_name = uri, database, collection
        self.params = dict(params or {})  # MONGO_PARAMS
        self.batch_size, self.batch_timeout = batch_size, batch_timeout
        self.key_fields = list(key_fields or defaults.MONGO_KEY_FIELDS)
        self.write_concern, self.journal = write_concern, journal
        self.indexes = list(defaults.MONGO_INDEXES if indexes is None else indexes)
        self.retry_backoff, self.retry_backoff_max = retry_backoff, retry_backoff_max
        self.connect_timeout, self.index_timeout = connect_timeout, index_timeout
        self.timeout, self.write_timeout = timeout, write_timeout
        self._fingerprinter = fingerprinter
        self._connect, self._release, self._stored = connect, release, stored
        self._client: AsyncMongoClient[dict[str, Any]] | None = None
        self._doc_limit = _DOC_LIMIT
        self._writer = BatchWriter(uri=uri, batch_size=batch_size, batch_timeout=batch_timeout,
                                   retry_backoff=retry_backoff,
                                   retry_backoff_max=retry_backoff_max, stats=stats)

    @property
    def _collection(self) -> AsyncCollection[dict[str, Any]] | None:
        return self._writer.collection

    @_collection.setter
    def _collection(self, collection: AsyncCollection[dict[str, Any]] | None) -> None:
        self._writer.collection = collection

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        cfg = StorageConfig.of(crawler)
        if cfg is None:
            raise NotConfigured("MongoPipeline needs MONGO_URI (setting or environment)")
        return cls(
            uri=cfg.uri, database=cfg.database, collection=cfg.crawl_id, params=cfg.params,
            fingerprinter=crawler.request_fingerprinter, stats=crawler.stats,
            batch_size=cfg.batch_size, batch_timeout=cfg.batch_timeout,
            key_fields=list(cfg.key_fields), write_concern=cfg.write_concern,
            journal=cfg.journal, indexes=list(cfg.indexes), retry_backoff=cfg.retry_backoff,
            retry_backoff_max=cfg.retry_backoff_max, connect_timeout=cfg.connect_timeout,
            timeout=cfg.timeout, write_timeout=cfg.write_timeout,
            index_timeout=cfg.index_timeout,
            connect=partial(shared.mongo_for, crawler),
            release=partial(shared.release_mongo, crawler),
            stored=_stored_signal(crawler) if IndexConfig.from_settings(
                crawler.settings).enabled else None,
        )

    async def open_spider(self, spider: Spider | None = None) -> None:
        """Connect, check the server answers and create the indexes."""
        client = self._new_client()
        try:
            await check_mongo(client, self.uri)
            hello = await client.admin.command("hello")
            collection = client[self.database][self.collection_name]
            await self._create_indexes(collection)
        except BaseException as exc:
            await self._give_back(client)
            if isinstance(exc, PyMongoError):
                raise ServiceUnavailable("MONGO_URI", self.uri, f"at start-up: {exc}") from exc
            raise
        self._doc_limit = int(hello.get("maxBsonObjectSize", _DOC_LIMIT))
        self._client, self._collection = client, collection
        logger.info("Storing items in MongoDB %s, collection %s.%s (batches of %d, w=%s)",
                    mask_url(self.uri), self.database, self.collection_name, self.batch_size,
                    self.write_concern)

    def _new_client(self) -> AsyncMongoClient[dict[str, Any]]:
        if self._connect is not None:
            return self._connect()
        return mongo_client(self.uri, params=self.params, connect_timeout=self.connect_timeout,
                            write_concern=self.write_concern, journal=self.journal,
                            timeout=self.timeout, write_timeout=self.write_timeout)

    async def _give_back(self, client: AsyncMongoClient[dict[str, Any]]) -> None:
        await (client.close() if self._release is None else self._release(client))

    async def _create_indexes(self, collection: AsyncCollection[dict[str, Any]]) -> None:
        """Create ``MONGO_INDEXES`` within ``MONGO_INDEX_TIMEOUT``, or fail with one line."""
        if not self.indexes:
            return
        try:
            with pymongo.timeout(self.index_timeout):
                await collection.create_indexes(
                    [IndexModel([(name, ASCENDING)]) for name in self.indexes])
        except PyMongoError as exc:
            raise ServiceUnavailable(
                "MONGO_URI", self.uri,
                f"creating the indexes {', '.join(self.indexes)} (MONGO_INDEXES) of "
                f"{self.database}.{self.collection_name} failed within "
                f"MONGO_INDEX_TIMEOUT={self.index_timeout:g} s: {describe(exc)}") from exc

    async def process_item(self, item: Any, spider: Spider | None = None) -> Any:
        """Return *item* once it is stored; raise DropItem if MongoDB cannot take it."""
        if self._collection is None:
            raise RuntimeError("MongoPipeline.process_item() called before open_spider()")
        adapter = ItemAdapter(item)
        key = self._key(adapter)
        await self._writer.add(key, self._encode(key, adapter))
        if self._stored is not None:
            self._stored(item, f"{self.database}.{self.collection_name}", key)
        return item

    async def close_spider(self, spider: Spider | None = None) -> None:
        """Write what is left, wait for it, and close the client."""
        await self._writer.close()
        if self._client is not None:
            client, self._client = self._client, None
            self._collection = None
            await self._give_back(client)

    def _key(self, adapter: ItemAdapter) -> str:
        missing = [name for name in self.key_fields if adapter.get(name) in (None, "")]
        if missing:
            raise DropItem(f"Item has no {', '.join(missing)}, which MONGO_KEY_FIELDS "
                           f"({', '.join(self.key_fields)}) needs for its MongoDB key")
        if self.key_fields == ["url"]:
            try:
                request = Request(str(adapter["url"]))
            except ValueError as exc:
                raise DropItem(f"Item url {adapter['url']!r} is not a valid URL: {exc}") from exc
            return self._fingerprinter.fingerprint(request).hex()
        values = {name: adapter[name] for name in self.key_fields}
        canonical = json.dumps(values, sort_keys=True, separators=(",", ":"),
                               ensure_ascii=False, default=str)
        return hashlib.sha1(canonical.encode("utf-8")).hexdigest()

    def _encode(self, key: str, adapter: ItemAdapter) -> RawBSONDocument:
        """The document, encoded once here so that a bad item cannot fail its batch."""
        fields = adapter.asdict()
        fields.pop("_id", None)
        try:
            data = bson.encode({"_id": key, **fields})
        except (bson.errors.BSONError, OverflowError) as exc:
            raise self._writer.reject(f"MongoDB cannot store the item {key}: {exc}") from exc
        if len(data) > self._doc_limit:
            raise self._writer.reject(f"MongoDB cannot store the item {key}: its document "
                                      f"is {len(data)} bytes, over the limit of {self._doc_limit}")
        return RawBSONDocument(data)
