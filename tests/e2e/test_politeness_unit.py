"""``POLITENESS_UNIT``: the names of one server share its Crawl-delay, across workers.

One server on 127.0.0.1 asks for ``Crawl-delay: 1``; the crawl is seeded with it under two
names. With the unit ``ip`` they are ``127.0.0.1`` and ``localhost`` (which resolves to it):
their requests go to different Kafka partitions (partitioning is by domain), so two workers
share them. With the unit ``domain`` they are ``a.example.com`` and ``b.example.com``, which
the workers resolve to 127.0.0.1 (``servers.fakedns``: no real DNS here); one registered
domain, one partition. Either way the server sees its page requests at least a second apart
whatever name they use; with the default unit (``host``), each name keeps its own second,
and the server sees requests closer than that: the control that shows the test can fail
(for the example.com names too, run by hand on 2026-12-07, in docs/politeness.md).
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest
from servers import fakedns
from servers.robotsweb import HostSpec, RobotsWeb

from crawler.localstack.demo import running, stored_pages, wait_all, worker_command

pytestmark = pytest.mark.e2e

SPEC = HostSpec("server", 5, b"User-agent: *\nDisallow: /private/\nCrawl-delay: 1\n")
PAGES = 1 + SPEC.pages  # "/" and /p/<i>, under each name
TOLERANCE = 0.02  # seconds: a request leaves its worker after the token, and crosses loopback


LOCAL = ("127.0.0.1", "localhost")
EXAMPLE = ("a.example.com", "b.example.com")


@pytest.mark.parametrize(("unit", "names"), [("ip", LOCAL), ("domain", EXAMPLE),
                                             ("host", LOCAL)], ids=["ip", "domain", "host"])
def test_the_names_of_one_server_share_its_crawl_delay(
        stack: Any, crawl_id: str, tmp_path: Path, unit: str, names: tuple[str, str]) -> None:
    web = RobotsWeb([SPEC], network="127.0.0")
    port = web.hosts[0].server_address[1]
    seeds = ",".join(f"http://{name}:{port}/" for name in names)
    # the example.com names resolve to the server; the others as they always do
    env = {**stack.env(), "CRAWL_ID": crawl_id,
           **fakedns.worker_env(dict.fromkeys(EXAMPLE, "127.0.0.1"))}
    # CRAWL_IDLE_TIMEOUT=3 only shortens the wait once the crawl drained (as in
    # test_robots_cluster.py); POLITENESS_UNIT is what is tried, "host" its default
    settings = {"CRAWL_IDLE_TIMEOUT": 3, "POLITENESS_UNIT": unit}
    try:
        with running(2, worker_command(seeds, settings), env, tmp_path) as workers:
            assert wait_all(workers, timeout=180) == [0, 0]
    finally:
        web.close()
    assert stored_pages(env["MONGO_URI"], "crawler", crawl_id) == (2 * PAGES, 2 * PAGES)
    starts = sorted(h.at for h in web.log if h.path != "/robots.txt")
    assert len(starts) == 2 * PAGES, web.log
    gaps = [round(b - a, 3) for a, b in itertools.pairwise(starts)]
    print(f"POLITENESS_UNIT={unit}: gaps between page requests to the server: {gaps}")
    if unit != "host":
        assert min(gaps) >= 1.0 - TOLERANCE, f"requests to one server {gaps} s apart"
    else:  # each name its own second: both names' requests interleave closer than that
        assert min(gaps) < 0.9, f"the host unit kept one second across names: {gaps}"
