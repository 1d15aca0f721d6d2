"""A record of the requests that failed for good, next to the crawl's items.

Each failure is one document of ``MONGO_DATABASE``.``<CRAWL_ID>.failures``,
upserted under the request's fingerprint, so a request that fails again after a
redelivery replaces its document instead of adding one. :meth:`FailureStore.record`
returns only once the document is written: a MongoDB outage stalls it (transient
errors are retried for ever), so the request's lease is not acknowledged before
its failure is recorded.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Self

from pymongo.errors import OperationFailure, PyMongoError

from crawler import config, defaults
from crawler.config import mask_url
from crawler.connection import mongo_client
from crawler.pipelines.mongo import database_name, write_concern_setting
from crawler.pipelines.mongo_batch import is_transient, retry_delay

if TYPE_CHECKING:
    from pymongo import AsyncMongoClient
    from pymongo.asynchronous.collection import AsyncCollection
    from scrapy.crawler import Crawler
    from scrapy.statscollectors import StatsCollector

logger = logging.getLogger(__name__)

COLLECTION_SUFFIX = ".failures"


@dataclass(frozen=True)
class Failure:
    """A request that ran out of retries. *url* must carry no credentials."""

    fingerprint: str
    url: str
    reason: str
    attempts: int
    last_status: int | None
    failed_at: str

    @classmethod
    def now(cls, *, fingerprint: str, url: str, reason: str, attempts: int,
            last_status: int | None) -> Self:
        return cls(fingerprint, url, reason, attempts, last_status,
                   datetime.now(UTC).isoformat())

    def document(self) -> dict[str, Any]:
        fields = asdict(self)
        return {"_id": fields.pop("fingerprint"), **fields}


def _upsert_race(exc: PyMongoError) -> bool:
    """Two upserts of one ``_id`` raced (E11000 on ``_id``): trying again replaces."""
    return isinstance(exc, OperationFailure) and exc.code == 11000


class FailureStore:
    """Upserts :class:`Failure` documents; connects on first use."""

    def __init__(
        self, *, uri: str, database: str, collection: str,
        write_concern: str | int = defaults.MONGO_WRITE_CONCERN,
        journal: bool = defaults.MONGO_JOURNAL,
        retry_backoff: float = defaults.MONGO_RETRY_BACKOFF,
        retry_backoff_max: float = defaults.MONGO_RETRY_BACKOFF_MAX,
        connect_timeout: float = defaults.CONNECT_TIMEOUT,
        stats: StatsCollector | None = None,
    ) -> None:
        self.uri, self.database, self.collection_name = uri, database, collection
        self.write_concern, self.journal = write_concern, journal
        self.retry_backoff, self.retry_backoff_max = retry_backoff, retry_backoff_max
        self.connect_timeout = connect_timeout
        self._stats = stats
        self._client: AsyncMongoClient[dict[str, Any]] | None = None

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self | None:
        """The crawl's failure store, or ``None`` without ``MONGO_URI`` (single node)."""
        s = crawler.settings
        uri = config.get_str(s, "MONGO_URI")
        if not uri:
            return None
        spider = crawler.spider if crawler.spider is not None else crawler.spidercls
        backoff = config.get_float(s, "MONGO_RETRY_BACKOFF", minimum=0, exclusive_min=True)
        return cls(
            uri=uri, database=database_name(s),
            collection=config.crawl_id(s, spider.name) + COLLECTION_SUFFIX,
            write_concern=write_concern_setting(s), journal=config.get_bool(s, "MONGO_JOURNAL"),
            retry_backoff=backoff,
            retry_backoff_max=config.get_float(s, "MONGO_RETRY_BACKOFF_MAX", minimum=backoff),
            connect_timeout=config.get_float(s, "CONNECT_TIMEOUT", minimum=0, exclusive_min=True),
            stats=crawler.stats,
        )

    async def record(self, failure: Failure) -> bool:
        """Upsert *failure*; return once it is written (True) or cannot ever be (False).

        Transient errors (an outage, an upsert race) are retried with backoff for ever.
        """
        document = failure.document()
        attempt = 0
        while True:
            try:
                await self._collection().replace_one(
                    {"_id": document["_id"]}, document, upsert=True)
                break
            except PyMongoError as exc:
                if not (is_transient(exc) or _upsert_race(exc)):
                    self._inc("retry/failure_store_errors")
                    logger.error("Cannot record the failure of %s in MongoDB: %s",
                                 failure.url, exc)
                    return False
                self._retrying(attempt, exc)
            await asyncio.sleep(retry_delay(attempt, self.retry_backoff, self.retry_backoff_max))
            attempt += 1
        if attempt:
            logger.info("Recorded the failure of %s after %d retries", failure.url, attempt)
        self._inc("retry/failures_stored")
        return True

    async def close(self) -> None:
        if self._client is not None:
            client, self._client = self._client, None
            await client.close()

    def _collection(self) -> AsyncCollection[dict[str, Any]]:
        if self._client is None:  # builds a client; it connects on its first operation
            self._client = mongo_client(self.uri, connect_timeout=self.connect_timeout,
                                        write_concern=self.write_concern, journal=self.journal)
        return self._client[self.database][self.collection_name]

    def _retrying(self, attempt: int, error: PyMongoError) -> None:
        self._inc("retry/failure_store_retries")
        log = logger.warning if attempt == 0 else logger.debug
        log("Recording a failed request in MongoDB %s failed (%s); retrying until it "
            "succeeds: the request waits", mask_url(self.uri), error)

    def _inc(self, key: str) -> None:
        if self._stats is not None:
            self._stats.inc_value(key)
