"""The benchmark report: medians, pair-by-pair ratios, a markdown file and a PNG chart."""

from __future__ import annotations

import json
import os
import platform
import shlex
import statistics
import subprocess
from collections.abc import Callable
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchmarks.sitegen import SiteSpec

if TYPE_CHECKING:
    from benchmarks.runner import Run

LABELS = {"stock": "stock Scrapy", "worker1": "crawler, 1 worker",
          "worker2": "crawler, 2 workers", "scrapy-redis": "scrapy-redis"}
#: (name, numerator, denominator, metric, target)
RATIOS = [
    ("1 worker / stock, pages per CPU-second", "worker1", "stock", "pages_per_cpu_s", 0.95),
    ("1 worker / scrapy-redis, pages per second", "worker1", "scrapy-redis", "pages_per_s", 1.3),
    ("2 workers / 1 worker, pages per second", "worker2", "worker1", "pages_per_s", 1.8),
    ("1 worker / stock, pages per second", "worker1", "stock", "pages_per_s", None),
    ("scrapy-redis / stock, pages per second", "scrapy-redis", "stock", "pages_per_s", None),
    ("2 workers / 1 worker, pages per second after start-up", "worker2", "worker1",
     "crawl_pages_per_s", None),
]
Metric = Callable[["Run"], float]


def by_config(results: list[Run]) -> dict[str, list[Run]]:
    grouped: dict[str, list[Run]] = {}
    for run in results:
        grouped.setdefault(run.config, []).append(run)
    return grouped


def value(run: Run, metric: str) -> float:
    """A property of *run*, or one of the numbers in its ``extra``."""
    if hasattr(run, metric):
        return float(getattr(run, metric))
    return float(run.extra[metric])


def median(runs: list[Run], metric: str) -> float:
    return statistics.median(value(r, metric) for r in runs)


def pair_ratios(results: list[Run], num: str, den: str, metric: str) -> list[float]:
    """The ratio of *num* to *den* within each round that ran both."""
    rounds: dict[int, dict[str, Run]] = {}
    for run in results:
        rounds.setdefault(run.round, {})[run.config] = run
    return [value(r[num], metric) / value(r[den], metric)
            for _, r in sorted(rounds.items()) if num in r and den in r]


def ratio_rows(results: list[Run]) -> list[dict[str, Any]]:
    rows = []
    for name, num, den, metric, target in RATIOS:
        pairs = pair_ratios(results, num, den, metric)
        if not pairs:
            continue
        value = statistics.median(pairs)
        verdict = "" if target is None else ("met" if value >= target else "MISSED")
        rows.append({"name": name, "median": value, "pairs": pairs, "target": target,
                     "verdict": verdict})
    return rows


def _machine() -> str:
    try:
        redis = subprocess.run(["redis-server", "--version"], capture_output=True, text=True,
                               check=False).stdout.split()[2]
    except (OSError, IndexError):
        redis = "?"
    return (f"{os.cpu_count()} cores, Python {platform.python_version()}, {platform.machine()}, "
            f"redis-server {redis}")


def _versions() -> str:
    from importlib.metadata import version

    names = ["scrapy", "twisted", "kafka-python", "redis", "pymongo", "scrapy-redis"]
    return ", ".join(f"{n} {version(n)}" for n in names)


def summary(results: list[Run]) -> str:
    lines = []
    for config, runs in by_config(results).items():
        lines.append(f"{LABELS[config]:<20} {median(runs, 'pages_per_s'):7.1f} pages/s  "
                     f"{median(runs, 'pages_per_cpu_s'):7.1f} pages/CPU-s  "
                     f"{median(runs, 'rss_mib'):5.0f} MiB")
    for row in ratio_rows(results):
        target = "" if row["target"] is None else f" (target >= {row['target']}: {row['verdict']})"
        lines.append(f"{row['name']}: {row['median']:.2f}x{target}")
    return "\n".join(lines)


