"""A record of the requests that failed for good, next to the crawl's items.

Each failure is one document of ``MONGO_DATABASE``.``<CRAWL_ID>.failures``,
upserted under the request's fingerprint, so a request that fails again after a
redelivery replaces its document instead of adding one. :meth:`FailureStore.record`
returns only once the document is written: every MongoDB error but one that
rejects the document itself is retried for ever (an outage, ``Unauthorized``, a
full disk: see ``docs/delivery.md``), so the request's lease is not acknowledged
before its failure is recorded.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from functools import partial
from typing import TYPE_CHECKING, Any, Protocol, Self

from pymongo.errors import OperationFailure, PyMongoError, WriteError

from crawler.config import defaults
from crawler.config.readers import mask_url
from crawler.connections import shared
from crawler.connections.clients import mongo_client
from crawler.connections.retry import retry
from crawler.storage.errors import describe, rejects_document
from crawler.storage.settings import StorageConfig
from crawler.storage.writer import is_transient, retry_delay

if TYPE_CHECKING:
    from pymongo import AsyncMongoClient
    from pymongo.asynchronous.collection import AsyncCollection
    from scrapy.crawler import Crawler
    from scrapy.statscollectors import StatsCollector

logger = logging.getLogger(__name__)

COLLECTION_SUFFIX = ".failures"


class Stored(Protocol):
    """A record the store writes: its URL (for the log) and its document."""

    @property
    def url(self) -> str: ...

    def document(self) -> dict[str, Any]: ...


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


def _rejected(exc: PyMongoError) -> bool:
    """Whether the failure's document itself can never be stored (an E11000 is a race)."""
    if not isinstance(exc, OperationFailure) or exc.code == 11000:
        return False
    details = exc.details if isinstance(exc, WriteError) and exc.details else {"code": exc.code}
    return rejects_document(details)


def _retried(exc: Exception) -> bool:
    """Every error but a rejection of the document is retried."""
    return not (isinstance(exc, PyMongoError) and _rejected(exc))


class FailureStore:
    """Upserts :class:`Failure` documents (or any :class:`Stored` record, as
    :mod:`crawler.storage.rejected` does); connects on first use."""

    def __init__(
        self, *, uri: str, database: str, collection: str, params: dict[str, Any] | None = None,
        write_concern: str | int = defaults.MONGO_WRITE_CONCERN,
        journal: bool = defaults.MONGO_JOURNAL,
        retry_backoff: float = defaults.MONGO_RETRY_BACKOFF,
        retry_backoff_max: float = defaults.MONGO_RETRY_BACKOFF_MAX,
        connect_timeout: float = defaults.CONNECT_TIMEOUT,
        timeout: float = defaults.MONGO_TIMEOUT,
        write_timeout: float = defaults.MONGO_WRITE_TIMEOUT,
        stats: StatsCollector | None = None,
        connect: Callable[[], AsyncMongoClient[dict[str, Any]]] | None = None,
        release: Callable[[AsyncMongoClient[dict[str, Any]]], Awaitable[None]] | None = None,
        what: str = "request",
    ) -> None:
        r"""*connect* gives the client on first use, *release* takes it back at :meth:`close`;
        by default the store builds its own and closes it. *what* the records are of (the
        log's and the stats' words: ``request`` failures, rejected ``item``\ s)."""
        self.uri, self.database, self.collection_name = uri, database, collection
        self.params = dict(params or {})  # MONGO_PARAMS
        self.write_concern, self.journal = write_concern, journal
        self.retry_backoff, self.retry_backoff_max = retry_backoff, retry_backoff_max
        self.connect_timeout, self.timeout = connect_timeout, timeout
        self.write_timeout = write_timeout
        self._stats = stats
        self._noun = "failure" if what == "request" else f"rejected {what}"
        self._stat_names = (("retry/failure_store_errors", "retry/failures_stored",
                             "retry/failure_store_retries") if what == "request" else
                            ("rejected/store_errors", "rejected/stored", "rejected/store_retries"))
        self._connect, self._release = connect, release
        self._client: AsyncMongoClient[dict[str, Any]] | None = None

    @classmethod
    def from_crawler(cls, crawler: Crawler, *, suffix: str = COLLECTION_SUFFIX,
                     what: str = "request") -> Self | None:
        """The crawl's failure store (*suffix*: of another collection of records, of
        *what*), or ``None`` without ``MONGO_URI`` (single node)."""
        cfg = StorageConfig.of(crawler)
        if cfg is None:
            return None
        return cls(
            uri=cfg.uri, database=cfg.database, collection=cfg.crawl_id + suffix, what=what,
            params=cfg.params,
            write_concern=cfg.write_concern, journal=cfg.journal,
            retry_backoff=cfg.retry_backoff, retry_backoff_max=cfg.retry_backoff_max,
            connect_timeout=cfg.connect_timeout, timeout=cfg.timeout,
            write_timeout=cfg.write_timeout, stats=crawler.stats,
            connect=partial(shared.mongo_for, crawler),
            release=partial(shared.release_mongo, crawler),
        )

    async def record(self, failure: Stored) -> bool:
        """Upsert *failure*; return once it is written (True) or cannot ever be (False).

        Every error but a rejection of the document is retried with backoff for ever.
        """
        document = failure.document()
        attempts = 0

        def retrying(exc: Exception, attempt: int, _delay: float) -> None:
            nonlocal attempts
            attempts = attempt + 1
            assert isinstance(exc, PyMongoError)
            self._retrying(attempt, exc)

        try:
            await retry(lambda: self._collection().replace_one(
                            {"_id": document["_id"]}, document, upsert=True),
                        errors=(PyMongoError,), is_transient=_retried, on_retry=retrying,
                        base=self.retry_backoff, cap=self.retry_backoff_max)
        except PyMongoError as exc:  # the document itself can never be stored
            self._inc(self._stat_names[0])
            logger.error("Cannot record the %s of %s in MongoDB: %s", self._noun, failure.url,
                         describe(exc))
            return False
        if attempts:
            logger.info("Recorded the %s of %s after %d retries", self._noun, failure.url,
                        attempts)
        self._inc(self._stat_names[1])
        return True

    async def close(self) -> None:
        if self._client is not None:
            client, self._client = self._client, None
            await (client.close() if self._release is None else self._release(client))

    def _collection(self) -> AsyncCollection[dict[str, Any]]:
        if self._client is None:  # builds a client; it connects on its first operation
            self._client = self._connect() if self._connect is not None else mongo_client(
                self.uri, params=self.params, connect_timeout=self.connect_timeout,
                write_concern=self.write_concern, journal=self.journal, timeout=self.timeout,
                write_timeout=self.write_timeout)
        return self._client[self.database][self.collection_name]

    def _retrying(self, attempt: int, error: PyMongoError) -> None:
        """One line per retry (they thin out with the backoff): WARNING for an outage."""
        self._inc(self._stat_names[2])
        transient = is_transient(error) or getattr(error, "code", None) == 11000
        log = logger.warning if transient else logger.error
        log("Recording a %s in MongoDB %s failed (%s); retrying until it "
            "succeeds, next in %.1f s: the request waits", self._noun, mask_url(self.uri),
            describe(error),
            retry_delay(attempt, self.retry_backoff, self.retry_backoff_max))

    def _inc(self, key: str) -> None:
        if self._stats is not None:
            self._stats.inc_value(key)
