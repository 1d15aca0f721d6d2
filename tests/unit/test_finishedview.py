"""A finished crawl's summary in ``scrapy cluster status``: when its run began and ended and
what its ledger says (crawler.operations.finishedview)."""

from __future__ import annotations

from typing import Any

from crawler.frontier.crawllife import Finished, parse_finished
from crawler.ledger.report import Offsets, reconcile
from crawler.operations import finishedview

START = 1_765_000_000.0


def _report(**counters: int) -> dict[str, Any]:
    return reconcile(counters, crawl_id="c", requests=Offsets(written=120, committed=120),
                     seeds=Offsets(0, 0), stored=100, rejected=0, finished=True, workers=0)


def test_the_summary_gives_the_runs_duration_and_whether_the_ledger_balances() -> None:
    report = _report(**{"fetched/2xx": 100, "failed/retries": 5, "dropped/offsite": 15})
    view = finishedview.summary(Finished(START + 90, START + 95.4, started=START), report)
    assert (view["duration_s"], view["pages"], view["failed"], view["dropped"]) == (95.4, 100,
                                                                                     5, 15)
    assert view["stored"] == 100 and view["balanced"] is True
    text = finishedview.lines(view)
    assert text[0] == "finished  2025-12-06 05:48:15 UTC (finished); ran 95s from " \
                      "2025-12-06 05:46:40 UTC"
    assert text[1] == ("summary   100 pages fetched, 5 failed, 15 dropped, 0 dead-lettered, "
                       "100 stored; every request accounted for")
    assert "crawl c: finished" in text  # then the ledger's report


def test_a_ledger_with_requests_unaccounted_for_is_not_called_balanced() -> None:
    view = finishedview.summary(Finished(START, START), _report(**{"fetched/2xx": 90}))
    assert view["balanced"] is False and view["duration_s"] is None
    assert "NOT balanced" in finishedview.lines(view)[1]
    assert "its start was not recorded" in finishedview.lines(view)[0]


def test_the_record_keeps_its_start_and_reads_the_older_forms() -> None:
    new = '{"at": 2.0, "closed": 3.0, "reason": "finished", "started": 1.0}'
    assert parse_finished(new) == Finished(2.0, 3.0, "finished", 1.0)
    assert parse_finished('{"at": 2.0, "closed": 3.0, "reason": "finished"}') == Finished(2, 3)
    assert parse_finished("2.0") == Finished(2.0, 2.0)
