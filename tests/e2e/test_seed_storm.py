"""One big seed file: every seed claimed once, and the Redis pool never runs dry.

Seed records arrive as fast as the broker can deliver them. Each is claimed in Redis
before it becomes a request; if every record started its claim at once, the client's
connection pool would run out, and heartbeats and Bloom calls on the same client would
fail as if Redis were down.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

from pymongo import MongoClient
from redis import Redis

from crawler.localstack import demo_site as site
from crawler.localstack.demo import running, wait_all, worker_command, worker_logs

SEEDS = 20_000  # 50,000 until 2026-12-07; 80 times KAFKA_BUFFER_SIZE is a storm still


def _total(logs: list[str], name: str) -> int:
    """*name* summed over the workers' final stats."""
    total = 0
    for log in logs:
        found = re.findall(rf"'{re.escape(name)}': (\d+)", log)
        total += int(found[-1]) if found else 0
    return total


def _claims(redis_url: str, crawl_id: str) -> int:
    client = Redis.from_url(redis_url)
    try:
        return sum(1 for _ in client.scan_iter(f"{{{crawl_id}}}:seed:*", count=5000))
    finally:
        client.close()


def test_twenty_thousand_seeds_are_claimed_once_without_exhausting_redis(
        stack, crawl_id, tmp_path, demo_site, demo_site_pages):
    env = {**stack.env(), "CRAWL_ID": crawl_id}
    seeds = tmp_path / "seeds.txt"
    # hosts outside the crawl's scope: each seed is claimed, then refused by the workers'
    # scope check, so the test measures seeding, not downloading. --scope reject: by default
    # scrapy seed adds a seed's host to the crawl's scope (and the seeds would be fetched);
    # no worker has said the crawl's scope yet, so the command leaves the check to them
    seeds.write_text("".join(f"http://s{i}.seed.invalid/\n" for i in range(SEEDS)))
    proc = subprocess.run(
        [sys.executable, "-m", "scrapy", "seed", "site", "-f", str(seeds), "--crawl-id", crawl_id,
         "--scope", "reject"],
        env={**os.environ, **env, "SCRAPY_SETTINGS_MODULE": "crawler.settings"},
        capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert f"{SEEDS} seeds published" in proc.stdout
    # CRAWL_IDLE_TIMEOUT: a short wait for the end of the crawl, to keep the test short
    cmd = worker_command(demo_site + "/", {"CRAWL_IDLE_TIMEOUT": 5, "LOG_LEVEL": "INFO"})
    with running(2, cmd, env, tmp_path / "logs") as workers:
        codes = wait_all(workers, timeout=1500)
        logs = [w.log.name for w in workers]
        text = worker_logs(workers)
    assert codes == [0, 0], text[-4000:]
    per_worker = [open(name, errors="replace").read() for name in logs]
    # each worker also publishes its start URL as a seed: one of the two copies wins
    assert _total(per_worker, "frontier/seeds_taken") == 1
    assert _total(per_worker, "frontier/seeds_out_of_scope") == SEEDS
    assert _total(per_worker, "frontier/seeds_duplicate") == 1
    assert _claims(env["REDIS_URL"], crawl_id) == SEEDS + 1
    assert "Too many connections" not in text
    assert "Cannot claim a seed yet" not in text, "a claim failed as if Redis were down"
    with MongoClient(env["MONGO_URI"]) as client:
        urls = [d["url"] for d in client["crawler"][crawl_id].find({}, {"url": 1})]
    assert sorted(urls) == sorted(site.site_urls(demo_site, demo_site_pages))
