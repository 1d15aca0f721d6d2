"""One worker id: a real worker's heartbeat field is the ``worker`` label of its metrics, the
``worker`` of its alerts, and the node id of ``scrapy cluster status`` and the dashboard."""

from __future__ import annotations

import json
import os
import re
import selectors
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import redis
from helpers import wait_until
from prometheus_client.parser import text_string_to_metric_families

from crawler.config.keys import CrawlKeys
from crawler.localstack.demo import running, worker_command

ROOT = Path(__file__).resolve().parents[2]


def _heartbeat(url: str, crawl_id: str, pid: int) -> tuple[str, dict[str, Any]] | None:
    """The field and document of *pid*'s heartbeat, once it names its metrics port and
    the worker has recorded an alert; None before."""
    keys = CrawlKeys(crawl_id)
    with redis.Redis.from_url(url, decode_responses=True) as client:
        beats = {f: json.loads(v) for f, v in client.hgetall(keys.workers).items()}
        alerts = client.hgetall(keys.alerts)
    mine = [(f, d) for f, d in beats.items() if d["info"].get("pid") == pid]
    if len(mine) != 1 or not mine[0][1]["info"].get("metrics_port") or "bloom_fill" not in alerts:
        return None
    return mine[0]


def _labels(port: int) -> set[str]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    return {s.labels["worker"] for family in text_string_to_metric_families(text)
            for s in family.samples if "worker" in s.labels}


def _cluster(env: dict[str, str], *args: str) -> dict[str, Any]:
    proc = subprocess.run([sys.executable, "-m", "scrapy", "cluster", *args], env=env,
                          capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return dict(json.loads(proc.stdout))


def _dashboard_status(env: dict[str, str], crawl_id: str) -> dict[str, Any]:
    """``/api/status`` of a ``scrapy cluster dashboard`` of its own (stopped by PID)."""
    dash = subprocess.Popen([sys.executable, "-m", "scrapy", "cluster", "dashboard", crawl_id,
                             "--port", "0"], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        assert dash.stdout is not None
        selector = selectors.DefaultSelector()
        selector.register(dash.stdout, selectors.EVENT_READ)
        deadline, base = time.monotonic() + 60, ""
        while not base and time.monotonic() < deadline and dash.poll() is None:
            if selector.select(timeout=0.5):
                match = re.match(r"Dashboard: (http://127\.0\.0\.1:\d+/)$", dash.stdout.readline())
                base = match.group(1) if match else ""
        assert base, f"no dashboard URL; exit code {dash.poll()}"
        with urllib.request.urlopen(base + "api/status", timeout=5) as response:
            return dict(json.load(response))
    finally:
        dash.terminate()
        dash.wait(10)


def test_one_id_in_heartbeats_metrics_alerts_status_and_dashboard(stack, demo_site, crawl_id,
                                                                   tmp_path):
    env = {**os.environ, **stack.env(), "CRAWL_ID": crawl_id,
           "SCRAPY_SETTINGS_MODULE": "crawler.settings"}
    cmd = worker_command(demo_site + "/", {
        "CRAWL_IDLE_TIMEOUT": 60, "METRICS_ENABLED": True, "METRICS_HOST": "127.0.0.1",
        # an alert every worker raises at once: the filter is more than 0 % full
        "ALERTS_ENABLED": True, "ALERT_BLOOM_FILL": 0, "ALERT_INTERVAL": 0.5})
    with running(1, cmd, env, tmp_path) as workers:
        pid = workers[0].process.pid
        found: list[tuple[str, dict[str, Any]]] = []

        def beating() -> bool:
            beat = _heartbeat(env["REDIS_URL"], crawl_id, pid)
            found[:] = [beat] if beat else []
            return bool(found)

        wait_until(beating, 90, f"a heartbeat of worker {pid} with its metrics port and alert")
        field, doc = found[0]
        assert re.fullmatch(rf"[^:]+:{pid}:[0-9a-f]{{6}}", field), field
        assert _labels(doc["info"]["metrics_port"]) == {field}
        with redis.Redis.from_url(env["REDIS_URL"], decode_responses=True) as client:
            alert = json.loads(client.hget(CrawlKeys(crawl_id).alerts, "bloom_fill") or "{}")
        assert alert["worker"] == field
        status = _cluster(env, "status", crawl_id, "--json")
        assert [n["id"] for n in status["nodes"]] == [field]
        assert [a["worker"] for a in status["alerts"]["active"]] == [field]
        assert [n["id"] for n in _dashboard_status(env, crawl_id)["nodes"]] == [field]
