"""``scrapy cluster trace`` answers for every URL, and the WARC files hold every page, of a
crawl that lost a worker to ``kill -9``.

Three workers at the defaults plus ``WARC_ENABLED`` crawl a site with every way a URL can end
(the ledger's site, plus a calendar-like path trap); one is killed with ``kill -9`` mid-crawl.
Then, from the status index (``<CRAWL_ID>.urls``): every stored page names a worker that
stored it, the offsite link and the trap say why they were filtered, the page that always
fails says how many attempts it had, a ``utm_`` variant answers for its canonical URL, and a
URL the crawl never saw is ``unknown``. And from the WARC files, once the killed worker's
file is repaired as the next worker on the host would: ``warcio check`` passes on each, every
stored page has a response (or revisit) record, and a page has more than one only if the
index shows it fetched more than once (a re-delivery after the kill).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from helpers import ledger_report
from pymongo import MongoClient
from scrapy.settings import Settings
from servers.ledgersite import LedgerSite

from crawler.archive import WriterId, prepare_directory
from crawler.config.keys import worker_id
from crawler.localstack.demo import running, wait_all, worker_logs
from crawler.operations import trace

SPIDER = Path(__file__).parent.parent / "spiders" / "ledger.py"
OFFSITE = "http://127.0.0.9:9/elsewhere"
TRAP = "/cal/2026/x/x/x/x/"  # "x" four times: past URLTRAP_MAX_SEGMENT_REPEATS (3)


class TraceSite(LedgerSite):
    """The ledger's site, its home page linking a path trap too."""

    def answer(self, path: str) -> tuple[int, dict[str, str], bytes]:
        status, headers, body = super().answer(path)
        if path == "/":
            body = body.replace(b"</body>", f'<a href="{TRAP}">cal</a></body>'.encode())
        return status, headers, body


