"""The crawl ledger, pure logic: outcome names, what a lease's signals make of it, the
memory tally's once-per-record counting and the reconciliation of the report (the Redis
script is in tests/integration/test_ledger_redis.py, a whole crawl in tests/e2e/test_ledger.py)."""

from __future__ import annotations

from typing import Any

import pytest
from scrapy import Request, Spider, signals
from scrapy.exceptions import DownloadCancelledError, IgnoreRequest
from scrapy.http import HtmlResponse
from scrapy.utils.test import get_crawler
from twisted.internet.error import ConnectionRefusedError as Refused

from crawler.frontier.accounting import Accounting
from crawler.frontier.leases import Lease, LeaseRegistry
from crawler.ledger import outcomes, tell
from crawler.ledger.report import Offsets, lines, reconcile
from crawler.ledger.tally import MemoryTally


class _Spider(Spider):
    name = "ledger"


@pytest.mark.parametrize(("exception", "outcome"), [
    (IgnoreRequest("Forbidden by robots.txt"), "dropped/robots"),
    (IgnoreRequest("Filtered offsite request to 'b.test'"), "dropped/offsite"),
    (IgnoreRequest("max redirections reached"), "dropped/redirects"),
    (IgnoreRequest("Ignored response <200 x> because its body (1 B compressed, 9 B "
                   "decompressed so far) exceeded DOWNLOAD_MAXSIZE (5 B) during "
                   "decompression."), "dropped/size"),
    (IgnoreRequest("something else"), "dropped/ignored"),
    (Refused(), "failed/ConnectionRefusedError"),
    (DownloadCancelledError(""), "dropped/size"),  # HTTP/1.1's cut past DOWNLOAD_MAXSIZE
    (DownloadCancelledError("Expected to receive 200000000 bytes which is larger than "
                            "download max size (33554432)"), "dropped/size"),
    (DownloadCancelledError("cancelled"), "failed/DownloadCancelledError"),
])
def test_an_exception_names_its_outcome(exception: Exception, outcome: str) -> None:
    assert outcomes.of_exception(exception) == outcome
    exception.ledger_reason = "blocked_network"  # type: ignore[attr-defined]
    assert outcomes.of_exception(exception) == "dropped/blocked_network"


def test_the_memory_tally_counts_a_record_once_and_its_redelivery_apart() -> None:
    tally = MemoryTally()
    tally.record(("t", 0), 5, {"fetched/2xx": 1, "items/stored": 2})
    tally.record(("t", 1), 5, {"fetched/4xx": 1})
    tally.record(("t", 0), 5, {"fetched/2xx": 1, "items/stored": 2})
    tally.count("retries", 3)
    assert dict(tally.counters) == {"fetched/2xx": 1, "items/stored": 2, "fetched/4xx": 1,
                                    "again/fetched/2xx": 1, "again/items/stored": 2,
                                    "retries": 3}


def _accounting() -> tuple[Any, LeaseRegistry, MemoryTally, Accounting]:
    crawler = get_crawler(_Spider)
    ended: list[Accounting] = []
    leases = LeaseRegistry(ack=lambda lease: None, ended=lambda lease: ended[0].ended(lease))
    tally = MemoryTally()
    ended.append(Accounting(crawler, leases, tally))
    return crawler, leases, tally, ended[0]


def _leased(leases: LeaseRegistry, url: str, offset: int) -> tuple[Request, Lease]:
    request, lease = Request(url), Lease("c.requests", 0, offset, epoch=1)
    leases.register(lease, request)
    leases.start(request, lease)
    return request, lease


def test_a_lease_ends_with_the_last_word_and_its_items() -> None:
    crawler, leases, tally, accounting = _accounting()
    request, _lease = _leased(leases, "http://a.test/1", 7)
    tell(crawler, request, "failed/TimeoutError")  # an attempt failed, then a retry worked
    response = HtmlResponse(request.url, status=200, body=b"<html/>", request=request)
    accounting.response(request, response)
    for signal in (signals.item_scraped, signals.item_scraped, signals.item_dropped):
        crawler.signals.send_catch_log(signal, item={}, response=response, spider=None,
                                       exception=ValueError())
    leases.left(request)
    robots, _ = _leased(leases, "http://a.test/private", 8)
    tell(crawler, robots, outcomes.of_exception(IgnoreRequest("Forbidden by robots.txt")))
    leases.left(robots)
    silent, _ = _leased(leases, "http://a.test/silent", 9)
    leases.left(silent)
    assert dict(tally.counters) == {"fetched/2xx": 1, "items/stored": 2, "items/dropped": 1,
                                    "dropped/robots": 1, "dropped/unknown": 1}


