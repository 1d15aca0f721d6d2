"""A second ``scrapy crawl`` of a finished crawl (same CRAWL_ID, same seeds) says so in one
line and closes as ``already_finished``, not as a silent ``finished``; the finished crawl's
Redis state has a lifetime (``CRAWL_STATE_TTL``). Real worker processes; the second run at
default settings."""

from __future__ import annotations

import os
import re

import redis
from helpers import SHORT_IDLE, tracebacks_outside_kafka

from crawler.config import defaults
from crawler.localstack.demo import running, stored_pages, wait_all, worker_command, worker_logs


def crawl_once(start_url: str, env: dict[str, str], log_dir,
               settings: dict[str, object] | None = None) -> str:
    log_dir.mkdir()
    with running(1, worker_command(start_url, settings or {}), env, log_dir) as workers:
        codes = wait_all(workers, timeout=600)
        log = worker_logs(workers)
    assert codes == [0], log[-3000:]
    assert not tracebacks_outside_kafka(log), log[-3000:]
    return log


def key_ttls(url: str, crawl_id: str) -> dict[str, int]:
    with redis.Redis.from_url(url) as client:
        return {k.decode(): client.ttl(k) for k in client.scan_iter(match=f"{{{crawl_id}}}:*")}


def test_a_second_run_of_a_finished_crawl_says_so_and_does_not_finish_silently(
        stack, demo_site, demo_site_pages, crawl_id, tmp_path):
    env = {**os.environ, **stack.env(), "CRAWL_ID": crawl_id,
           "SCRAPY_SETTINGS_MODULE": "crawler.settings"}
    # the first run only makes a finished crawl: it exits 3 s after the drain, not 30; the
    # second, the run under test, has every default
    first = crawl_once(demo_site + "/", env, tmp_path / "first", SHORT_IDLE)
    assert "'finish_reason': 'finished'" in first, first[-3000:]
    assert stored_pages(env["MONGO_URI"], "crawler", crawl_id)[0] == demo_site_pages
    line = re.compile(rf"crawl {re.escape(crawl_id)} finished on \d{{4}}-\d\d-\d\d [\d:]+ UTC; "
                      rf"give new seeds")
    assert not line.search(first)

    ttls = key_ttls(env["REDIS_URL"], crawl_id)  # the finished crawl's state expires
    assert ttls and all(0 < t <= defaults.CRAWL_STATE_TTL for t in ttls.values()), ttls

    second = crawl_once(demo_site + "/", env, tmp_path / "second")
    assert len(line.findall(second)) == 1, second[-3000:]
    assert "'finish_reason': 'already_finished'" in second, second[-3000:]
    assert "'finish_reason': 'finished'" not in second
    assert "response_received_count" not in second  # nothing was fetched again
    ttls = key_ttls(env["REDIS_URL"], crawl_id)
    assert ttls and all(0 < t <= defaults.CRAWL_STATE_TTL for t in ttls.values()), ttls
