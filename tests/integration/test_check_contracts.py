"""``scrapy check site`` as a user runs it: the bundled spider's contracts (``@start_url``,
``crawler.commands.check``) fetch a page of a local site and check what ``parse`` makes of it.

The connection settings point at loopback ports where nothing listens: the check runs on one
node all the same (a distributed run would need the three services), and passes.
"""

from __future__ import annotations

import os
import subprocess
import sys

from crawler.localstack.services import free_port

SERVICES_NOWHERE = {
    "KAFKA_BOOTSTRAP_SERVERS": f"127.0.0.1:{free_port()}",
    "REDIS_URL": f"redis://127.0.0.1:{free_port()}/0",
    "MONGO_URI": f"mongodb://127.0.0.1:{free_port()}/",
}


def _check(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "SCRAPY_SETTINGS_MODULE": "crawler.settings", **SERVICES_NOWHERE}
    return subprocess.run([sys.executable, "-m", "scrapy", "check", "site", *args], env=env,
                          capture_output=True, text=True, timeout=60)


def test_the_site_spiders_contracts_pass_on_one_node(demo_site: str) -> None:
    done = _check("-a", f"start_urls={demo_site}/")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Ran 3 contracts" in done.stderr and done.stderr.rstrip().endswith("OK"), done.stderr


def test_a_page_the_site_does_not_have_fails_the_check(demo_site: str) -> None:
    done = _check("-a", f"start_urls={demo_site}/no-such-page.html")
    assert done.returncode == 1, done.stderr[-3000:]
    assert "[site] parse (errback)" in done.stderr and "FAILED" in done.stderr, done.stderr
