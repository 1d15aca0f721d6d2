"""Where a worker's URL events come from.

- A lease ends (:meth:`IndexHooks.ended`): its outcome (:mod:`crawler.ledger.outcomes`)
  becomes ``fetched`` (status, attempts, proxy), ``failed`` or ``filtered`` (the reason),
  ``dead-lettered`` or ``requeued``, with the record's topic, partition and offset.
- A follow-up request is in the broker (:meth:`IndexHooks.queued`): ``discovered`` (the
  page that linked it) and ``queued`` (topic, partition, offset).
- A link is dropped before the frontier (:data:`~crawler.statusindex.signals.URL_FILTERED`):
  ``filtered`` with the reason and the page that linked it.
- An item is stored (:data:`~crawler.statusindex.signals.ITEM_STORED`, then Scrapy's
  ``item_scraped``): ``stored`` with the collection and the document id.
"""

from __future__ import annotations

from typing import Any

from scrapy import Request, signals
from scrapy.http import Response

from crawler.config.readers import mask_url
from crawler.frontier.leases import Lease
from crawler.ledger import outcomes
from crawler.statusindex import events as ev
from crawler.statusindex.signals import ITEM_STORED, URL_FILTERED
from crawler.statusindex.writer import StatusIndex


def _referer(request: Request) -> str | None:
    value = request.headers.get(b"Referer")
    return value.decode("utf-8", "replace") if value else None


def fetch_details(request: Request) -> dict[str, Any]:
    """The attempts and the proxy (its secrets masked) of *request*'s last try."""
    found: dict[str, Any] = {"attempts": int(request.meta.get("retry_times", 0)) + 1}
    proxy = request.meta.get("proxy")
    if proxy:
        found["proxy"] = mask_url(proxy)
    return found


def ended_event(lease: Lease, worker: str) -> ev.Event | None:
    """The event of a lease that ended with its outcome; None for one that says nothing."""
    outcome, where = lease.outcome, {"topic": lease.topic, "partition": lease.partition,
                                     "offset": lease.offset}
    details = lease.details or {}
    if outcome.startswith(outcomes.FETCHED):
        return ev.event(ev.FETCHED, worker, **details, **where)
    if outcome.startswith(outcomes.FAILED):
        return ev.event(ev.FAILED, worker, reason=outcome[len(outcomes.FAILED):],
                        **details, **where)
    if outcome.startswith(outcomes.DROPPED):
        return ev.event(ev.FILTERED, worker, reason=outcome[len(outcomes.DROPPED):], **where)
    if outcome in (outcomes.SEED_DUPLICATE, outcomes.SEED_OUT_OF_SCOPE):
        return ev.event(ev.FILTERED, worker, reason=outcome.replace("/", ": "), **where)
    if outcome in (outcomes.DEAD, outcomes.SEED_INVALID):
        return ev.event(ev.DEAD, worker, reason=outcome, **where)
    if outcome == outcomes.REQUEUED:
        return ev.event(ev.REQUEUED, worker, **where)
    return None


class IndexHooks:
    """Turns the worker's signals and lease ends into status index events."""

    def __init__(self, crawler: Any, index: StatusIndex, worker: str) -> None:
        self.index, self.worker = index, worker
        self._stored: dict[int, tuple[str, str]] = {}  # id(item) -> (collection, key)
        crawler.signals.connect(self._filtered, URL_FILTERED)
        crawler.signals.connect(self._item_stored, ITEM_STORED)
        crawler.signals.connect(self._item_scraped, signals.item_scraped)
        crawler.signals.connect(self._item_gone, signals.item_dropped)
        crawler.signals.connect(self._item_gone, signals.item_error)

    def ended(self, lease: Lease) -> None:
        found = ended_event(lease, self.worker)
        if found is None or lease.request is None:
            return
        final = (lease.details or {}).get("redirected_to")
        self.index.add(lease.request.url, found)
        if final:  # the page a redirect led to: fetched there too, by way of this URL
            moved = {k: v for k, v in found.items() if k != "redirected_to"}
            self.index.add(final, {**moved, "via": lease.request.url})

    def queued(self, request: Request, topic: str, partition: int, offset: int,
               op: int) -> None:
        """*request* is in the broker; barrier operation *op* ends once this is written."""
        self.index.add(request.url, ev.event(ev.DISCOVERED, self.worker,
                                             **{"from": _referer(request)}))
        self.index.add(request.url, ev.event(ev.QUEUED, self.worker, topic=topic,
                                             partition=partition, offset=offset), op)

    def _filtered(self, request: Request, reason: str, **_: Any) -> None:
        self.index.add(request.url, ev.event(ev.FILTERED, self.worker, reason=reason,
                                             **{"from": _referer(request)}))

    def _item_stored(self, item: Any, collection: str, key: str, **_: Any) -> None:
        self._stored[id(item)] = (collection, key)

    def _item_gone(self, item: Any, **_: Any) -> None:
        self._stored.pop(id(item), None)

    def _item_scraped(self, item: Any, response: Response | None = None, **_: Any) -> None:
        where = self._stored.pop(id(item), None)
        if where is None or response is None:
            return
        self.index.add(response.url, ev.event(ev.STORED, self.worker, collection=where[0],
                                              id=where[1]))
