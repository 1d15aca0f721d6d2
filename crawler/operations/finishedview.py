"""A finished crawl's summary, for ``scrapy cluster status`` and the dashboard once its
workers are gone: when its last run began and ended, and its ledger (pages fetched, failed,
dropped, stored, and whether every request is accounted for)."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from crawler.frontier.crawllife import Finished
from crawler.ledger import report as ledger_report


def _date(at: float | None) -> str | None:
    return None if at is None else time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(at))


def summary(finished: Finished, report: Mapping[str, Any]) -> dict[str, Any]:
    """The summary as JSON-ready values; *report*: :func:`crawler.ledger.report.reconcile`'s."""
    started = finished.started
    return {
        "reason": finished.reason, "started": started, "closed": finished.closed,
        "duration_s": None if started is None else round(finished.closed - started, 1),
        "pages": report["fetched"], "failed": report["failed"],
        "dropped": sum(report["dropped"].values()), "dead": report["dead"],
        "stored": report["stored"],
        "balanced": report["pending"] == 0 and report["unaccounted"] == 0,
        "ledger": dict(report),
    }


def lines(view: Mapping[str, Any]) -> list[str]:
    """The summary as text: when the run began and ended, then the ledger's report."""
    took = "its start was not recorded" if view["duration_s"] is None \
        else f"ran {view['duration_s']:.0f}s from {_date(view['started'])}"
    balance = "every request accounted for" if view["balanced"] \
        else "NOT balanced (see pending and unaccounted below)"
    return [
        f"finished  {_date(view['closed'])} ({view['reason']}); {took}",
        f"summary   {view['pages']} pages fetched, {view['failed']} failed, "
        f"{view['dropped']} dropped, {view['dead']} dead-lettered, "
        f"{'?' if view['stored'] is None else view['stored']} stored; {balance}",
        "",
        *ledger_report.lines(view["ledger"]),
    ]
