"""The crawl ledger reconciles to zero: two workers, one killed with ``kill -9`` mid-crawl, a
site with every way a URL can end, seeds of every kind; ``scrapy cluster report --json``
accounts for each record, during the crawl and after every worker has exited."""

from __future__ import annotations

import gzip
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import redis
from helpers import ledger_report
from kafka import KafkaProducer
from pymongo import MongoClient
from servers.ledgersite import LedgerSite

from crawler.config.keys import CrawlKeys
from crawler.localstack.demo import running, start_worker, wait_all, worker_logs

SPIDER = Path(__file__).parent.parent / "spiders" / "ledger.py"  # site, with an item schema

# None: distributed mode's defaults bound the depth (DEPTH_LIMIT, which the site's /deep/
# chain passes) and obey robots.txt (crawler.security.limits)
SETTINGS: dict[str, Any] = {}


def _scrapy(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    full = {**os.environ, "SCRAPY_SETTINGS_MODULE": "crawler.settings", **env}
    return subprocess.run([sys.executable, "-m", "scrapy", *args], env=full,
                          capture_output=True, text=True, timeout=120)




def _wait(what: str, check: Any, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def _seed_files(tmp_path: Path, base: str) -> tuple[Path, Path]:
    plain = tmp_path / "seeds.txt"
    upper = base.replace("http://127.0.0.1", "HTTP://127.0.0.1")
    plain.write_text(f"{base}/seeded/1\n{upper}/./seeded/2#top\n{base}/\nnot a url\n"
                     f"{base}/seeded/1\n")
    packed = tmp_path / "seeds.csv.gz"
    packed.write_bytes(gzip.compress(
        f"url,priority\n{base}/seeded/3,5\nhttp://127.0.0.9:9/outside,1\n".encode()))
    return plain, packed


def test_every_url_is_accounted_for_after_a_kill(stack: Any, crawl_id: str,
                                                 tmp_path: Path) -> None:
    site = LedgerSite(offsite="http://127.0.0.9:9/elsewhere").start()
    env = {**stack.env(), "CRAWL_ID": crawl_id}
    cmd = [sys.executable, "-m", "scrapy", "runspider", str(SPIDER),
           "-a", f"start_urls={site.base}/"]
    for name, value in SETTINGS.items():
        cmd += ["-s", f"{name}={value}"]
    logs = tmp_path / "logs"
    client = redis.Redis.from_url(env["REDIS_URL"])
    try:
        with running(2, cmd, env, logs) as workers:  # kills and closes what is left, at the end
            _wait("the workers to open", lambda: client.exists(CrawlKeys(crawl_id).scope), 90)
            plain, packed = _seed_files(tmp_path, site.base)
            added = _scrapy(["seed", "site", "-f", str(plain)], env)
            assert added.returncode == 0, added.stderr
            assert f"{plain}:4: skipped: invalid URL 'not a url'" in added.stderr
            refused = _scrapy(["seed", "site", "--scope", "reject", "-f", str(packed)], env)
            assert refused.returncode == 0, refused.stderr
            assert "outside the crawl's scope" in refused.stderr
            producer = KafkaProducer(bootstrap_servers=env["KAFKA_BOOTSTRAP_SERVERS"], acks="all")
            for value in (b"http://127.0.0.10:9/raw-outside", b"garbage seed"):  # any client
                producer.send(f"{crawl_id}.seeds", value=value)
            producer.flush()
            producer.close()
            mongo = MongoClient(env["MONGO_URI"])
            items = mongo["crawler"][crawl_id]
            _wait("100 pages stored", lambda: items.estimated_document_count() >= 100, 120)
            os.kill(workers[0].process.pid, signal.SIGKILL)
            workers[0].process.wait()
            during = ledger_report(crawl_id, env)
            assert during["finished"] is False
            assert during["unaccounted"] == 0, during
            workers[0].log.close()
            workers[0] = start_worker(0, cmd, env, logs)
            assert wait_all(workers, timeout=300) == [0, 0], worker_logs(workers)[-5000:]
            report = ledger_report(crawl_id, env)
            logs_text = worker_logs(workers)
            stored = items.count_documents({})
    finally:
        site.stop()
    assert report["finished"] is True, report
    assert report["unaccounted"] == 0 and report["pending"] == 0, report
    assert report["overcounted"] == 0, report
    assert report["stored"] == stored == len(site.pages()) - 1, (report, sorted(site.pages()))
    assert report["rejected"] == 1 and report["items"]["dropped"] >= 1, report  # /odd
    rejected = mongo["crawler"][f"{crawl_id}.rejected"].find_one()
    assert rejected is not None and rejected["url"] == f"{site.base}/odd", rejected
    assert "invalid item: title" in rejected["reason"] and "reject me" in rejected["item"]
    assert {"robots"} <= set(report["dropped"]), (report, site.hits.get("/robots.txt"),
                                                  site.hits.get("/private/secret"))
    assert "unknown" not in report["dropped"], report
    assert report["requests"]["failed"] == {"retries": 1}, report  # /flaky, 500 every time
    assert report["requests"]["fetched"]["4xx"] >= 400, report  # /missing/<n>
    assert report["discarded"]["depth"] >= 1 and report["discarded"]["offsite"] >= 1, report
    seeds = report["seeds"]
    assert seeds["invalid"] == 1 and seeds["out_of_scope"] == 1, report  # the raw ones
    assert seeds["duplicate"] >= 2, report  # "/" and /seeded/1 again (and every start URL)
    assert seeds["submitted"] == {"published": 5, "invalid": 1, "out_of_scope": 1}, report
    assert f"{site.base}/seeded/2" in site.pages()  # normalised: host case, ./, fragment
    assert report["dead"] == 1, report
    assert site.hits.get("/private/secret") is None  # robots.txt, for every waiting request
    # robots.txt once per host per worker process (the two workers and the restarted one),
    # not once per request: ~1,000 requests went to this host
    assert 1 <= site.hits.get("/robots.txt", 0) <= 3, site.hits.get("/robots.txt")
    final = f"Crawl ledger: balance   pending 0, unaccounted 0, redelivered {report['redelivered']}"
    assert final in logs_text, logs_text[-3000:]  # each worker's last lines: the same numbers
