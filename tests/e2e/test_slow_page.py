"""A slow-loris page: it sends a byte a second, for longer than ``DOWNLOAD_TIMEOUT``. The
download times out, is retried on the network budget (``RETRY_NETWORK_TIMES``, 4) and the
page ends in ``<CRAWL_ID>.failures``, counted as ``failed/retries`` in the ledger; the crawl
ends by itself.

Overridden, each for the reason given:

- ``DOWNLOAD_TIMEOUT`` 3 s instead of Scrapy's 30: what is under test is that the timeout
  ends the download and that the retries are bounded, not its value; five attempts at 30 s
  were 150 s of suite time. (A short timeout beside the other hostile pages did not work:
  32 MiB of ``/endless`` took more than 5 s under load and was retried; this crawl holds
  the slow page alone.)
- ``RETRY_BACKOFF_MAX`` 2 s instead of 60: the waits between attempts are not under test.
- ``CRAWL_IDLE_TIMEOUT`` 3 s instead of 30 (:data:`helpers.SHORT_IDLE`): the wait after the
  drain is not under test.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from helpers import SHORT_IDLE, ledger_report
from pymongo import MongoClient
from servers.hostilesite import HostileSite

from crawler.config import defaults
from crawler.localstack.demo import running, wait_all, worker_command, worker_logs

SETTINGS = {"DOWNLOAD_TIMEOUT": 3, "RETRY_BACKOFF_MAX": 2.0, **SHORT_IDLE}


def test_a_page_slower_than_the_timeout_is_retried_then_recorded_failed(
        stack: Any, crawl_id: str, tmp_path: Path) -> None:
    site = HostileSite().start()
    env = {**stack.env(), "CRAWL_ID": crawl_id}
    try:
        cmd = worker_command(f"{site.base}/slow", SETTINGS)
        with running(1, cmd, env, tmp_path / "logs") as workers:
            codes = wait_all(workers, timeout=180)
        logs = worker_logs(workers)
        ledger = ledger_report(crawl_id, env)
        with MongoClient(env["MONGO_URI"]) as client:
            database = client["crawler"]
            stored = database[crawl_id].count_documents({})
            failures = list(database[crawl_id + ".failures"].find({}, {"_id": 0}))
    finally:
        site.stop()
    assert codes == [0], logs[-4000:]
    pages = {path: n for path, n in site.hits.items() if path != "/robots.txt"}
    assert pages == {"/slow": 1 + defaults.RETRY_NETWORK_TIMES}, site.hits
    assert stored == 0
    [failure] = failures
    assert failure["url"] == f"{site.base}/slow", failure
    assert failure["attempts"] == 1 + defaults.RETRY_NETWORK_TIMES, failure
    assert ledger["requests"]["failed"] == {"retries": 1}, ledger
    assert (ledger["unaccounted"], ledger["pending"], ledger["overcounted"]) == (0, 0, 0), ledger
    assert "Gave up on" in logs and "network budget (4) spent" in logs, logs[-3000:]
