"""Three workers with the default settings share one big host, and the host never sees more
requests at once than the cluster-wide limit, also when a worker is killed with ``kill -9``.

The origin answers each page after 0.2 s, so the limit binds: 16 requests in flight
(``CONCURRENT_REQUESTS_PER_DOMAIN`` of the project, the default of ``HOSTLIMIT_CONCURRENCY``)
carry at most 80 pages a second, less than three workers could fetch, and three workers on
their own would send up to 48 at once. ``CRAWL_IDLE_TIMEOUT=3`` only shortens the wait after
the crawl drained (the default, 30 s, would make each run half a minute longer).
"""

from __future__ import annotations

import itertools
import re
import signal
from pathlib import Path

import pytest
from helpers import wait_until
from servers import counting

from crawler.localstack import demo_site
from crawler.localstack.demo import running, stored_pages, wait_all, worker_command

pytestmark = pytest.mark.serial  # the per-host limit and delay are judged by arrival times

PAGES = 1000  # 2,000 until 2026-12-07: at 80 pages a second, 12 s of the limit binding
LIMIT = 16  # crawler/settings.py: CONCURRENT_REQUESTS_PER_DOMAIN
LATENCY = 0.2
SETTINGS = {"CRAWL_IDLE_TIMEOUT": 3}


@pytest.fixture(scope="module")
def big_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("big-site")
    demo_site.generate(directory, PAGES)
    return directory


def _fetched(log: Path) -> int:
    found = re.findall(r"'downloader/response_count': (\d+)", log.read_text(errors="replace"))
    assert found, f"no final stats in {log}"
    return int(found[-1])


def _pages_of_site(server: counting.CountingServer) -> set[str]:
    return set(server.page_paths())


def _three_workers(site: Path, latency: float, settings: dict[str, object],
                   env: dict[str, str], tmp_path: Path) -> tuple[counting.CountingServer,
                                                                 list[int]]:
    """Three workers crawl *site* to its end; the origin, and the pages each fetched."""
    server = counting.serve(site, latency=latency)
    try:
        with running(3, worker_command(server.base_url + "/", settings), env, tmp_path) as ws:
            assert wait_all(ws, timeout=300) == [0, 0, 0]
    finally:
        server.close()
    return server, [_fetched(Path(w.log.name)) for w in ws]


def test_three_workers_share_one_host_within_the_cluster_limit(
        stack, big_site, crawl_id, tmp_path):
    env = {**stack.env(), "CRAWL_ID": crawl_id}
    server, fetched = _three_workers(big_site, LATENCY, SETTINGS, env, tmp_path)
    assert all(n >= 0.2 * PAGES for n in fetched), f"pages fetched per worker: {fetched}"
    assert sum(fetched) >= PAGES
    peak = server.peak()
    assert peak <= LIMIT, f"{peak} requests in flight to the host at once (limit {LIMIT})"
    assert peak >= LIMIT // 2, f"the limit never bound ({peak} at most): the test proves nothing"
    assert stored_pages(env["MONGO_URI"], "crawler", crawl_id) == (PAGES, PAGES)


def test_the_limit_holds_and_nothing_is_lost_when_a_worker_is_killed(
        stack, big_site, crawl_id, tmp_path):
    server = counting.serve(big_site, latency=LATENCY)
    env = {**stack.env(), "CRAWL_ID": crawl_id}
    try:
        with running(3, worker_command(server.base_url + "/", SETTINGS), env, tmp_path) as ws:
            wait_until(lambda: stored_pages(env["MONGO_URI"], "crawler", crawl_id)[0]
                       >= PAGES // 4, 180, f"{PAGES // 4} pages stored")
            victim = ws[1].process
            victim.send_signal(signal.SIGKILL)
            victim.wait()
            survivors = [ws[0], ws[2]]
            assert wait_all(survivors, timeout=300) == [0, 0]
    finally:
        server.close()
    peak = server.peak()
    assert peak <= LIMIT, f"{peak} requests in flight to the host at once (limit {LIMIT})"
    assert stored_pages(env["MONGO_URI"], "crawler", crawl_id) == (PAGES, PAGES)
    assert len(_pages_of_site(server)) == PAGES
    fetched = [_fetched(Path(w.log.name)) for w in survivors]
    assert all(n >= 0.2 * PAGES for n in fetched), f"pages fetched per survivor: {fetched}"


DELAY = 0.1  # seconds: DOWNLOAD_DELAY, the delay under test
DELAY_PAGES = 100  # 99 gaps or more, across three workers (200 until 2026-12-07)


def test_three_workers_keep_the_hosts_delay_between_any_two_requests(
        stack, tmp_path_factory, crawl_id, tmp_path):
    """``DOWNLOAD_DELAY`` is the host's, not each worker's: the origin logs every arrival,
    and no two requests to the host, from whichever workers, come closer than the delay
    (robots.txt, fetched once around the gate, is left out)."""
    directory = tmp_path_factory.mktemp("delay-site")
    demo_site.generate(directory, DELAY_PAGES)
    env = {**stack.env(), "CRAWL_ID": crawl_id}
    settings = {**SETTINGS, "DOWNLOAD_DELAY": DELAY}
    server, fetched = _three_workers(directory, 0.0, settings, env, tmp_path)
    assert sum(1 for n in fetched if n > 1) >= 2, f"one worker did it all: {fetched}"
    starts = sorted(s for s, _e, path in server.intervals if path != counting.ROBOTS)
    assert len(starts) >= DELAY_PAGES
    gaps = sorted(b - a for a, b in itertools.pairwise(starts))
    close = [round(g, 3) for g in gaps if g < DELAY * 0.98]  # 2%: the server threads' jitter
    assert not close, (f"{len(close)} of {len(gaps)} gaps under the {DELAY} s delay, the "
                       f"smallest {close[:5]}; pages fetched per worker {fetched}")
    assert stored_pages(env["MONGO_URI"], "crawler", crawl_id) == (DELAY_PAGES, DELAY_PAGES)
