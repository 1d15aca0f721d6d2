"""The frontier's word to the crawl ledger: what became of each record it leased.

The last word about a lease's requests wins: a response's status class
(``response_received``), a component's :data:`~crawler.ledger.outcomes.OUTCOME` signal (an
ignored or failed download, a retry given up: that one sticks), the exception a download
ended with (:func:`~crawler._scrapy.on_download_failed`: also one a middleware raised from
``process_response``, such as the redirect limit), and the items its page gave
(``item_scraped``: stored, ``item_dropped``, ``item_error``). When the lease ends its
outcome goes to the ledger with the record's partition and offset, and the lease's ack
waits for the ledger's batch (:mod:`crawler.ledger.recorder`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from scrapy import Request, signals
from scrapy.http import Response

from crawler.frontier.leases import Lease, LeaseRegistry, Partition
from crawler.ledger import outcomes

#: worker stats whose growth the ledger counts as plain counters: how much work there was
STAT_COUNTERS = {
    "frontier/consumed": "records/consumed",  # deliveries: a redelivered record counts again
    "frontier/produced": "requests/produced",
    "bloom/filtered": "requests/filtered",
    "frontier/refused": "discarded/refused",
    "frontier/unencodable": "discarded/unencodable",
    "depth/request_ignored_count": "discarded/depth",
    "urllength/request_ignored_count": "discarded/url_length",
    "urltrap/path_repeats": "discarded/path_repeats",  # crawler.middlewares.canonical
    "offsite/filtered": "discarded/offsite",  # Scrapy's filter, when a request is scheduled
    "sitemap/too_old": "discarded/sitemap_too_old",
    "retry/count": "retries",
    "frontier/seeds_published": "seeds/published",
    "frontier/dead_lettered": "dead_lettered",
}
_ITEM_SIGNALS = ((signals.item_scraped, outcomes.ITEMS_STORED),
                 (signals.item_dropped, outcomes.ITEMS_DROPPED),
                 (signals.item_error, outcomes.ITEMS_ERROR))


class Tally(Protocol):
    """Where outcomes are counted (:class:`~crawler.ledger.recorder.LedgerRecorder`)."""

    def record(self, tp: Partition, offset: int, fields: dict[str, int]) -> None: ...
    def count(self, name: str, n: int = 1) -> None: ...


class Accounting:
    """Keeps each lease's outcome from Scrapy's signals and reports it when it ends."""

    def __init__(self, crawler: Any, leases: LeaseRegistry, tally: Tally) -> None:
        self.crawler, self.leases, self.tally = crawler, leases, tally
        #: what the status index keeps of a lease's last try (None: the index is off)
        self.details: Callable[[Request], dict[str, Any]] | None = None
        self._seen_stats: dict[str, int] = {}
        crawler.signals.connect(self._told, outcomes.OUTCOME)
        for signal, name in _ITEM_SIGNALS:
            crawler.signals.connect(self._item_handler(name), signal, weak=False)

    def response(self, request: Request, response: Response) -> None:
        lease = self.leases.of(request)
        if lease is None:
            return
        if self.details is not None:
            lease.details = {**self.details(request), "status": response.status}
            if lease.request is not None and response.url != lease.request.url:
                lease.details["redirected_to"] = response.url
        if lease.outcome != outcomes.RETRIES_EXHAUSTED:
            lease.outcome = outcomes.fetched(response.status)

    def _told(self, request: Request, outcome: str, **_: Any) -> None:
        lease = self.leases.of(request)
        if lease is not None and lease.outcome != outcomes.RETRIES_EXHAUSTED:
            lease.outcome = outcome

    def failed(self, request: Request, exception: BaseException) -> None:
        """*request*'s download ended with *exception* (hooked by the scheduler)."""
        lease = self.leases.of(request)
        if lease is not None and self.details is not None:
            lease.details = self.details(request)
        self._told(request, outcomes.of_exception(exception))

    def _item_handler(self, name: str) -> Any:
        def handler(response: Response | None = None, **_: Any) -> None:
            request = getattr(response, "request", None)
            lease = self.leases.of(request) if request is not None else None
            if lease is None:
                self.tally.count(name)  # an item of no leased page (a start-up item)
                return
            items = lease.items = lease.items or {}
            items[name] = items.get(name, 0) + 1
        return handler

    def ended(self, lease: Lease) -> None:
        """*lease* ended: its outcome joins the ledger's batch (call before its ack)."""
        fields = {lease.outcome or outcomes.UNKNOWN: 1, **(lease.items or {})}
        self.tally.record(lease.tp, lease.offset, fields)

    def stats_growth(self, stats: dict[str, Any]) -> None:
        """Count the growth of :data:`STAT_COUNTERS` since the last call."""
        for stat, name in STAT_COUNTERS.items():
            value = int(stats.get(stat) or 0)
            grown = value - self._seen_stats.get(stat, 0)
            if grown > 0:
                self.tally.count(name, grown)
                self._seen_stats[stat] = value
