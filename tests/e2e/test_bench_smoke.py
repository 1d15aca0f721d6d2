"""The benchmark runner ended by SIGTERM stops everything it started.

The small run of the benchmark itself (every crawler over 300 pages, the report written) is
in tests/bench/test_bench_smokes.py since 2026-12-07, which ``./run bench`` runs before the
benchmarks: it proved only that the benchmark still runs, at 240 s of the suite's time and
two cores' worth of CPU for most of it (docs/testing.md).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import REPO


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
