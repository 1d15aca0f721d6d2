"""End to end: kill -9 aimed at workers that hold work, at start-up, in a rebalance, while the
crawl drains, and in a storm; nothing is lost, nothing is stored twice, the victims' work is
redelivered to other workers, and the duplicate work stays within what delivery allows.

Kill points come from ``random.Random(seed)``; the seed is ``KILL_SEED`` when set, printed at
the start and named in every failure (``KILL_SEED=<seed> pytest tests/test_e2e_kill.py``
replays the same choices; the cluster's timing still varies).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import wait_until
from kill_audit import (
    DuplicateWork,
    KillOutcome,
    acquisitions,
    by_agent,
    duplicate_work,
    page_fetches,
    read_topic,
    redeliveries,
)
from kill_cluster import ASSIGNED, JOINING, REVOKED, STARTED, KillCluster, kill_seed
from pymongo import MongoClient

from crawler.localstack import demo_site
from crawler.localstack.demo import stored_pages
from crawler.localstack.stack import Stack

PAGES = 2000
WORKERS = 3
AIMED = ("start-up", "rebalance", "draining", "storm-aimed")  # victims chosen as holders
pytestmark = pytest.mark.e2e


@pytest.fixture
def cluster(stack: Stack, crawl_id: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
            ) -> Iterator[tuple[KillCluster, demo_site.DemoServer]]:
    seed = kill_seed()
    with capsys.disabled():
        print(f"\nKILL_SEED={seed}", flush=True)
    site_dir = tmp_path / "site"
    demo_site.generate(site_dir, PAGES)
    server = demo_site.serve(site_dir, log_requests=True)
    kc = KillCluster(stack.env(), crawl_id, server.base_url + "/", tmp_path / "logs", seed)
    try:
        yield kc, server
    finally:
        kc.close()
        server.close()


def _stored(kc: KillCluster) -> int:
    return stored_pages(kc.env["MONGO_URI"], "crawler", kc.crawl_id)[0]


def _wait(kc: KillCluster, predicate: Callable[[], bool], what: str, timeout: float = 300,
          poll: float = 0.2) -> None:
    """Wait for *predicate*; *poll* is short where the moment to kill lasts about a second."""
    if poll >= 0.2:
        wait_until(predicate, timeout, f"{what} (KILL_SEED={kc.seed})")
        return
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what} (KILL_SEED={kc.seed})"
        time.sleep(poll)


def _kill_holder(kc: KillCluster, phase: str, ready: Callable[[], bool] = lambda: True,
                 give_up: Callable[[], bool] = lambda: False) -> bool:
    """Wait until *ready* and some worker holds leases and uncommitted records; kill it.

    False if *give_up* came true first (the crawl ended before such a moment)."""
    _wait(kc, lambda: (ready() and bool(kc.holders())) or give_up(),
          f"a worker holding work ({phase})")
    holders = kc.holders()
    if not holders:
        print(f"[kill seed={kc.seed}] no worker held work in phase {phase}", flush=True)
        return False
    kc.kill(kc.rng.choice(holders), phase)
    return True


def _draining_kill(kc: KillCluster, left: int) -> None:
    """Kill a worker once *left* pages are left to store: one whose heartbeat shows it holding
    work if one does within two heartbeats, else any running one. Always a kill: holders
    alone made it optional (2 of 3 full runs on 2026-12-06 ended the crawl before a heartbeat
    showed a holder, KILL_SEED=2479781584, 2577967911), and a test whose kill may not happen
    proves nothing the times it does not."""
    _wait(kc, lambda: _stored(kc) >= PAGES - left, "the crawl's tail", poll=0.05)
    assert _stored(kc) < PAGES and kc.alive(), f"the crawl ended first (KILL_SEED={kc.seed})"
    deadline = time.monotonic() + 2.0
    while not (holders := kc.holders()) and time.monotonic() < deadline:
        time.sleep(0.05)
    if not holders:
        print(f"[kill seed={kc.seed}] no heartbeat showed a holder: killing any worker",
              flush=True)
    kc.kill(kc.rng.choice(holders or kc.alive()), "draining")


def _log_has(kc: KillCluster, index: int, text: str, after: int = 0) -> bool:
    return text in kc.log_text(index)[after:]


def _startup_kills(kc: KillCluster) -> None:
    """One worker killed before it joins the group, one while it joins, one holding work."""
    kc.start(0)
    _wait(kc, lambda: STARTED in kc.log_text(0), "worker 0 running", poll=0.02)
    # a kill point, not a wait for a result. Scrapy's first line comes well under a second
    # before the frontier opens: 0.3 s once missed it (CI, KILL_SEED=1200076484, after
    # kafka-python's unprinted DEBUG lines stopped being formatted), so the point is early
    time.sleep(kc.rng.uniform(0.0, 0.05))
    kc.kill(0, "pre-join")
    _wait(kc, lambda: _log_has(kc, 0, JOINING) and not _log_has(kc, 0, ASSIGNED),
          "worker 0 joining", poll=0.02)
    kc.kill(0, "joining")
    for index in range(1, WORKERS):
        kc.start(index)
    _kill_holder(kc, "start-up")


def _rebalance_kill(kc: KillCluster, attempts: int = 3) -> None:
    """Start a worker and kill one that holds work while the group rebalances for it. On
    Apache Kafka a rebalance is over within a second (on Tansu it took seconds), and under
    load the kill came after it twice in a day's full runs ("rebalance: assigned"): a kill
    that came late is kept as ``rebalance-late`` (it still loses nothing) and another worker
    is started for another rebalance, up to *attempts* times."""
    for _ in range(attempts):
        _wait(kc, lambda: bool(kc.holders()), "a worker holding work (rebalance)")
        victim = kc.rng.choice(kc.holders())
        mark = kc.log_size(victim)
        kc.start(max(kc.current) + 1)
        _wait(kc, lambda v=victim, m=mark: REVOKED in kc.log_since(v, m),
              "a rebalance after a worker started", poll=0.01)
        # restarted: the crawl may finish meanwhile (it did 2 s before the restart in a run
        # with KILL_SEED=1200076484); the restarted worker then joins, finds the crawl drained
        # and exits by itself (on Tansu, the broker before Apache Kafka, it looped in SyncGroup)
        kill = kc.kill(victim, "rebalance")
        if kill.log_states == "rebalancing":
            return
        kill.phase = "rebalance-late"


def _finish(kc: KillCluster, server: demo_site.DemoServer,
            capsys: pytest.CaptureFixture[str]) -> None:
    """Wait for every worker to exit, print the duplicate-work figures, check everything."""
    codes = kc.wait_codes(timeout=600)
    client: MongoClient[dict[str, Any]]
    with MongoClient(kc.env["MONGO_URI"]) as client:
        urls = [doc["url"] for doc in client["crawler"][kc.crawl_id].find({}, {"url": 1})]
    expected = demo_site.site_urls(server.base_url, PAGES)
    assert server.request_log is not None
    fetches = page_fetches(server.request_log, server.base_url, expected)
    records = read_topic(kc.env["KAFKA_BOOTSTRAP_SERVERS"], kc.topic)
    outcomes = [redeliveries(k, records, fetches) for k in kc.kills]
    epochs = {g.agent: acquisitions(kc.generation_log(g)) for g in kc.history}
    work = duplicate_work(fetches, records, kc.log_dir, outcomes, epochs)
    with capsys.disabled():
        print("\n" + "\n".join(work.lines(kc.seed, outcomes)))
        print("  fetches by process: "
              + ", ".join(f"{a}={n}" for a, n in sorted(by_agent(fetches).items())))
    seed = f"(KILL_SEED={kc.seed})"
    assert all(c == 0 for c in codes), f"exit codes {codes} {seed}\n{kc.tails()}"
    missing = set(expected) - set(urls)
    assert not missing, f"{len(missing)} pages lost, e.g. {sorted(missing)[:5]} {seed}"
    assert len(urls) == len(set(urls)) == PAGES, f"stored {len(urls)} documents {seed}"
    _check(kc, work, outcomes)


def _check(kc: KillCluster, work: DuplicateWork, outcomes: list[KillOutcome]) -> None:
    seed = f"(KILL_SEED={kc.seed})"
    assert work.unique == work.pages, f"{work.pages - work.unique} pages never fetched {seed}"
    for o in outcomes:
        assert not o.missing, (
            f"{len(o.missing)} pages {o.kill.agent} fetched from uncommitted records were never "
            f"fetched again by another worker, e.g. {sorted(o.missing)[:3]} {seed}")
    aimed = [o for o in outcomes if o.kill.phase in AIMED]
    assert sum(len(o.held) for o in aimed) > 0, (
        f"no aimed kill found a page its victim fetched above the committed offset {seed}")
    assert not work.over_bound, (
        f"{len(work.over_bound)} times a worker fetched a page more often than it was "
        f"assigned the page's partition (a second copy in one epoch must be dropped), "
        f"e.g. {work.over_bound[:3]} {seed}")


def test_kills_at_start_up_in_a_rebalance_and_while_draining(
        cluster: tuple[KillCluster, demo_site.DemoServer],
        capsys: pytest.CaptureFixture[str]) -> None:
    kc, server = cluster
    _startup_kills(kc)
    # early enough for the rebalance to end before the crawl does: a worker's start-up (seconds
    # under CI's load) and up to three tries run while the crawl goes on at ~100 pages a second
    # (from 20-50 % the crawl once ended first, KILL_SEED=999620689, 1 CI run in 4)
    under_way = int(PAGES * kc.rng.uniform(0.1, 0.3))
    _wait(kc, lambda: _stored(kc) >= under_way, "the crawl under way")
    _rebalance_kill(kc)
    # the crawl's tail: its last 300-700 pages, two seconds and more at its pace, so that a
    # heartbeat (one a second) shows a worker holding work in it (the last 100-300 were
    # over within a heartbeat or two, and the kill then did not happen: KILL_SEED=2479781584);
    # no more than half of what the rebalance left, so that the kill is in the tail
    left = min(kc.rng.randint(300, 700), (PAGES - _stored(kc)) // 2)
    _draining_kill(kc, left)
    _wait(kc, lambda: (_stored(kc) == PAGES and kc.drained()) or not kc.alive(),
          "every page stored and the crawl drained")
    if kc.alive():
        time.sleep(kc.rng.uniform(0.0, 2.0))  # a kill point inside the idle timeout
        # restarted too: a worker started on a drained or finished crawl exits by itself
        # after CRAWL_IDLE_TIMEOUT. The point is that this kill loses nothing.
        kc.kill(kc.rng.choice(kc.alive()), "idle")
    _finish(kc, server, capsys)
    phases = {k.phase: k.log_states for k in kc.kills}
    wanted = {"pre-join": "started", "joining": "joining", "rebalance": "rebalancing"}
    assert "draining" in phases, f"no kill while the crawl drained (KILL_SEED={kc.seed})"
    assert all(phases.get(k) == v for k, v in wanted.items()), (
        f"kills missed their phase: {phases} (KILL_SEED={kc.seed})")


def test_kill_storm(cluster: tuple[KillCluster, demo_site.DemoServer],
                    capsys: pytest.CaptureFixture[str]) -> None:
    """A worker killed every few seconds and restarted at once, 8-10 times: half of the kills
    wait for a worker that holds work and hit it, the others hit any worker (often one
    that is still starting or joining)."""
    kc, server = cluster
    for index in range(WORKERS):
        kc.start(index)
    _kill_holder(kc, "storm-aimed")
    for _ in range(kc.rng.randint(7, 9)):
        time.sleep(kc.rng.uniform(2.0, 5.0))  # a kill point, not a wait for a result
        if kc.rng.random() < 0.5 and _kill_holder(
                kc, "storm-aimed", give_up=lambda: _stored(kc) == PAGES or not kc.alive()):
            continue
        if kc.alive():
            kc.kill(kc.rng.choice(kc.alive()), "storm")
    _finish(kc, server, capsys)
