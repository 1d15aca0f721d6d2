"""The worker helpers of the demo and the e2e tests: a worker that does not stop leaves its
stacks in the failure, not a bare timeout."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from helpers import wait_until

from crawler.localstack.demo import WorkersStuck, start_worker, stop_gracefully, wait_all

# ignores SIGINT, as a worker whose reactor is blocked does in effect
STUCK = [sys.executable, "-c",
         "import signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\n"
         "print('ready', flush=True)\n"
         "def waiting_forever():\n    time.sleep(60)\nwaiting_forever()"]


def test_a_worker_that_exits_gives_its_code(tmp_path: Path) -> None:
    worker = start_worker(0, [sys.executable, "-c", "raise SystemExit(3)"], {}, tmp_path)
    assert wait_all([worker], timeout=30) == [3]


def test_a_stuck_worker_fails_with_its_stacks_and_is_gone(tmp_path: Path) -> None:
    worker = start_worker(0, STUCK, {}, tmp_path)
    wait_until(lambda: "ready" in (tmp_path / "worker-0.log").read_text(), 30, "SIGINT ignored")
    with pytest.raises(WorkersStuck) as stuck:
        stop_gracefully(worker, timeout=1.0)
    assert worker.process.poll() is not None
    message = str(stuck.value)
    assert message.startswith("1 worker(s) still running after 1 s")
    assert "in waiting_forever" in message  # the fault handler's dump of the main thread
