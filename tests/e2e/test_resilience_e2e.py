"""Two workers crawl a faulty origin through real proxies, politely, losing nothing.

The origin answers 429 with Retry-After, intermittent 503s, slow responses and
connection resets and logs every request. Most pages fault at most twice, which
the default retry budgets (6 for "come back later", 4 for network errors) cover;
a few *doomed* pages fault on every attempt, more often than any budget allows.
Among the proxies one is dead, one slow, one answers 403 and one wants basic
auth. One worker is killed with kill -9 while requests are backing off, and
restarted. Every reachable page ends stored exactly once or, for exactly the
doomed ones, recorded in ``<CRAWL_ID>.failures``.
"""

from __future__ import annotations

import os
import re
import signal
import time
from collections import Counter
from pathlib import Path
from typing import Any

from helpers import final_stat, wait_until, worker_with
from pymongo import MongoClient
from servers.faultorigin import (
    Faults,
    Site,
    is_doomed,
    max_per_window,
    read_log,
    site_urls,
    start_origin,
)
from servers.testproxies import SLOW_DELAY, start_proxies

from crawler.localstack.demo import Worker, running, start_worker, wait_all, worker_command
from crawler.politeness.proxypool import parse_proxy

PAGES = 150
HOSTS = ("127.0.0.1", "127.0.0.2")
RATE, BURST = 6.0, 3.0
SEED = 3
FAULTS = Faults(max_failures=2, doomed=0.05)  # seed 3: pages 40, 102 and 138 are doomed
# a doomed page faults with 503s, 429s and resets: given up once the "later" budget
# (RETRY_LATER_TIMES, 6) or the network one (RETRY_NETWORK_TIMES, 4) is spent
MIN_ATTEMPTS, MAX_ATTEMPTS = 1 + 4, 1 + 6 + 4
_LINK = re.compile(r">Page (\d+)</a>")


def _address(url: str) -> str:
    """host:port of a proxy URL: what the proxy itself puts in ``X-Test-Proxy``."""
    return url.rsplit("@", 1)[-1].split("//")[-1]


def _final_stats(worker: Worker) -> str:
    """The stats dump of the worker's last run (its log holds every run): fails without one."""
    log = Path(worker.log.name).read_text(errors="replace")
    last_run = log.rsplit(" started (bot: ", 1)[-1]
    assert "Dumping Scrapy stats" in last_run, f"worker {worker.index} dumped no stats"
    return last_run.split("Dumping Scrapy stats", 1)[1]


def _proxy_stat(dumps: list[str], proxy_id: str, kind: str) -> int:
    """``proxy/<id>/<kind>`` summed over the final stats of the workers."""
    return sum(final_stat(dump, f"proxy/{proxy_id}/{kind}") or 0 for dump in dumps)


def _reachable(site: Site) -> set[int]:
    """The pages a crawl from page 0 requests: links are followed from every page but a doomed
    one (it never answers 200)."""
    seen, todo = {0}, [0]
    while todo:
        n = todo.pop()
        if is_doomed(FAULTS, SEED, site.hosts[n % len(site.hosts)], site.path(n)):
            continue
        for target in map(int, _LINK.findall(site.render(n).decode())):
            if target not in seen:
                seen.add(target)
                todo.append(target)
    return seen


def _settings(proxies: list[str]) -> dict[str, object]:
    """Defaults except: the rate limiter and the proxies are switched on by setting them;
    RATELIMIT_MIN_RATE 3 instead of 0.05, or the 429/503s could halve the rate down to one
    request every 20 s, far past the test's time budget (0.05 is right for a real site
    asking to slow down; at 1, the floor of earlier runs, the crawl ran at 2 requests a
    second for 130 s); RETRY_BACKOFF_MAX 8 instead of 60: a doomed page's ten retries, with
    full jitter under a ceiling doubling to 60 s, took up to 150 s after the rest of the
    crawl was done, and what is under test is the budgets, not the ceiling's value
    (tests/unit pin the schedule); CRAWL_IDLE_TIMEOUT 6 instead of 30 ends it sooner."""
    return {
        "CRAWL_IDLE_TIMEOUT": 6, "RETRY_BACKOFF_MAX": 8.0,
        "RATELIMIT_RATE": RATE, "RATELIMIT_BURST": BURST, "RATELIMIT_MIN_RATE": 3.0,
        "ROTATING_PROXY_LIST": ",".join(proxies),
    }



def _seeds(origin: Any) -> str:
    """The root of each of the site's hosts: both are the operator's seeds, so private
    networks (closed by default, docs/security.md) stay open to both loopback addresses."""
    return ",".join(b + "/" for b in origin.base_urls)

