"""A flaky site never kills the proxy pool: two workers, a hostile origin, real proxies.

Issue 12's crawl, at the default settings apart from the proxy list (and the spider's
``allowed_domains`` argument): 121 pages on two loopback hosts of a fault origin with the
*hostile* profile (per page: 503 once, 429 with ``Retry-After: 1`` twice, a reset, 503 three
times, a 2 s answer; about 45% of first attempts fail), through five proxies: two healthy
proxy.py processes (one wants basic auth), a slow one (1.5 s per request), a dead port and
one that answers 403 to everything. Required:

- every page is stored exactly once, the ones that fail three times and then succeed too;
- no healthy (or slow) proxy is ever declared dead; the dead and the 403 ones are;
- no gap longer than 10 s between two arrivals at the origin while the crawl runs;
- the same with one worker killed with ``kill -9`` while it holds leased requests, apart from
  the group's failover: from the kill until the survivor owns every partition. It takes
  ``KAFKA_SESSION_TIMEOUT_MS`` (6 s) before the broker notices, then the rejoin (3-4 s on
  Tansu), during which the survivor's own partitions are revoked too (kafka-python's eager
  protocol), so the origin may see nothing for that long whatever the proxies do (CI once saw
  13.4 s). The failover is bounded on its own (``MAX_FAILOVER``).
"""

from __future__ import annotations

import itertools
import json
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest
from helpers import SHORT_IDLE, final_stat, wait_until, worker_with
from pymongo import MongoClient
from redis import Redis
from servers.faultorigin import Faults, read_log, scenario, site_urls, start_origin
from servers.testproxies import start_proxies

from crawler.localstack.demo import Worker, running, wait_all, worker_command
from crawler.politeness.proxypool import parse_proxy

pytestmark = pytest.mark.serial  # failover and gaps without a fetch are bounded in time

PAGES = 121
HOSTS = ("127.0.0.1", "127.0.0.2")
SEED = 1  # page 0 answers at once; 10 pages fail three times then succeed
FAULTS = Faults.parse("hostile")
MAX_GAP = 10.0  # seconds without an arrival at the origin
# seconds from the kill until the survivor owns every partition: the session timeout (6 s),
# the rejoin (Tansu: 3-4 s) and a heartbeat (1 s) took 10-11 s, once 16.7 s, on this machine
MAX_FAILOVER = 30.0


def _stats(worker: Worker) -> str:
    """The stats dump of the worker's run ('' if it was killed before it dumped any)."""
    log = Path(worker.log.name).read_text(errors="replace")
    return log.split("Dumping Scrapy stats", 1)[1] if "Dumping Scrapy stats" in log else ""


def _stat(dumps: list[str], key: str) -> int:
    return sum(final_stat(d, key) or 0 for d in dumps)


def _gaps(entries: list[dict[str, object]], excused: tuple[float, float] = (0.0, 0.0)) -> float:
    """The longest time between two arrivals, less its overlap with the *excused* span."""
    times = sorted(float(e["ts"]) for e in entries)  # type: ignore[arg-type]
    start, end = excused
    return max((b - a - max(0.0, min(b, end) - max(a, start))
                for a, b in itertools.pairwise(times)), default=0.0)


def _assigned(redis_url: str, crawl_id: str) -> dict[int, set[str]]:
    """Each live worker's partitions, by PID, as its heartbeat shows them."""
    client = Redis.from_url(redis_url)
    try:
        beats = [json.loads(v) for v in client.hvals(f"{{{crawl_id}}}:workers")]
    finally:
        client.close()
    return {int(b["info"]["pid"]): set(b["assigned"]) for b in beats}


def _kill_and_fail_over(env: dict[str, str], crawl_id: str, workers: list[Worker]
                        ) -> tuple[int, tuple[float, float]]:
    """Kill the worker holding leases; its index and the failover span: from the kill
    until the survivor's heartbeat shows every partition the two had owned."""
    pid = worker_with(env["REDIS_URL"], crawl_id, "leases")
    victim = next(i for i, w in enumerate(workers) if w.process.pid == pid)
    survivor = workers[1 - victim].process.pid
    every = set().union(*_assigned(env["REDIS_URL"], crawl_id).values())
    os.kill(pid, signal.SIGKILL)
    killed = time.time()
    wait_until(lambda: _assigned(env["REDIS_URL"], crawl_id).get(survivor, set()) >= every,
               120, "the survivor to own every partition")
    return victim, (killed, time.time())



