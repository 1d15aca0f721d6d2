"""The status index's events: what a lease's outcome becomes, and the trace of a document."""

from __future__ import annotations

from scrapy import Request

from crawler.frontier.leases import Lease
from crawler.statusindex import events as ev
from crawler.statusindex.hooks import ended_event, fetch_details


def _lease(outcome: str, **details: object) -> Lease:
    lease = Lease("c.requests", 3, 17, 1)
    lease.outcome, lease.details = outcome, dict(details) or None
    return lease


def test_a_lease_outcome_becomes_its_event() -> None:
    fetched = ended_event(_lease("fetched/2xx", status=200, attempts=1), "w")
    assert fetched is not None and fetched["event"] == "fetched" and fetched["status"] == 200
    assert (fetched["topic"], fetched["partition"], fetched["offset"]) == ("c.requests", 3, 17)
    failed = ended_event(_lease("failed/retries", status=500, attempts=3), "w")
    assert failed is not None and (failed["event"], failed["reason"]) == ("failed", "retries")
    robots = ended_event(_lease("dropped/robots"), "w")
    assert robots is not None and (robots["event"], robots["reason"]) == ("filtered", "robots")
    dup = ended_event(_lease("seeds/duplicate"), "w")
    assert dup is not None and dup["reason"] == "seeds: duplicate"
    assert ended_event(_lease(""), "w") is None


def test_the_proxy_of_a_try_is_kept_without_its_password() -> None:
    request = Request("http://a.test/", meta={"proxy": "http://user:secret@p.test:8080",
                                               "retry_times": 2})
    details = fetch_details(request)
    assert details["attempts"] == 3
    assert "secret" not in details["proxy"] and "p.test:8080" in details["proxy"]


def test_the_strongest_event_sets_the_state_whatever_the_order() -> None:
    queued = ev.event(ev.QUEUED, "w", offset=1)
    stored = ev.event(ev.STORED, "w", id="k")
    assert ev.strongest([stored, queued]) is stored
    update = ev.update([queued, stored], 0.0)[0]["$set"]
    assert update["state"]["$cond"][1] == {"$literal": "stored"}


def test_a_url_never_seen_is_unknown() -> None:
    assert ev.trace("http://a.test/x", None) == {"url": "http://a.test/x", "state": "unknown",
                                                 "events": []}
