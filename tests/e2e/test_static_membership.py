"""Static group membership (``KAFKA_GROUP_INSTANCE_ID``, KIP-345) on Apache Kafka: a worker
killed with ``kill -9`` and started again with the same id takes its own partitions back, and
no other worker's partitions move: the group is not rebalanced.

Three workers crawl a 2,000-page site, each with its own instance id (the one setting this
test sets: static membership is off by default, see docs/cluster.md). Mid-crawl the third is
killed and restarted at once. The group's assignments, read from the broker
(DescribeGroups), are the same before and after, the restarted worker has a new member id
under the same instance id, the other two log no revocation, and every page is stored once.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path
from typing import Any

import pytest
from helpers import wait_until
from kafka import KafkaAdminClient
from kafka_log import group_of
from pymongo import MongoClient

from crawler.localstack import demo_site as site
from crawler.localstack.demo import (
    Worker,
    start_worker,
    stop_workers,
    stored_pages,
    wait_all,
    worker_command,
    worker_logs,
)
from crawler.localstack.stack import Stack

# the restarted member must rejoin within the session timeout, which a crawl beside it on
# two cores can push it past (run 4 of 2026-12-06: a rebalance, 4 revocations instead of 2)
pytestmark = pytest.mark.serial

PAGES = 2000
REVOKED = "Partitions revoked"  # crawler.frontier.consumer, at every rebalance


def _members(bootstrap: str, group: str) -> dict[str, dict[str, Any]]:
    """instance id -> {member_id, partitions} of the group's members, as the broker says."""
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10000)
    try:
        described = admin.describe_groups([group])[group]
    finally:
        admin.close()
    if described.get("group_state") != "Stable":
        return {}
    return {m["group_instance_id"]: {
        "member_id": m["member_id"],
        "partitions": sorted((a["topic"], p) for a in m["member_assignment"]["assigned_partitions"]
                             for p in a["partitions"])}
        for m in described["members"]}


def test_a_static_member_restarted_takes_its_partitions_back_and_nothing_moves(
        stack: Stack, crawl_id: str, tmp_path: Path) -> None:
    env = {**stack.env(), "CRAWL_ID": crawl_id}
    bootstrap, group = env["KAFKA_BOOTSTRAP_SERVERS"], group_of(crawl_id)
    site.generate(tmp_path / "site", PAGES)
    server = site.serve(tmp_path / "site")
    logs = tmp_path / "logs"
    url = server.base_url + "/"

    def start(index: int) -> Worker:
        cmd = worker_command(url, {"KAFKA_GROUP_INSTANCE_ID": f"worker-{index}"})
        return start_worker(index, cmd, env, logs)

    workers = [start(i) for i in range(3)]
    count = lambda: stored_pages(env["MONGO_URI"], "crawler", crawl_id)[0]  # noqa: E731
    try:
        wait_until(lambda: len(_members(bootstrap, group)) == 3 and count() >= 100, 180,
                   "three members with their partitions and 100 pages stored")
        before = _members(bootstrap, group)
        revoked = worker_logs(workers[:2]).count(REVOKED)
        workers[2].process.send_signal(signal.SIGKILL)
        workers[2].process.wait()
        workers[2].log.close()
        restarted = time.monotonic()
        workers[2] = start(2)
        wait_until(lambda: _members(bootstrap, group).get("worker-2", {}).get("member_id")
                   not in (None, before["worker-2"]["member_id"]), 60,
                   "the restarted worker to rejoin under its instance id")
        rejoined = time.monotonic() - restarted
        after = _members(bootstrap, group)
        time.sleep(3)  # a rebalance the rejoin set off would reach the others' heartbeats
        revoked_after = worker_logs(workers[:2]).count(REVOKED)
        assert count() < PAGES, "the crawl was over before the restart"
        codes = wait_all(workers, timeout=600)
        text = worker_logs(workers)
    finally:
        stop_workers(workers)
        server.close()
    assert {k: v["partitions"] for k, v in after.items()} == {
        k: v["partitions"] for k, v in before.items()}, (before, after)
    assert all(after[k]["member_id"] == before[k]["member_id"] for k in ("worker-0", "worker-1"))
    assert revoked_after == revoked, "a rebalance revoked the other workers' partitions"
    assert codes == [0, 0, 0], text[-4000:]
    with MongoClient(env["MONGO_URI"]) as client:
        urls = [d["url"] for d in client["crawler"][crawl_id].find({}, {"url": 1})]
    assert sorted(urls) == sorted(site.site_urls(server.base_url, PAGES))
    print(f"static membership: worker-2 rejoined {rejoined:.1f} s after its restart began, "
          f"{len(after['worker-2']['partitions'])} partitions back, none moved")
