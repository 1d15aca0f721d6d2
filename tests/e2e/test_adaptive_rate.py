"""At the default settings a host has no rate of its own; when it answers 429 or 503 the
cluster gives it one and slows down, and every page is still stored.

Two workers crawl 20 pages of an origin that takes 3 requests a second (a burst of 3) and
answers the status to any more. Unthrottled they send the 21 requests within a second; the
first refusals give the host RATELIMIT_UNRATED_RATE (2/s), halved at once, shared through
Redis, and the backoff retries bring the refused pages back.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from helpers import SHORT_IDLE, ledger_report
from servers.throttled import Throttled

from crawler.localstack.demo import running, stored_pages, wait_all, worker_command

pytestmark = pytest.mark.e2e
PAGES = 20
LATE = 2.5  # seconds after the first refusal: a worker has read that the host has a rate


@pytest.mark.parametrize("status", [429, 503])
def test_a_host_that_answers_too_many_requests_gets_a_rate(
        status: int, stack: Any, crawl_id: str, tmp_path: Path) -> None:
    origin = Throttled(PAGES, status, rate=3.0, burst=3.0)
    env = {**stack.env(), "CRAWL_ID": crawl_id}
    try:
        # SHORT_IDLE only shortens the wait once the crawl drained
        with running(2, worker_command(origin.base + "/", SHORT_IDLE), env, tmp_path) as ws:
            assert wait_all(ws, timeout=300) == [0, 0]
            logs = "".join(Path(w.log.name).read_text(errors="replace") for w in ws)
    finally:
        origin.close()
    refused = [at for at, _path, answer in origin.answers if answer != 200]
    print(f"{status}: {len(refused)} refused of {len(origin.answers)} answers")  # for -s
    assert f"(no rate) answered {status}" in logs
    assert refused, "the origin never refused: the test proves nothing"
    # once rated (within the first refusals' second: a worker reads the rated hosts every 2 s)
    # the cluster stays under the origin's rate. Without it (RATELIMIT_ADAPTIVE False) the
    # refusals went on for 11 s: 125 of 166 answers, 40 pages, 2026-12-06
    late = [round(at - refused[0], 1) for at in refused if at - refused[0] > LATE]
    assert not late, f"refusals {late} s after the first ({len(refused)} in all)"
    assert stored_pages(env["MONGO_URI"], "crawler", crawl_id) == (PAGES + 1, PAGES + 1)
    report = ledger_report(crawl_id, env)
    assert report["requests"].get("failed", {}) == {}, report
