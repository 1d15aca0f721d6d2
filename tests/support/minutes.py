"""Where the minutes of a run of the suite went, from the JUnit XML files ``.ci/run`` keeps.

``python -m tests.support.minutes .ci/junit-parallel.xml .ci/junit-serial.xml`` prints, as
Markdown, each file's tests and wall clock (pytest's own ``time`` of the suite), the tests'
own seconds by folder, and the slowest files: the tables of ``docs/testing.md``.
"""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET
from collections import Counter, defaultdict
from pathlib import Path

FILES = 30  # the slowest files listed


def _cases(root: ET.Element) -> list[tuple[str, float, bool]]:
    """(file, seconds, failed) of each test case; the file from the case's class name."""
    cases = []
    for case in root.iter("testcase"):
        module = case.get("classname", "").split(".")
        parts = [p for p in module if not p[:1].isupper()]  # drop a test class's name
        path = "/".join(parts) + ".py"
        failed = any(child.tag in ("failure", "error") for child in case)
        cases.append((path, float(case.get("time", 0)), failed))
    return cases


def summary(paths: list[Path]) -> str:
    lines = ["| phase | tests | failed | wall clock (s) | tests' own seconds |",
             "|---|---|---|---|---|"]
    by_file: Counter[str] = Counter()
    by_folder: dict[str, list[float]] = defaultdict(list)
    for path in paths:
        root = ET.parse(path).getroot()
        suite = root if root.tag == "testsuite" else next(root.iter("testsuite"))
        cases = _cases(root)
        for file, seconds, _failed in cases:
            by_file[file] += seconds
            by_folder[file.split("/")[1] if "/" in file else file].append(seconds)
        own = sum(seconds for _f, seconds, _x in cases)
        lines.append(f"| {path.stem} | {len(cases):,} | {sum(f for *_x, f in cases)} | "
                     f"{float(suite.get('time', 0)):,.0f} | {own:,.0f} |")
    lines += ["", "| folder | tests | seconds |", "|---|---|---|"]
    for folder, times in sorted(by_folder.items(), key=lambda item: -sum(item[1])):
        lines.append(f"| {folder} | {len(times):,} | {sum(times):,.0f} |")
    lines += ["", "| file | seconds |", "|---|---|"]
    for file, seconds in by_file.most_common(FILES):
        lines.append(f"| `{file.removeprefix('tests/')}` | {seconds:,.0f} |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(summary([Path(arg) for arg in sys.argv[1:]]))
