"""The benchmarks, run small so that they cannot rot: the main benchmark (every crawler over
300 pages), the growth benchmark, the hostile-origin benchmark and the seed benchmark.
``./run bench`` runs these before the benchmarks themselves; ``./run tests`` does not (its
folders are unit, integration, e2e).

Why not in the gating suite: each proves only that its benchmark script still runs. What the
scripts measure is proven there by other tests: the hostile origin behind proxies by
tests/e2e/test_hostile_origin.py and test_hostile_pages.py, a crawl's memory and growth by
tests/e2e/test_soak.py, the seed paths by tests/e2e/test_seeds.py and test_seed_storm.py, and
what the main benchmark crawls (every page once, by stock Scrapy, scrapy-redis and the
workers) by every e2e crawl. Together they took about 440 s of CI's time; the benchmark's
SIGTERM case stays in the suite (tests/e2e/test_bench_smoke.py).
"""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import REPO, require, run_bench_module


@pytest.mark.timeout(300)
def test_the_growth_benchmark_crawls_both_sizes_and_reports_the_change(tmp_path: Path) -> None:
    data, printed = run_bench_module(tmp_path, "benchmarks.growth",
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
    data, printed = run_bench_module(tmp_path, "benchmarks.hostile",
                                     ["--pages", "20", "--timeout", "240"], 880)
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