def _cli(crawl_id: str, url: str, env: dict[str, str]) -> dict[str, Any]:
    full = {**os.environ, "SCRAPY_SETTINGS_MODULE": "crawler.settings", **env}
    done = subprocess.run([sys.executable, "-m", "scrapy", "cluster", "trace", crawl_id, url,
                           "--json"], env=full, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    return dict(json.loads(done.stdout))


def _wait(what: str, check: Any, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def _warc_pages(directory: Path) -> tuple[list[Path], dict[str, list[int]]]:
    """The WARC files of *directory* (each passing ``warcio check`` and ``gzip -t``: warcio
    does not see a cut last member) and their response and revisit records per URL: the PID
    of each record's writer."""
    from warcio.archiveiterator import ArchiveIterator

    files = sorted(directory.glob("*.warc.gz"))
    counts: dict[str, list[int]] = {}
    for path in files:
        writer = WriterId.of_file(path.name)
        assert writer is not None, path
        for tool in (["warcio", "check", str(path)], ["gzip", "-t", str(path)]):
            done = subprocess.run([str(Path(sys.executable).parent / tool[0]), *tool[1:]]
                                  if tool[0] == "warcio" else tool, capture_output=True,
                                  text=True, timeout=120)
            assert done.returncode == 0, (tool, done.stdout[-2000:], done.stderr[-2000:])
        with path.open("rb") as stream:
            for record in ArchiveIterator(stream):
                if record.rec_type in ("response", "revisit"):
                    url = record.rec_headers.get_header("WARC-Target-URI")
                    counts.setdefault(url, []).append(writer.pid)
    return files, counts


def _pid(worker: str) -> int:
    return int(worker.split(":")[-2])  # host:pid:hex (crawler.config.keys.worker_id)


def _storers(index: Any, pids: set[int]) -> list[int]:
    """The *pids* of workers that have a ``stored`` event in the status *index*."""
    found = index.distinct("events.worker", {"events.event": "stored"})
    return sorted({_pid(w) for w in found} & pids)


def test_trace_answers_for_every_url_after_a_kill(stack: Any, crawl_id: str,
                                                  tmp_path: Path) -> None:
    site = TraceSite(offsite=OFFSITE).start()
    env = {**stack.env(), "CRAWL_ID": crawl_id}
    warc = tmp_path / "warc"  # WARC_DIR: not the default "warc" of the working directory
    cmd = [sys.executable, "-m", "scrapy", "runspider", str(SPIDER),
           "-a", f"start_urls={site.base}/", "-s", "WARC_ENABLED=True", "-s", f"WARC_DIR={warc}"]
    mongo = MongoClient(env["MONGO_URI"])
    items = mongo["crawler"][crawl_id]
    try:
        with running(3, cmd, env, tmp_path / "logs") as workers:
            pids = {w.process.pid for w in workers}
            _wait("100 pages stored", lambda: items.estimated_document_count() >= 100, 180)
            # the victim is a worker that has stored pages (one that joined late under CI's
            # load had stored none, and the kill proved less)
            index = mongo["crawler"][f"{crawl_id}.urls"]
            _wait("a worker with stored pages", lambda: bool(_storers(index, pids)), 60)
            victim = _storers(index, pids)[0]
            os.kill(victim, signal.SIGKILL)
            survivors = [w for w in workers if w.process.pid != victim]
            next(w for w in workers if w.process.pid == victim).process.wait()
            assert wait_all(survivors, timeout=300) == [0, 0], worker_logs(workers)[-5000:]
        stored = [d["url"] for d in items.find({}, {"url": 1})]
        settings = Settings({"MONGO_URI": env["MONGO_URI"]})
        traces = [asyncio.run(trace.lookup(settings, crawl_id, url)) for url in stored]
        offsite, trap = _cli(crawl_id, OFFSITE, env), _cli(crawl_id, site.base + TRAP, env)
        flaky = _cli(crawl_id, f"{site.base}/flaky", env)
        variant = _cli(crawl_id, f"{site.base}/p/3?utm_source=mail", env)
        unknown = _cli(crawl_id, f"{site.base}/never/linked", env)
        report = ledger_report(crawl_id, env)
        repaired = prepare_directory(warc, WriterId.of_worker(worker_id()))  # the killed one's
        files, records = _warc_pages(warc)
        again = {url: pids for url, pids in records.items() if len(pids) > 1}
        fetches = {url: sum(e["event"] == "fetched" for e in
                            asyncio.run(trace.lookup(settings, crawl_id, url))["events"])
                   for url in again}
    finally:
        site.stop()
        mongo.close()
    assert len(stored) == len(site.pages()) - 1  # /odd is rejected
    lost = [t["url"] for t in traces if t["state"] != "stored"]
    assert not lost, lost[:5]
    for found in traces:
        by = {_pid(e["worker"]) for e in found["events"] if e["event"] == "stored"}
        assert by and by <= pids, found
    killed = [t for t in traces if any(_pid(e["worker"]) == victim
                                       for e in t["events"] if e["event"] == "stored")]
    assert killed, "the killed worker stored nothing before the kill: the test proves less"
    assert offsite["state"] == "filtered" and offsite["reason"] == "offsite", offsite
    assert offsite["linked_from"] == site.base + "/", offsite
    assert trap["state"] == "filtered" and trap["reason"] == "path_repeats", trap
    assert flaky["state"] == "failed" and flaky["reason"] == "retries", flaky
    assert {e["attempts"] for e in flaky["events"] if e["event"] == "failed"} == {3}, flaky
    assert variant["url"] == f"{site.base}/p/3" and variant["state"] == "stored", variant
    assert [e["event"] for e in variant["events"]][:2] == ["discovered", "queued"], variant
    assert unknown == {"url": f"{site.base}/never/linked", "state": "unknown", "events": []}
    # each worker that stored pages wrote its own file (under CI's load one of the three
    # joined late and stored nothing, so it wrote none)
    storers = {_pid(e["worker"]) for t in traces for e in t["events"] if e["event"] == "stored"}
    writers = {WriterId.of_file(path.name).pid for path in files}  # type: ignore[union-attr]
    assert len(repaired) == 1 and storers <= writers, (repaired, files, storers)
    assert not [url for url in stored if url not in records], "stored pages with no record"
    # a page archived twice: the killed worker archived it and did not live to ack it, or
    # the index shows it fetched (its lease ended) more than once
    odd = {url: pids for url, pids in again.items() if victim not in pids and fetches[url] < 2}
    assert not odd, odd
    beyond = sum(len(pids) - 1 for pids in again.values())
    # the ledger's fetched pages (each record's first outcome) all have their record; what is
    # beyond them is a re-delivery's, or a page the killed worker archived and never ended
    total, first = sum(map(len, records.values())), sum(report["requests"]["fetched"].values())
    from_victim = sum(pids.count(victim) for pids in records.values())
    assert first <= total <= first + report["redelivered"] + from_victim, (total, report)
    print(f"WARC: {sum(map(len, records.values()))} response/revisit records for "
          f"{len(records)} pages, {beyond} beyond one ({sum(victim in p for p in again.values())}"
          f" pages the killed worker archived), {len(files)} files, repaired {repaired}")