def _seeds(origin: Any) -> str:
    """The root of each of the site's hosts: both are the operator's seeds, so private
    networks (closed by default, docs/security.md) stay open to both loopback addresses."""
    return ",".join(b + "/" for b in origin.base_urls)

@pytest.mark.parametrize("kill", [False, True], ids=["steady", "kill-9"])
def test_a_hostile_origin_behind_proxies_loses_nothing(stack, crawl_id, tmp_path, kill):
    env = {**stack.env(), "CRAWL_ID": crawl_id}
    origin_log = tmp_path / "origin.jsonl"
    origin, _base = start_origin(PAGES, origin_log, hosts=HOSTS, faults=FAULTS, seed=SEED)
    with start_proxies(tmp_path / "proxies") as proxies, origin:
        # RATELIMIT_UNRATED_RATE 0: this origin's 429s and 503s are injected per page whatever
        # the pace, so the default adaptation would hold both hosts to 1 request a second
        # (about 5 minutes instead of 30 s) and prove nothing more about the proxies or loss;
        # the adaptation's own test is test_adaptive_rate.py
        cmd = worker_command(_seeds(origin), {"ROTATING_PROXY_LIST": ",".join(proxies.all),
                                              "RATELIMIT_UNRATED_RATE": 0, **SHORT_IDLE})
        cmd += ["-a", "allowed_domains=" + ",".join(HOSTS)]
        with running(2, cmd, env, tmp_path / "logs") as workers:
            if kill:
                wait_until(lambda: len(read_log(origin_log)) >= 60, 180, "60 arrivals")
                victim, failover = _kill_and_fail_over(env, crawl_id, workers)
            codes = wait_all(workers, timeout=600)
            logs = "\n".join(Path(w.log.name).read_text(errors="replace") for w in workers)
            dumps = [_stats(w) for w in workers]
        entries = read_log(origin_log)
    assert codes == ([-9, 0] if kill and victim == 0 else [0, -9] if kill else [0, 0]), \
        logs[-5000:]
    urls = site_urls(origin.base_urls, PAGES)
    with MongoClient(env["MONGO_URI"]) as client:
        stored = [d["url"] for d in client["crawler"][crawl_id].find({}, {"url": 1})]
    assert len(stored) == len(set(stored)), "a page was stored twice"
    missing = sorted(set(urls) - set(stored))
    assert not missing, f"{len(missing)} of {PAGES} pages lost: {missing[:5]}"
    thrice = [u for u in urls if _scenario(u) == "503x3"]
    assert len(thrice) >= 5, "the site is not the one described"
    for healthy in [*proxies.healthy, proxies.slow]:
        proxy_id = parse_proxy(healthy).id
        assert f"Proxy {proxy_id} is dead" not in logs, f"healthy proxy {proxy_id} killed"
    for bad in (proxies.dead, proxies.forbidden):
        assert f"Proxy {parse_proxy(bad).id} is dead" in logs, f"{bad} never declared dead"
    if kill:
        assert failover[1] - failover[0] <= MAX_FAILOVER, f"failover took {failover}"
    gap = _gaps(entries, failover if kill else (0.0, 0.0))
    assert gap <= MAX_GAP, f"{gap:.1f}s without a fetch while healthy proxies existed"
    survivors = [d for d in dumps if d]
    assert _stat(survivors, "proxy/blame/origin") > 0, "no origin failure was seen as such"
    _check_shared_counts(env, crawl_id, proxies.forbidden, proxies.healthy)
    assert "user:pass" not in logs, "proxy credentials leaked into a log"


def _check_shared_counts(env: dict[str, str], crawl_id: str, forbidden: str,
                         healthy: list[str]) -> None:
    """The cluster-wide counts: the origin's failures per host, the 403 proxy's faults."""
    client = Redis.from_url(env["REDIS_URL"], decode_responses=True)
    hosts = client.hgetall(f"{{{crawl_id}}}:proxy:hosts")
    health = {k: json.loads(v) for k, v in client.hgetall(f"{{{crawl_id}}}:proxy:health").items()}
    for host in HOSTS:
        assert sum(int(v) for k, v in hosts.items() if k.startswith(f"origin:{host}:")) > 0
    assert health[parse_proxy(forbidden).id]["proxy_faults"] >= 1
    for proxy in healthy:
        record = health[parse_proxy(proxy).id]
        assert record["state"] != "dead" and record["origin_faults"] > 0, record


def _scenario(url: str) -> str | None:
    host, _, path = url.split("//", 1)[1].partition("/")
    return scenario(FAULTS, SEED, host.split(":")[0], "/" + path)
