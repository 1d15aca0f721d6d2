"""The microbenchmarks run end to end in --quick mode and write their report.

Only that they complete and report every section is checked; never a speed. In tests/bench
(``./run bench`` runs it before the benchmarks) since 2026-12-07, for the reason of
test_bench_smokes.py: it proves only that the script runs (34 s and 18 CPU-seconds of CI).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SECTIONS = ("## 1. Bloom memory per URL", "## 2. Dedup throughput",
            "## 3. Frontier throughput", "## 4. Serialisation cost per request",
            "## 5. Politeness and priority cost per request",
            "## 6. Demo site keep-alive throughput")


def test_quick_run_writes_every_section(tmp_path: Path) -> None:
    out = tmp_path / "micro.md"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.micro", "--quick", "--out", str(out)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=180, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    report = out.read_text()
    for heading in SECTIONS:
        assert heading in report
    assert "--quick" in report and "- Date: " in report and "- CPU: " in report
    for needle in ("bytes per URL, capacity 100,000,000", "batch 11", "end to end",
                   "decode, large meta", "host gate: admit + release",
                   "share renewal per request", "requests per second"):
        assert needle in report
    assert "bytes per URL" in done.stdout  # the table is printed too
