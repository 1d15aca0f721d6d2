"""Where the minutes of a run of the suite went, from the JUnit XML files ``.ci/run`` keeps.

``python -m tests.support.minutes .ci/junit-parallel.xml .ci/junit-serial.xml`` prints, as
Markdown, each file's tests and wall clock (pytest's own ``time`` of the suite), the tests'
own seconds by folder, and the slowest files: the tables of ``docs/testing.md``. Each test's
CPU time (``cpu_s``, from ``tests/conftest.py``: its pytest process and every child process it
reaped, the crawl workers and the services it started and stopped) is summed beside its
seconds; on 2 cores the suite is bound by CPU, not by its waits.
"""

from __future__ import annotations

import os
import sys
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

FILES = 30  # the slowest files listed


def cpu_seconds() -> float:
    """User and system CPU seconds of this process and of its reaped children so far."""
    times = os.times()
    return times.user + times.system + times.children_user + times.children_system


def _cases(root: ET.Element) -> list[tuple[str, float, bool, float]]:
    """(file, seconds, failed, CPU seconds) of each test case; the file from the case's class
    name, the CPU seconds from its ``cpu_s`` property (0 when the run did not record it)."""
    cases = []
    for case in root.iter("testcase"):
        module = case.get("classname", "").split(".")
        parts = [p for p in module if not p[:1].isupper()]  # drop a test class's name
        path = "/".join(parts) + ".py"
        failed = any(child.tag in ("failure", "error") for child in case)
        cpu = sum(float(prop.get("value", 0)) for prop in case.iter("property")
                  if prop.get("name") == "cpu_s")
        cases.append((path, float(case.get("time", 0)), failed, cpu))
    return cases


def summary(paths: list[Path]) -> str:
    lines = ["| phase | tests | failed | wall clock (s) | tests' own seconds | CPU seconds |",
             "|---|---|---|---|---|---|"]
    by_file: dict[str, float] = defaultdict(float)
    cpu_by_file: dict[str, float] = defaultdict(float)
    by_folder: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for path in paths:
        root = ET.parse(path).getroot()
        suite = root if root.tag == "testsuite" else next(root.iter("testsuite"))
        cases = _cases(root)
        for file, seconds, _failed, cpu in cases:
            by_file[file] += seconds
            cpu_by_file[file] += cpu
            by_folder[file.split("/")[1] if "/" in file else file].append((seconds, cpu))
        lines.append(f"| {path.stem} | {len(cases):,} | {sum(c[2] for c in cases)} | "
                     f"{float(suite.get('time', 0)):,.0f} | {sum(c[1] for c in cases):,.0f} | "
                     f"{sum(c[3] for c in cases):,.0f} |")
    lines += ["", "| folder | tests | seconds | CPU seconds |", "|---|---|---|---|"]
    for folder, times in sorted(by_folder.items(), key=lambda item: -sum(t for t, _c in item[1])):
        lines.append(f"| {folder} | {len(times):,} | {sum(t for t, _c in times):,.0f} | "
                     f"{sum(c for _t, c in times):,.0f} |")
    lines += ["", "| file | seconds | CPU seconds |", "|---|---|---|"]
    for file, seconds in sorted(by_file.items(), key=lambda item: -item[1])[:FILES]:
        lines.append(f"| `{file.removeprefix('tests/')}` | {seconds:,.0f} | "
                     f"{cpu_by_file[file]:,.0f} |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(summary([Path(arg) for arg in sys.argv[1:]]))
