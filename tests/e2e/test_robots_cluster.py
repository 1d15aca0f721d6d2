"""robots.txt once per host for the whole cluster, by RFC 9309: three workers at the default
settings crawl a web of six loopback hosts.

- Every host's robots.txt is fetched once, whichever worker meets the host first.
- A path robots.txt forbids is never fetched; a host whose robots.txt is 404 has no rules.
- A host whose robots.txt answers 503 gets no page request until robots.txt answers 200 (RFC
  9309, 2.3.1.4: unreachable means disallow), and its pages are all fetched after that.
- A host asking for ``Crawl-delay: 1`` never gets two requests closer than a second, from
  whichever workers (read from the origin's log).
- The pages a host lists only in its sitemap (robots.txt -> index -> gzip sitemap) are found.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest
from helpers import ledger_report
from servers.robotsweb import HIDDEN, PRIVATE, HostSpec, RobotsWeb

from crawler.localstack.demo import running, stored_pages, wait_all, worker_command

pytestmark = pytest.mark.e2e

RULES = b"User-agent: *\nDisallow: /private/\n"
SPECS = [
    HostSpec("a", 15, RULES), HostSpec("b", 15, RULES),
    HostSpec("c", 15, RULES, sitemap=True),  # its /hidden/ pages are in its sitemap only
    HostSpec("open", 5, None),  # 404: no rules, /private/ too is fetched
    HostSpec("flaky", 5, RULES, flaky=True),
    HostSpec("slow", 5, RULES + b"Crawl-delay: 1\n"),
]
# the crawl drained, the workers wait CRAWL_IDLE_TIMEOUT (30 s) before they exit: 3 s only
# shortens that wait (as in test_spread.py); every other setting is the default
SETTINGS = {"CRAWL_IDLE_TIMEOUT": 3}
TOLERANCE = 0.02  # seconds: a request leaves its worker after the token, and crosses loopback


def _expected_pages(spec: HostSpec) -> int:
    """Its index, its pages, what robots.txt allows and what its sitemap lists."""
    private = PRIVATE if spec.robots is None else 0
    return 1 + spec.pages + private + (HIDDEN if spec.sitemap else 0)


def test_three_workers_fetch_each_robots_txt_once_and_obey_it(
        stack: Any, crawl_id: str, tmp_path: Path) -> None:
    web = RobotsWeb(SPECS)
    env = {**stack.env(), "CRAWL_ID": crawl_id}
    try:
        seeds = ",".join(h.base + "/" for h in web.hosts)
        with running(3, worker_command(seeds, SETTINGS), env, tmp_path) as workers:
            assert wait_all(workers, timeout=300) == [0, 0, 0]
    finally:
        web.close()
    robots = {s.name: len(web.hits(s.name, "/robots.txt")) for s in SPECS}
    print(f"robots.txt fetches per host: {robots}")  # figures for the -s reader
    flaky_503 = [h for h in web.hits("flaky", "/robots.txt") if h.status == 503]
    assert flaky_503, "the flaky host's robots.txt was never fetched while it failed"
    once = {name: n for name, n in robots.items() if name != "flaky"}
    assert once == dict.fromkeys(once, 1), f"robots.txt fetches per host: {robots}"
    # the flaky host: one fetch while it failed (and the retry middleware's one retry), then
    # one after ROBOTSTXT_RETRY_AFTER
    assert robots["flaky"] <= len(flaky_503) + 1 and len(flaky_503) <= 2, robots
    _flaky_waited(web)
    _crawl_delay_kept(web)
    _everything_allowed_and_nothing_else(web)
    hidden = {h.path for h in web.hits("c") if h.path.startswith("/hidden/")}
    assert hidden == {f"/hidden/{i}" for i in range(HIDDEN)}, web.hits("c")
    assert [len(web.hits("c", p)) for p in ("/sitemap_index.xml", "/sitemap1.xml.gz")] == [1, 1]
    total = sum(_expected_pages(s) for s in SPECS)
    assert stored_pages(env["MONGO_URI"], "crawler", crawl_id) == (total, total)
    report = ledger_report(crawl_id, env)
    assert report["dropped"].get("robots") == PRIVATE * (len(SPECS) - 1), report
    assert (report["unaccounted"], report["pending"], report["overcounted"]) == (0, 0, 0), report


def _flaky_waited(web: RobotsWeb) -> None:
    hits = web.hits("flaky")
    ok = [h.at for h in hits if h.path == "/robots.txt" and h.status == 200]
    assert ok, f"the flaky host's robots.txt was not fetched again once it recovered: {hits}"
    first_ok = min(ok)
    early = [h for h in hits if h.path != "/robots.txt" and h.at < first_ok]
    assert not early, f"pages of the flaky host fetched before its robots.txt answered: {early}"
    assert sum(1 for h in hits if h.path.startswith("/p/")) == 5


def _crawl_delay_kept(web: RobotsWeb) -> None:
    starts = sorted(h.at for h in web.hits("slow") if h.path != "/robots.txt")
    assert len(starts) == _expected_pages(SPECS[-1])
    gaps = [b - a for a, b in itertools.pairwise(starts)]
    print(f"gaps between requests to the Crawl-delay: 1 host: {[round(g, 3) for g in gaps]}")
    assert min(gaps) >= 1.0 - TOLERANCE, f"requests to the Crawl-delay host {gaps} s apart"


def _everything_allowed_and_nothing_else(web: RobotsWeb) -> None:
    private = [h for h in web.log if h.path.startswith("/private/")]
    assert {h.host for h in private} == {"open"}, f"forbidden paths fetched: {private}"
    assert len(private) == PRIVATE
