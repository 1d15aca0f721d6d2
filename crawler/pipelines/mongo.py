"""Store items in MongoDB with idempotent, batched upserts that survive outages.

Each item becomes a document whose ``_id`` is a key stable across redeliveries
(the request fingerprint of its ``url``, or a SHA1 of ``MONGO_KEY_FIELDS``).
``process_item`` returns only once the item's batch is durably written, so a
request is never acknowledged while one of its items sits in memory.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import time
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Self

import bson
from bson.raw_bson import RawBSONDocument
from itemadapter import ItemAdapter
from pymongo import ASCENDING, IndexModel, ReplaceOne
from pymongo.errors import (
    BulkWriteError,
    ConnectionFailure,
    OperationFailure,
    PyMongoError,
    WriteConcernError,
)
from scrapy import Request
from scrapy.exceptions import DropItem, NotConfigured

from crawler import config, defaults
from crawler.config import SettingError, mask_url
from crawler.connection import ServiceUnavailable, check_mongo, mongo_client

if TYPE_CHECKING:
    from collections.abc import Mapping

    from pymongo import AsyncMongoClient
    from pymongo.asynchronous.collection import AsyncCollection
    from scrapy import Spider
    from scrapy.crawler import Crawler
    from scrapy.settings import BaseSettings
    from scrapy.statscollectors import StatsCollector
    from scrapy.utils.request import RequestFingerprinterProtocol

logger = logging.getLogger(__name__)

#: server error codes worth retrying: not primary, shutting down, network, timeouts
TRANSIENT_CODES = frozenset(
    {6, 7, 24, 50, 64, 89, 91, 112, 134, 189, 262, 9001, 10058, 10107, 11600, 11602, 13435,
     13436}
)
_DOC_LIMIT = 16 * 1024 * 1024  # until the server's hello says otherwise


def retry_delay(attempt: int, base: float, cap: float) -> float:
    """Seconds to wait before retry number *attempt* (0-based): doubling, capped."""
    return min(cap, base * 2 ** min(attempt, 32))


def is_transient(exc: BaseException) -> bool:
    """Whether a failed bulk write (other than a ``BulkWriteError``) may succeed later."""
    if isinstance(exc, (ConnectionFailure, WriteConcernError)):
        return True  # includes AutoReconnect, NetworkTimeout, NotPrimary, server selection
    if isinstance(exc, OperationFailure):
        return exc.code in TRANSIENT_CODES or exc.has_error_label("RetryableWriteError")
    return False


def is_transient_write_error(error: dict[str, Any]) -> bool:
    """Whether one ``writeErrors`` entry of a bulk write may succeed when retried."""
    if error.get("code") == 11000:  # two upserts of one _id raced: the retry replaces
        return error.get("keyPattern") == {"_id": 1} or "index: _id_ " in error.get("errmsg", "")
    return error.get("code") in TRANSIENT_CODES


@dataclass
class _Batch:
    """Documents waiting for one bulk write; the newest document of a key wins."""

    keys: list[str] = field(default_factory=list)
    ops: list[ReplaceOne[Any]] = field(default_factory=list)
    waiters: list[list[asyncio.Future[None]]] = field(default_factory=list)
    positions: dict[str, int] = field(default_factory=dict)
    timer: asyncio.TimerHandle | None = None

    def add(self, key: str, doc: RawBSONDocument, waiter: asyncio.Future[None]) -> None:
        op: ReplaceOne[Any] = ReplaceOne({"_id": key}, doc, upsert=True)
        position = self.positions.get(key)
        if position is None:
            self.positions[key] = len(self.ops)
            self.keys.append(key)
            self.ops.append(op)
            self.waiters.append([waiter])
        else:
            self.ops[position] = op
            self.waiters[position].append(waiter)

    def settle(self, position: int, error: BaseException | None = None) -> None:
        for waiter in (w for w in self.waiters[position] if not w.done()):
            if error is None:
                waiter.set_result(None)
            else:
                waiter.set_exception(error)


class MongoPipeline:
    """Upsert items into ``MONGO_DATABASE``.``<crawl id>`` in batches, exactly once."""

    def __init__(
        self, *, uri: str, collection: str, fingerprinter: RequestFingerprinterProtocol,
        stats: StatsCollector | None = None, database: str = defaults.MONGO_DATABASE,
        batch_size: int = defaults.MONGO_BATCH_SIZE,
        batch_timeout: float = defaults.MONGO_BATCH_TIMEOUT,
        key_fields: list[str] | None = None,
        write_concern: str | int = defaults.MONGO_WRITE_CONCERN,
        journal: bool = defaults.MONGO_JOURNAL, indexes: list[str] | None = None,
        retry_backoff: float = defaults.MONGO_RETRY_BACKOFF,
        retry_backoff_max: float = defaults.MONGO_RETRY_BACKOFF_MAX,
        connect_timeout: float = defaults.CONNECT_TIMEOUT,
    ) -> None:
        self.uri, self.database, self.collection_name = uri, database, collection
        self.batch_size, self.batch_timeout = batch_size, batch_timeout
        self.key_fields = list(key_fields or defaults.MONGO_KEY_FIELDS)
        self.write_concern, self.journal = write_concern, journal
        self.indexes = list(defaults.MONGO_INDEXES if indexes is None else indexes)
        self.retry_backoff, self.retry_backoff_max = retry_backoff, retry_backoff_max
        self.connect_timeout = connect_timeout
        self._fingerprinter, self._stats = fingerprinter, stats
        self._client: AsyncMongoClient[dict[str, Any]] | None = None
        self._collection: AsyncCollection[dict[str, Any]] | None = None
        self._doc_limit = _DOC_LIMIT
        self._batch = _Batch()
        self._sealed: deque[_Batch] = deque()
        self._writer: asyncio.Task[None] | None = None
        self._outage_since: float | None = None

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        s = crawler.settings
        uri = config.get_str(s, "MONGO_URI")
        if not uri:
            raise NotConfigured("MongoPipeline needs MONGO_URI (setting or environment)")
        spider = crawler.spider if crawler.spider is not None else crawler.spidercls
        key_fields = config.get_list(s, "MONGO_KEY_FIELDS")
        if not key_fields:
            raise SettingError("MONGO_KEY_FIELDS", "expected at least one field name")
        backoff = config.get_float(s, "MONGO_RETRY_BACKOFF", minimum=0, exclusive_min=True)
        return cls(
            uri=uri, database=_database(s), collection=config.crawl_id(s, spider.name),
            fingerprinter=crawler.request_fingerprinter, stats=crawler.stats,
            batch_size=config.get_int(s, "MONGO_BATCH_SIZE", minimum=1),
            batch_timeout=config.get_float(s, "MONGO_BATCH_TIMEOUT", minimum=0,
                                           exclusive_min=True),
            key_fields=key_fields, write_concern=_write_concern(s),
            journal=config.get_bool(s, "MONGO_JOURNAL"),
            indexes=config.get_list(s, "MONGO_INDEXES"), retry_backoff=backoff,
            retry_backoff_max=config.get_float(s, "MONGO_RETRY_BACKOFF_MAX", minimum=backoff),
            connect_timeout=config.get_float(s, "CONNECT_TIMEOUT", minimum=0, exclusive_min=True),
        )

    async def open_spider(self, spider: Spider | None = None) -> None:
        """Connect, check the server answers and create the indexes."""
        client = mongo_client(self.uri, connect_timeout=self.connect_timeout,
                              write_concern=self.write_concern, journal=self.journal)
        try:
            await check_mongo(client, self.uri)
            hello = await client.admin.command("hello")
            collection = client[self.database][self.collection_name]
            if self.indexes:
                await collection.create_indexes(
                    [IndexModel([(name, ASCENDING)]) for name in self.indexes])
        except BaseException as exc:
            await client.close()
            if isinstance(exc, PyMongoError):
                raise ServiceUnavailable("MONGO_URI", self.uri, f"at start-up: {exc}") from exc
            raise
        self._doc_limit = int(hello.get("maxBsonObjectSize", _DOC_LIMIT))
        self._client, self._collection = client, collection
        logger.info("Storing items in MongoDB %s, collection %s.%s (batches of %d, w=%s)",
                    mask_url(self.uri), self.database, self.collection_name, self.batch_size,
                    self.write_concern)

    async def process_item(self, item: Any, spider: Spider | None = None) -> Any:
        """Return *item* once it is stored; raise DropItem if MongoDB cannot take it."""
        if self._collection is None:
            raise RuntimeError("MongoPipeline.process_item() called before open_spider()")
        adapter = ItemAdapter(item)
        key = self._key(adapter)
        doc = self._encode(key, adapter)
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._batch.add(key, doc, waiter)
        if len(self._batch.ops) >= self.batch_size:
            self._seal()
        elif self._batch.timer is None:
            self._batch.timer = asyncio.get_running_loop().call_later(
                self.batch_timeout, self._seal_if_current, self._batch)
        await waiter
        return item

    async def close_spider(self, spider: Spider | None = None) -> None:
        """Write what is left, wait for it, and close the client."""
        self._seal()
        if self._writer is not None:
            await self._writer
        if self._client is not None:
            await self._client.close()
            self._client = self._collection = None

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
            raise self._reject(f"MongoDB cannot store the item {key}: {exc}") from exc
        if len(data) > self._doc_limit:
            raise self._reject(f"MongoDB cannot store the item {key}: its document is "
                               f"{len(data)} bytes, over the limit of {self._doc_limit}")
        return RawBSONDocument(data)

    def _reject(self, reason: str) -> DropItem:
        self._inc("mongo/rejected")
        return DropItem(reason)

    def _seal_if_current(self, batch: _Batch) -> None:
        if batch is self._batch:
            self._seal()

    def _seal(self) -> None:
        batch, self._batch = self._batch, _Batch()
        if batch.timer is not None:
            batch.timer.cancel()
        if not batch.ops:
            return
        self._sealed.append(batch)
        if self._writer is None or self._writer.done():
            self._writer = asyncio.get_running_loop().create_task(self._drain())

    async def _drain(self) -> None:
        """Write the sealed batches one after the other, so the newest content wins."""
        while self._sealed:
            batch = self._sealed.popleft()
            try:
                await self._write(batch)
            except BaseException as exc:  # an unknown error, or cancellation at shutdown
                logger.error("MongoDB write of %d items failed: %r", len(batch.ops), exc)
                for position in range(len(batch.ops)):
                    batch.settle(position, exc)
                if not isinstance(exc, Exception):
                    raise

    async def _write(self, batch: _Batch) -> None:
        assert self._collection is not None
        todo, attempt = list(range(len(batch.ops))), 0
        while todo:
            try:
                result = await self._collection.bulk_write(
                    [batch.ops[i] for i in todo], ordered=False)
            except BulkWriteError as exc:
                todo = self._partial(batch, todo, exc.details)
            except PyMongoError as exc:
                if not is_transient(exc):
                    raise
                self._failed(exc)
            else:
                stored = (result.upserted_count + result.matched_count
                          if result.acknowledged else len(todo))
                self._stored(batch, todo, stored)
                todo = []
            if todo:
                await asyncio.sleep(retry_delay(attempt, self.retry_backoff,
                                                self.retry_backoff_max))
                attempt += 1
        self._inc("mongo/batches")
        if self._outage_since is not None:
            logger.info("MongoDB writes succeed again after %.1f s (%d retries of this batch)",
                        time.monotonic() - self._outage_since, attempt)
            self._outage_since = None

    def _partial(self, batch: _Batch, todo: list[int], details: Mapping[str, Any]) -> list[int]:
        """Reject the permanent failures of a bulk write; return what to write again."""
        failed: set[int] = set()
        retry: list[int] = []
        for error in details.get("writeErrors", []):
            position = todo[error["index"]]
            failed.add(position)
            if is_transient_write_error(error):
                retry.append(position)
            else:
                reason = (f"MongoDB rejected the item {batch.keys[position]}: "
                          f"{error.get('errmsg')} (code {error.get('code')})")
                batch.settle(position, self._reject(reason))
        if details.get("writeConcernErrors"):  # applied, not confirmed: write them again
            self._failed(details["writeConcernErrors"][0].get("errmsg"))
            return [i for i in todo if i not in failed or i in retry]
        done = [i for i in todo if i not in failed]
        self._stored(batch, done, details.get("nUpserted", 0) + details.get("nMatched", 0))
        if retry:
            self._failed(f"{len(retry)} transient write errors")
        return retry

    def _stored(self, batch: _Batch, positions: list[int], count: int) -> None:
        for position in positions:
            batch.settle(position)
        self._inc("mongo/stored", count)

    def _failed(self, error: object) -> None:
        self._inc("mongo/retries")
        if self._outage_since is None:
            self._outage_since = time.monotonic()
            logger.warning("MongoDB writes to %s fail (%s); retrying until they succeed: the "
                           "crawl waits, no item is dropped", mask_url(self.uri), error)
        else:
            logger.debug("MongoDB write failed again: %s", error)

    def _inc(self, key: str, count: int = 1) -> None:
        if self._stats is not None:
            self._stats.inc_value(key, count)


def _database(settings: BaseSettings) -> str:
    name = config.get_str(settings, "MONGO_DATABASE")
    if not name or any(char in name for char in '/\\. "$\0') or len(name) > 63:
        raise SettingError("MONGO_DATABASE", f"{name!r} is not a valid MongoDB database name")
    return name


def _write_concern(settings: BaseSettings) -> str | int:
    value = config.raw(settings, "MONGO_WRITE_CONCERN")
    if isinstance(value, str) and value.strip().lower() == "majority":
        return "majority"
    number = -1
    if not isinstance(value, bool):
        try:
            number = int(str(value).strip())
        except ValueError:
            pass
    if number < 0:
        raise SettingError("MONGO_WRITE_CONCERN",
                           f'expected "majority" or an integer >= 0, got {value!r}')
    if number == 0 and config.get_bool(settings, "MONGO_JOURNAL"):
        raise SettingError("MONGO_WRITE_CONCERN",
                           "0 (unacknowledged writes) cannot be combined with MONGO_JOURNAL=True")
    return number
