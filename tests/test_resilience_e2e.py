"""Two workers crawl a faulty origin through real proxies, politely, losing nothing.

The origin answers 429 with Retry-After, intermittent 503s, slow responses and
connection resets (all transient) and logs every request. Among the proxies one
is dead, one slow and one answers 403. One worker is killed with kill -9 while
requests are backing off, and restarted.
"""

from __future__ import annotations

import json
import os
import re
import signal
import time

from helpers import wait_until
from pymongo import MongoClient
from redis import Redis

from crawler.demo import running, start_worker, wait_all, worker_command, worker_logs
from crawler.faultorigin import Faults, max_per_window, read_log, site_urls, start_origin
from crawler.testproxies import SLOW_DELAY, start_proxies

PAGES = 150
HOSTS = ("127.0.0.1", "127.0.0.2")
RATE, BURST = 6.0, 3.0


def _proxy_uses(logs: str, proxy_id: str) -> int:
    """Requests sent through *proxy_id*, summed over the final stats of every worker run."""
    return sum(int(n) for n in re.findall(rf"'proxy/{re.escape(proxy_id)}/requests': (\d+)", logs))


def _wait_for_backoff(env: dict[str, str], crawl_id: str) -> int:
    """The PID of a worker whose heartbeat shows requests waiting out a back-off."""
    client = Redis.from_url(env["REDIS_URL"])
    found: list[int] = []

    def delayed() -> bool:
        for value in client.hvals(f"{{{crawl_id}}}:workers"):
            info = json.loads(value)["info"]
            if info.get("delayed", 0) > 0:
                found.append(int(info["pid"]))
                return True
        return False

    wait_until(delayed, 120, "a worker with delayed requests")
    return found[0]


def _settings(proxies: list[str]) -> dict[str, object]:
    return {
        "CRAWL_IDLE_TIMEOUT": 6, "KAFKA_PARTITION_BY": "url", "LOG_LEVEL": "INFO",
        "RATELIMIT_RATE": RATE, "RATELIMIT_BURST": BURST, "RATELIMIT_MIN_RATE": 1.0,
        "RETRY_TIMES": 6, "RETRY_BACKOFF_BASE": 0.5, "RETRY_BACKOFF_MAX": 4,
        "ROTATING_PROXY_LIST": ",".join(proxies), "PROXY_BACKOFF_BASE": 10,
        "DOWNLOAD_TIMEOUT": 10, "CONCURRENT_REQUESTS": 16,
    }


def test_faulty_origin_through_proxies_with_a_kill_during_backoff(stack, crawl_id, tmp_path):
    env = {**stack.env(), "CRAWL_ID": crawl_id}
    origin_log = tmp_path / "origin.jsonl"
    origin, base = start_origin(PAGES, origin_log, hosts=HOSTS, faults=Faults(max_failures=2),
                                seed=3)
    with start_proxies(tmp_path / "proxies") as proxies, origin:
        cmd = worker_command(base + "/", _settings(proxies.all))
        cmd += ["-a", "allowed_domains=" + ",".join(HOSTS)]
        with running(2, cmd, env, tmp_path / "logs") as workers:
            # kill -9 a worker while it holds requests backing off in its buffer
            wait_until(lambda: sum(e["status"] in (429, 503) for e in read_log(origin_log)) >= 10,
                       180, "faults answered")
            pid = _wait_for_backoff(env, crawl_id)
            victim = next(i for i, w in enumerate(workers) if w.process.pid == pid)
            os.kill(pid, signal.SIGKILL)
            workers[victim].process.wait()
            workers[victim].log.close()
            time.sleep(1)
            workers[victim] = start_worker(victim, cmd, env, tmp_path / "logs")
            codes = wait_all(workers, timeout=420)
            logs = worker_logs(workers)
        entries = read_log(origin_log)
    assert codes == [0, 0], logs[-5000:]
    with MongoClient(env["MONGO_URI"]) as client:
        db = client["crawler"]
        stored = [d["url"] for d in db[crawl_id].find({}, {"url": 1})]
        failed = [d["url"] for d in db[f"{crawl_id}.failures"].find({}, {"url": 1})]
    expected = set(site_urls(origin.base_urls, PAGES))
    assert len(stored) == len(set(stored)), "a page was stored twice"
    lost = expected - set(stored) - set(failed)
    assert not lost, f"{len(lost)} pages neither stored nor recorded as failed"
    assert len(failed) / PAGES < 0.005, f"failure rate {len(failed) / PAGES:.1%}: {failed[:5]}"
    # The bucket limits when the crawler sends; the slow proxy holds each request SLOW_DELAY
    # seconds before forwarding it, so its arrivals are moved back to when they were sent.
    slow = proxies.slow.rsplit("/", 1)[-1]
    sent = [{**e, "ts": e["ts"] - SLOW_DELAY} if e.get("proxy") == slow else e for e in entries]
    for host in HOSTS:
        peak = max_per_window(sent, host)
        assert peak <= RATE + BURST, f"{host} got {peak} requests in one second"
    # Bad proxies are evicted after a bounded number of requests, shared by both workers.
    dead_id = proxies.dead.rsplit("@", 1)[-1].split("//")[-1]
    forbidden_id = proxies.forbidden.rsplit("@", 1)[-1].split("//")[-1]
    for bad in (dead_id, forbidden_id):
        assert _proxy_uses(logs, bad) <= 15, f"proxy {bad} kept being used"
    assert "user:pass" not in logs, "proxy credentials leaked into a log"