def test_a_retry_given_up_sticks_over_the_last_response() -> None:
    crawler, leases, tally, accounting = _accounting()
    request, _lease = _leased(leases, "http://a.test/flaky", 1)
    tell(crawler, request, outcomes.RETRIES_EXHAUSTED)
    accounting.response(request, HtmlResponse(request.url, status=500, request=request))
    leases.left(request)
    assert dict(tally.counters) == {"failed/retries": 1}


def test_a_failure_raised_after_the_response_is_the_last_word() -> None:
    """The redirect limit and the decompression bound are raised from ``process_response``,
    which no ``process_exception`` hears: the scraper's failure tells the ledger."""
    _crawler, leases, tally, accounting = _accounting()
    for offset, (url, error) in enumerate([
            ("http://a.test/spiral/10", IgnoreRequest("max redirections reached")),
            ("http://a.test/bomb", IgnoreRequest("... exceeded DOWNLOAD_MAXSIZE (5 B) during "
                                                 "decompression.")),
            ("http://a.test/endless", DownloadCancelledError())]):
        request, _lease = _leased(leases, url, offset)
        accounting.response(request, HtmlResponse(url, status=302, request=request))
        accounting.failed(request, error)
        leases.left(request)
    assert dict(tally.counters) == {"dropped/redirects": 1, "dropped/size": 2}


def test_stats_growth_becomes_plain_counters() -> None:
    _crawler, _leases, tally, accounting = _accounting()
    accounting.stats_growth({"bloom/filtered": 4, "depth/request_ignored_count": 1})
    accounting.stats_growth({"bloom/filtered": 6, "depth/request_ignored_count": 1})
    assert dict(tally.counters) == {"requests/filtered": 6, "discarded/depth": 1}


def _report(counters: dict[str, int], *, written: int, committed: int,
            finished: bool) -> dict[str, Any]:
    return reconcile(counters, crawl_id="c", requests=Offsets(written, committed),
                     seeds=Offsets(2, 2), stored=3, rejected=0, finished=finished,
                     workers=0 if finished else 2)


def test_a_finished_crawl_reconciles_to_zero() -> None:
    counters = {"seeds/accepted": 1, "seeds/duplicate": 1, "fetched/2xx": 3, "fetched/4xx": 1,
                "failed/retries": 1, "dropped/robots": 1, "dead": 1, "requeued": 1,
                "again/fetched/2xx": 2, "submitted/published": 2, "discarded/depth": 4}
    report = _report(counters, written=8, committed=8, finished=True)
    assert (report["pending"], report["unaccounted"], report["overcounted"]) == (0, 0, 0)
    assert report["dropped"] == {"robots": 1} and report["failed"] == 1
    assert report["redelivered"] == 2 and report["discarded"] == {"depth": 4}
    assert report["seeds"]["submitted"] == {"published": 2}
    assert any("unaccounted 0" in line for line in lines(report))


def test_a_committed_record_without_an_outcome_is_unaccounted() -> None:
    counters = {"seeds/accepted": 2, "fetched/2xx": 8}
    assert _report(counters, written=9, committed=9, finished=True)["unaccounted"] == 1
    assert _report(counters | {"fetched/2xx": 10}, written=9, committed=9,
                   finished=True)["overcounted"] == 1


def test_a_running_crawl_is_pending_not_unaccounted() -> None:
    counters = {"seeds/accepted": 2, "fetched/2xx": 5}  # 2 counted, not yet committed
    report = _report(counters, written=9, committed=3, finished=False)
    assert (report["pending"], report["unaccounted"], report["lag"]) == (4, 0, 6)