def test_faulty_origin_through_proxies_with_a_kill_during_backoff(stack, crawl_id, tmp_path):
    env = {**stack.env(), "CRAWL_ID": crawl_id}
    origin_log = tmp_path / "origin.jsonl"
    origin, base = start_origin(PAGES, origin_log, hosts=HOSTS, faults=FAULTS, seed=SEED)
    with start_proxies(tmp_path / "proxies") as proxies, origin:
        cmd = worker_command(_seeds(origin), _settings(proxies.all))
        cmd += ["-a", "allowed_domains=" + ",".join(HOSTS)]
        with running(2, cmd, env, tmp_path / "logs") as workers:
            # kill -9 a worker while it holds requests backing off in its buffer
            wait_until(lambda: sum(e["status"] in (429, 503) for e in read_log(origin_log)) >= 10,
                       180, "faults answered")
            pid = worker_with(env["REDIS_URL"], crawl_id, "delayed")
            victim = next(i for i, w in enumerate(workers) if w.process.pid == pid)
            os.kill(pid, signal.SIGKILL)
            workers[victim].process.wait()
            workers[victim].log.close()
            time.sleep(1)  # not an assertion: the restarted worker rejoins a group still settling
            workers[victim] = start_worker(victim, cmd, env, tmp_path / "logs")
            codes = wait_all(workers, timeout=600)
            logs = "\n".join(Path(w.log.name).read_text(errors="replace") for w in workers)
            dumps = [_final_stats(w) for w in workers]
        entries = read_log(origin_log)
    assert codes == [0, 0], logs[-5000:]
    with MongoClient(env["MONGO_URI"]) as client:
        db = client["crawler"]
        stored = [d["url"] for d in db[crawl_id].find({}, {"url": 1})]
        failed = {d["url"]: d for d in db[f"{crawl_id}.failures"].find()}
    port = int(base.rsplit(":", 1)[1])
    site = Site(HOSTS, port, PAGES, SEED)
    urls = site_urls(origin.base_urls, PAGES)
    reachable = _reachable(site)
    doomed = {urls[n] for n in reachable
              if is_doomed(FAULTS, SEED, HOSTS[n % len(HOSTS)], site.path(n))}
    assert len(doomed) == 3 and len(reachable) == PAGES, "the site is not the one described"
    assert len(stored) == len(set(stored)), "a page was stored twice"
    assert set(failed) == doomed, f"failures {sorted(failed)} are not the doomed {sorted(doomed)}"
    assert set(stored) == set(urls) - doomed, (
        f"not stored: {sorted(set(urls) - doomed - set(stored))[:5]}; "
        f"doomed but stored: {sorted(doomed & set(stored))}")
    _check_attempts(entries, failed, port)
    _check_rate(entries, proxies.slow)
    _check_proxies(dumps, entries, proxies.dead, proxies.forbidden, proxies.healthy[-1], logs)
    assert "user:pass" not in logs, "proxy credentials leaked into a log"


def _check_attempts(entries: list[dict[str, object]], failed: dict[str, dict[str, object]],
                    port: int) -> None:
    """Each doomed page was given up only after its whole budget reached the origin."""
    tries = Counter(f"http://{e['site']}:{port}{e['path']}" for e in entries if e["attempt"])
    for url, failure in failed.items():
        assert MIN_ATTEMPTS <= failure["attempts"] <= MAX_ATTEMPTS, failure
        assert tries[url] >= failure["attempts"], f"{url} given up after {tries[url]} requests"


def _check_rate(entries: list[dict[str, object]], slow_proxy: str) -> None:
    """The bucket limits when the crawler sends; the slow proxy holds each request SLOW_DELAY
    seconds before forwarding it, so its arrivals are moved back to when they were sent."""
    slow = _address(slow_proxy)
    sent = [{**e, "ts": float(e["ts"]) - SLOW_DELAY} if e.get("proxy") == slow else e  # type: ignore[arg-type]
            for e in entries]
    for host in HOSTS:
        peak = max_per_window(sent, host)
        assert peak <= RATE + BURST, f"{host} got {peak} requests in one second"


def _check_proxies(dumps: list[str], entries: list[dict[str, object]], dead: str,
                   forbidden: str, credentialed: str, logs: str) -> None:
    """Bad proxies were tried, declared dead and evicted after a bounded number of requests
    shared by both workers (a worker may only learn it from the other: dead proxies are
    probed, never sent requests again); the credentialed proxy forwarded requests (it
    refuses any without them)."""
    # the dead port is certain at its first refusal; the 403 proxy is blamed by comparison,
    # once each worker has its 6 answers and 10 through the others (docs/proxies.md), and
    # its 403s are re-issued meanwhile without reaching the origin (23 seen for 2 workers
    # and a restart on this rate-limited origin, 17 on the unlimited hostile one)
    for bad, bound in ((parse_proxy(dead).id, 15), (parse_proxy(forbidden).id, 40)):
        uses = _proxy_stat(dumps, bad, "requests")
        assert uses <= bound, f"proxy {bad}: {uses} requests"
        assert f"Proxy {bad} is dead" in logs, f"proxy {bad} never declared dead"
    assert "@" in credentialed
    assert _proxy_stat(dumps, parse_proxy(credentialed).id, "requests") >= 1
    through = [e for e in entries
               if e.get("proxy") == _address(credentialed) and e["status"] == 200]
    assert len(through) >= 5, f"{len(through)} pages came through the credentialed proxy"
