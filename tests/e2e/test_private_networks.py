"""Private networks are closed by default, but to the hosts of the operator's own seeds.

Two workers at the default settings crawl a seeded host whose page links to another
loopback host (``127.0.1.2``, a private address like every test address: the seeded one
plays the public page). By default nothing reaches the linked host, not even a robots.txt
request, and the ledger counts the refusal; seeding that host too, or naming it in
``ALLOWED_NETWORKS``, opens it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from helpers import SHORT_IDLE, ledger_report
from servers.robotsweb import HostSpec, RobotsWeb

from crawler.localstack.demo import running, stored_pages, wait_all, worker_command

pytestmark = pytest.mark.e2e

SPECS = [HostSpec("public", 3, None), HostSpec("intranet", 3, None)]
PAGES = 1 + 3 + 3  # a host's index, its pages and its /private/ pages (404 robots.txt)


@pytest.mark.parametrize("opened", ["default", "seeded", "allowed_networks"])
def test_a_link_to_a_private_address_is_refused_unless_its_host_is_seeded_or_allowed(
        opened: str, stack: Any, crawl_id: str, tmp_path: Path) -> None:
    web = RobotsWeb(SPECS)
    env = {**stack.env(), "CRAWL_ID": crawl_id}
    public, intranet = web.hosts
    seeds = [public.base + "/"] + ([intranet.base + "/"] if opened == "seeded" else [])
    # SHORT_IDLE only shortens the wait once the crawl drained; ALLOWED_NETWORKS is the case
    settings: dict[str, Any] = dict(SHORT_IDLE)
    if opened == "allowed_networks":
        settings["ALLOWED_NETWORKS"] = "127.0.1.2/32"
    # the site spider keeps to its start URLs' hosts: name the linked one as allowed too
    command = worker_command(",".join(seeds), settings)
    command += ["-a", "allowed_domains=127.0.1.1,127.0.1.2"]
    try:
        with running(2, command, env, tmp_path) as workers:
            assert wait_all(workers, timeout=240) == [0, 0]
    finally:
        web.close()
    reached = web.hits("intranet")
    report = ledger_report(crawl_id, env)
    stored = stored_pages(env["MONGO_URI"], "crawler", crawl_id)
    if opened == "default":
        assert reached == [], f"the private host was reached: {reached}"
        assert report["dropped"].get("blocked_network") == 1, report
        assert stored == (PAGES, PAGES)
    else:
        assert {h.path for h in reached} >= {"/", "/p/0", "/p/1", "/p/2"}, reached
        assert "blocked_network" not in report["dropped"], report
        assert stored == (2 * PAGES, 2 * PAGES)
    assert (report["unaccounted"], report["pending"]) == (0, 0), report
