"""Canonical URLs and URL traps end to end (docs/urls.md): two workers at the default
distributed settings crawl a site of URL variants and traps (:mod:`servers.trapsite`) and
the crawl ends by itself.

Only ``CRAWL_IDLE_TIMEOUT`` is lowered (helpers.SHORT_IDLE: the wait after the drain is not
the subject). Required:

- the ten ways ``/`` writes ``/page`` (``utm_*``, ``gclid``, ``fbclid``, ``sid``,
  ``;jsessionid``, a fragment, an upper-case scheme) are fetched once and stored once, as
  ``/page`` (and ``/page?id=7`` once, the parameter kept); the origin never sees a dropped
  parameter, and a redirect to ``/landing?utm_source=…`` fetches and stores ``/landing``;
- the calendar ends at the depth limit: 32 months stored, one link ``discarded/depth``;
- the repeated-path traps end at the fourth repeat: ``/rel/x/x/x/`` and
  ``/alt/a/b/a/b/a/b/`` are the last pages, two links ``discarded/path_repeats``;
- a long link is ``discarded/url_length``; the redirects into the path trap and past the
  length limit are ``dropped/path_repeats`` and ``dropped/url_length``, never fetched;
- the ledger balances to zero.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from helpers import SHORT_IDLE, ledger_report, tracebacks_outside_kafka
from pymongo import MongoClient
from servers.trapsite import REDIRECTS, TrapSite, month

from crawler.localstack.demo import running, wait_all, worker_command, worker_logs
from crawler.security.limits import DISTRIBUTED_LIMITS

DEADLINE = 120.0  # seconds; the crawl takes about 15 s, then the 3 s idle timeout
DROPPED_PARAMS = ("utm_", "UTM_", "gclid", "fbclid", "sid=", "jsessionid")


def _stored_paths(base: str) -> set[str]:
    depth = DISTRIBUTED_LIMITS["DEPTH_LIMIT"]  # the first month is at depth 1
    months = [f"/calendar?month={month(step)}" for step in range(depth)]
    rel = ["/rel/x/", "/rel/x/x/", "/rel/x/x/x/"]
    alt = ["/alt/a/", "/alt/a/b/", "/alt/a/b/a/", "/alt/a/b/a/b/", "/alt/a/b/a/b/a/",
           "/alt/a/b/a/b/a/b/"]
    return {base + p for p in ["/", "/page", "/page?id=7", "/landing", *months, *rel, *alt]}


def test_variants_are_one_url_and_traps_end_by_themselves(stack: Any, crawl_id: str,
                                                          tmp_path: Path) -> None:
    site = TrapSite().start()
    env = {**stack.env(), "CRAWL_ID": crawl_id}
    try:
        with running(2, worker_command(f"{site.base}/", SHORT_IDLE), env,
                     tmp_path / "logs") as workers:
            codes = wait_all(workers, timeout=DEADLINE)
        logs = worker_logs(workers)
        assert codes == [0, 0], logs[-5000:]
        ledger = ledger_report(crawl_id, env)
        urls = [d["url"] for d in MongoClient(env["MONGO_URI"])["crawler"][crawl_id].find()]
    finally:
        site.stop()
    print(f"ledger {json.dumps(ledger)}")  # figures for the -s reader
    hits = dict(site.hits)
    assert tracebacks_outside_kafka(logs) == [], logs[-3000:]
    assert sorted(urls) == sorted(_stored_paths(site.base)), \
        sorted(set(urls) ^ _stored_paths(site.base))
    assert hits["/page"] == hits["/page?id=7"] == hits["/landing"] == 1, hits
    assert [p for p in hits if any(x in p for x in DROPPED_PARAMS)] == [], hits
    assert sorted(p for p in hits if p.startswith("/page")) == ["/page", "/page?id=7"], hits
    assert (ledger["finished"], ledger["unaccounted"], ledger["pending"]) == (True, 0, 0), ledger
    assert ledger["discarded"]["depth"] == 1, ledger  # the month at depth 32 links one more
    assert ledger["discarded"]["path_repeats"] == 2, ledger  # /rel/x/x/x/x/, /alt/…/a/
    assert ledger["discarded"]["url_length"] == 1, ledger  # the long link
    assert ledger["dropped"] == {"path_repeats": 1, "url_length": 1}, ledger  # /bounce, /far
    assert REDIRECTS["/bounce"] not in hits, hits  # the redirect into the path trap
    assert not any(p.startswith("/long/") for p in hits), hits  # the long link and redirect
    assert hits["/go"] == hits["/bounce"] == hits["/far"] == 1, hits
