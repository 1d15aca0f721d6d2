"""Issue 33's rules that need no service: what counts as a crawl that exists, when a finished
crawl's state expired by design, and what the report says after the ledger was reset."""

from __future__ import annotations

import time
from typing import Any

from crawler.frontier.crawllife import Finished
from crawler.ledger.report import Offsets, lines, reconcile
from crawler.recovery import Evidence
from crawler.recovery.guard import StateGuard
from crawler.recovery.mirror import Mirrored


def test_a_crawl_exists_once_it_committed_or_stored_anything() -> None:
    assert not Evidence(0, 0).exists
    assert Evidence(1, 0).exists and Evidence(0, 1).exists


def _guard(ttl: float) -> Any:
    guard = StateGuard.__new__(StateGuard)  # the rule alone: no client, no crawl
    guard.state_ttl = ttl
    guard.cfg = type("Cfg", (), {"crawl_id": "c"})()
    return guard


def test_a_finished_crawl_whose_state_expired_by_its_ttl_is_not_a_loss() -> None:
    now = time.time()
    old = Mirrored(finished=Finished(now - 8 * 86400, now - 8 * 86400))
    recent = Mirrored(finished=Finished(now - 60, now - 60))
    assert _guard(7 * 86400)._expired(old)
    assert not _guard(7 * 86400)._expired(recent)  # finished a minute ago: lost, not expired
    assert not _guard(7 * 86400)._expired(Mirrored())  # never finished: lost
    assert not _guard(0)._expired(old)  # CRAWL_STATE_TTL 0: kept for ever, so lost


def _report(counters: dict[str, int]) -> dict[str, Any]:
    return reconcile(counters, crawl_id="c", requests=Offsets(written=1500, committed=1200),
                     seeds=Offsets(0, 0), stored=1200, rejected=0, finished=False, workers=2)


def test_the_report_of_a_reset_ledger_says_so_and_balances_what_came_since() -> None:
    """Without the reset marks, 1,000 records committed before the loss would show as
    unaccounted: a false alarm, and the line would not say the counters were lost."""
    since = {"fetched/2xx": 200, "reset/at": 1_765_000_000, "reset/committed": 1000}
    report = _report(since)
    assert report["ledger_reset"] == {"at": 1_765_000_000, "committed_before": 1000}
    assert report["unaccounted"] == 0 and report["pending"] == 300
    assert "ledger    reset on 2025-12-06" in lines(report)[1]
    assert "1000 records were committed before it" in lines(report)[1]
    plain = _report({"fetched/2xx": 1200})
    assert plain["ledger_reset"] is None and plain["unaccounted"] == 0
    assert not any("reset" in line for line in lines(plain))
