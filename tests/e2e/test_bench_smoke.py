"""A small run of the benchmark (a few hundred pages, one round), so that it cannot rot.

It asserts only that every crawler under test crawled the whole site and that the
report was written; never a speed (speed is what ``./run bench`` reports).
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from helpers import require

REPO = Path(__file__).resolve().parents[2]


def _bench(tmp_path: Path, module: str, args: list[str], timeout: float) -> tuple[Any, str]:
    """Run ``python -m <module> <args>`` into ``tmp_path/report``: its results.json, and
    what it printed."""
    out = tmp_path / "report"
    result = subprocess.run(
        [sys.executable, "-m", module, *args, "--workdir", str(tmp_path / "work"),
         "--out", str(out)], cwd=REPO, capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return json.loads((out / "results.json").read_text()), result.stdout


@pytest.mark.timeout(600)
def test_the_benchmark_runs_every_crawler_over_a_small_site(tmp_path: Path) -> None:
    if shutil.which("nginx") is None and not Path("/usr/sbin/nginx").exists():
        pytest.fail("nginx is missing: ./run tests installs nginx-light")
    require(importlib.util.find_spec("scrapy_redis"), "./run tests installs scrapy-redis")
    out = tmp_path / "report"
    data, _ = _bench(tmp_path, "benchmarks.runner",
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


@pytest.mark.timeout(300)
def test_the_growth_benchmark_crawls_both_sizes_and_reports_the_change(tmp_path: Path) -> None:
    data, printed = _bench(tmp_path, "benchmarks.growth",
                           ["--sizes", "200,600", "--every", "100"], 280)
    assert [row["pages"] for row in data["rows"]] == [200, 600]
    large = data["rows"][1]
    assert [point[0] for point in large["series"]] == list(range(100, 601, 100))
    assert all(point[1] > 0 and point[2] > 0 for point in large["series"])
    assert large["after_warmup"] is not None and isinstance(data["met"], bool)
    assert "the larger crawl against the smaller" in printed


@pytest.mark.timeout(900)
def test_the_hostile_benchmark_runs_its_three_crawls(tmp_path: Path) -> None:
    """benchmarks/hostile.py over 20 pages: every crawl ends, is measured and reported; only
    the friendly crawl must store every page (the hostile ones show what the pool does)."""
    out = tmp_path / "report"
    data, printed = _bench(tmp_path, "benchmarks.hostile", ["--pages", "20", "--timeout", "240"],
                           880)
    runs = {run["crawl"]: run for run in data["runs"]}
    assert set(runs) == {"a-hostile-mixed", "b-hostile-healthy", "c-friendly-healthy"}
    for run in runs.values():
        assert run["dumps"] == 2 and run["exit_codes"] == [0, 0], run
        assert run["stored"] + len(run["missing"]["pages"]) == 20 and run["duplicates"] == 0
        assert any(key.startswith("proxy/") for key in run["stats"]), run["stats"]
    assert runs["c-friendly-healthy"]["stored"] == 20
    assert data["site"]["pages_503x3"] == [13, 15, 16]  # seed 1's first 20 pages
    assert "| a-hostile-mixed | 1 |" in (out / "report.md").read_text()
    assert "longest gap s" in printed  # the table is printed too


def test_the_seed_benchmark_runs_small() -> None:
    """``benchmarks.seeds`` with 20,000 seeds: every seed in the topic, plain and gzip."""
    result = subprocess.run([sys.executable, "-m", "benchmarks.seeds", "--seeds", "20000"],
                            cwd=REPO, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert result.stdout.count("topic holds 20,000") == 2, result.stdout


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