def markdown(results: list[Run], spec: SiteSpec, argv: list[str]) -> str:
    out = [
        "# Benchmark: crawler vs stock Scrapy vs scrapy-redis", "",
        f"Produced by `{shlex.join(['python', '-m', 'benchmarks.runner', *argv[1:]])}` "
        f"on {datetime.now(UTC):%Y-%m-%d %H:%M} UTC ({_machine()}; {_versions()}).", "",
        f"Site: {spec.pages} static pages, {spec.links} links a page, {spec.min_bytes}-"
        f"{spec.max_bytes} bytes a page, served by nginx on loopback. Every crawler runs the "
        "same spider and settings (see `benchmarks/runner.py`); rounds are interleaved.", "",
        "![chart](chart.png)", "", "## Medians", "",
        "| run | pages/s (every round) | pages per CPU-second | peak RSS (MiB) "
        "| start-up (s) | pages/s after start-up | services' CPU-s |",
        "|---|---|---|---|---|---|---|",
    ]
    for config, runs in by_config(results).items():
        rng = ", ".join(f"{r.pages_per_s:.1f}" for r in runs)
        out.append(f"| {LABELS[config]} | {median(runs, 'pages_per_s'):.1f} ({rng}) | "
                   f"{median(runs, 'pages_per_cpu_s'):.1f} | {median(runs, 'rss_mib'):.0f} | "
                   f"{median(runs, 'startup_s'):.1f} | {median(runs, 'crawl_pages_per_s'):.1f} | "
                   f"{median(runs, 'services_cpu'):.1f} |")
    out += ["", "## Ratios (median of the pair ratios within each round)", "",
            "| ratio | median | per round | target |", "|---|---|---|---|"]
    for row in ratio_rows(results):
        pairs = ", ".join(f"{p:.2f}" for p in row["pairs"])
        target = "-" if row["target"] is None else f">= {row['target']}: {row['verdict']}"
        out.append(f"| {row['name']} | {row['median']:.2f}x | {pairs} | {target} |")
    out += threads_section(results)
    out += ["", "## Every run", "",
            "| round | run | processes | pages | seconds | pages/s | CPU-s | pages/CPU-s "
            "| peak RSS (MiB) | services' CPU-s |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        out.append(f"| {r.round} | {LABELS[r.config]} | {r.processes} | {r.pages} | "
                   f"{r.wall:.1f} | {r.pages_per_s:.1f} | {r.cpu:.1f} | "
                   f"{r.pages_per_cpu_s:.1f} | {r.rss_mib:.0f} | {r.services_cpu:.1f} |")
    return "\n".join(out) + "\n"


def threads_section(results: list[Run]) -> list[str]:
    """CPU seconds per page of each kind of thread, per config (medians)."""
    out = ["", "## Where the crawler processes' CPU goes (ms per page, median)", "",
           "| run | main thread | Kafka client threads | other threads |", "|---|---|---|---|"]
    for config, runs in by_config(results).items():
        cells = []
        for kind in ("MainThread", "Kafka client threads", "other"):
            per_page = [1000 * r.extra.get("threads", {}).get(kind, 0.0) / r.pages for r in runs]
            cells.append(f"{statistics.median(per_page):.2f}")
        out.append(f"| {LABELS[config]} | " + " | ".join(cells) + " |")
    out.append("")
    out.append("Thread CPU is read inside each process at its last 500th page, so it leaves out "
               "start-up and shutdown; the CPU-s columns above come from `wait4` and include "
               "them.")
    return out


def chart(path: Path, results: list[Run]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    grouped = by_config(results)
    names = [LABELS[c] for c in grouped]
    panels = [("pages per second", "pages_per_s"), ("pages per CPU-second", "pages_per_cpu_s"),
              ("peak RSS per process (MiB)", "rss_mib")]
    fig, axes = plt.subplots(1, 3, figsize=(14, 4.5))
    for ax, (title, metric) in zip(axes, panels, strict=True):
        medians = [median(runs, metric) for runs in grouped.values()]
        ax.bar(range(len(names)), medians, color=["#888", "#2a7", "#185", "#c53"][:len(names)])
        for i, runs in enumerate(grouped.values()):
            ax.plot([i] * len(runs), [getattr(r, metric) for r in runs], "k.", ms=5)
        ax.set_xticks(range(len(names)), names, rotation=20, ha="right", fontsize=8)
        ax.set_title(title)
    fig.suptitle("Medians (bars) and every round (dots)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def write(out: Path, results: list[Run], spec: SiteSpec, argv: list[str]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "report.md").write_text(markdown(results, spec, argv))
    chart(out / "chart.png", results)
    data = {"site": asdict(spec), "runs": [asdict(r) for r in results],
            "ratios": ratio_rows(results)}
    (out / "results.json").write_text(json.dumps(data, indent=1))
