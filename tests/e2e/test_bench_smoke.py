"""A small run of the benchmark (a few hundred pages, one round), so that it cannot rot.

It asserts only that every crawler under test crawled the whole site and that the
report was written; never a speed (speed is what ``./run bench`` reports).
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import REPO, require, run_bench_module


@pytest.mark.timeout(600)
def test_the_benchmark_runs_every_crawler_over_a_small_site(tmp_path: Path) -> None:
    if shutil.which("nginx") is None and not Path("/usr/sbin/nginx").exists():
        pytest.fail("nginx is missing: ./run tests installs nginx-light")
    require(importlib.util.find_spec("scrapy_redis"), "./run tests installs scrapy-redis")
    out = tmp_path / "report"
    data, _ = run_bench_module(tmp_path, "benchmarks.runner",
                     ["--pages", "300", "--rounds", "1", "--profile", "--join"], 580)
    runs = {run["config"]: run for run in data["runs"]}
    assert set(runs) == {"stock", "worker1", "worker2", "scrapy-redis"}
    assert all(run["pages"] == 300 for run in runs.values())
    assert runs["worker2"]["processes"] == 2
    assert len(runs["worker2"]["extra"]["startup"]) == 2  # each worker's start-up parts
    assert runs["worker1"]["extra"]["startup"][0]["total"] > 0
    assert runs["stock"]["extra"]["startup"] == []  # Scrapy alone has no such stats
    profiled, joined = data["extras"]["profiled"], data["extras"]["joined"]
    assert sum(profiled["samples"].values()) > 0 and profiled["ms_per_page"], profiled
    assert joined["joined"]["join"] > 0, joined
    report = (out / "report.md").read_text()
    assert "## Ratios" in report and "1 worker / stock, pages per CPU-second" in report
    assert "## A worker's start-up, by part" in report and "a worker joining a crawl" in report
    assert "## Where a worker's CPU goes, by component" in report
    assert (out / "chart.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def _descendants(pid: int) -> dict[int, str]:
    """Every live descendant of *pid*: {pid: its start time (field 22 of its stat)}."""
    found: dict[int, str] = {}
    todo = [pid]
    while todo:
        parent = todo.pop()
        for task in Path(f"/proc/{parent}/task").glob("*"):
            try:
                children = (task / "children").read_text().split()
            except OSError:
                continue
            for child in map(int, children):
                if (started := _start_time(child)) is not None:
                    found[child] = started
                    todo.append(child)
    return found


def _start_time(pid: int) -> str | None:
    """*pid*'s start time, or None once it is gone (a zombie counts as gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return None
    return None if fields[0] in ("Z", "X") else fields[19]


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


@pytest.mark.timeout(240)
def test_a_benchmark_ended_by_sigterm_stops_everything_it_started(tmp_path: Path) -> None:
    """SIGTERM (a CI job's timeout, ``kill``) used to end the runner alone: the services,
    nginx and the crawler processes it started run in sessions of their own and ran on."""
    runner = subprocess.Popen(
        [sys.executable, "-m", "benchmarks.runner", "--pages", "3000", "--rounds", "1",
         "--configs", "worker2", "--workdir", str(tmp_path / "work"),
         "--out", str(tmp_path / "report")],
        cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    started: dict[int, str] = {}
    try:
        deadline = time.monotonic() + 150
        while sum("runspider" in _cmdline(pid) for pid in _descendants(runner.pid)) < 2:
            assert runner.poll() is None and time.monotonic() < deadline, "no crawl began"
            time.sleep(0.1)
        started = _descendants(runner.pid)  # the services, nginx and its workers, 2 crawlers
        runner.send_signal(signal.SIGTERM)
        status = runner.wait(timeout=60)
        left = {pid: _cmdline(pid) for pid, at in started.items() if _start_time(pid) == at}
    finally:
        if runner.poll() is None:
            runner.kill()
        for pid, at in started.items():  # what the runner left, if it did: never kept
            if _start_time(pid) == at:
                os.kill(pid, signal.SIGKILL)
    assert not left, f"still running after the runner ended: {left}"
    assert status == 128 + signal.SIGTERM
    assert len(started) >= 6  # redis, the broker, mongod, nginx (master, worker), 2 crawlers
