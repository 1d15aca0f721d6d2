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
from crawler.localstack.kafka_broker import KAFKA_VERSION

if TYPE_CHECKING:
    from benchmarks.runner import Run

LABELS = {"stock": "stock Scrapy", "worker1": "crawler, 1 worker",
          "worker2": "crawler, 2 workers", "scrapy-redis": "scrapy-redis"}
#: (name, numerator, denominator, metric, target)
RATIOS = [
    ("1 worker / stock, pages per CPU-second", "worker1", "stock", "pages_per_cpu_s", 1.2),
    ("1 worker / scrapy-redis, pages per second", "worker1", "scrapy-redis", "pages_per_s", 1.5),
    ("2 workers / 1 worker, pages per second", "worker2", "worker1", "pages_per_s", 1.85),
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


def limit_rows(results: list[Run], joined: dict[str, Any] | None) -> list[str]:
    """The targets that are bounds, not ratios: a joining worker's start-up, and the peak
    RSS of one worker above stock Scrapy's (medians)."""
    rows = []
    total = (joined or {}).get("joined", {}).get("total")
    if total is not None:
        verdict = "met" if total <= 1.5 else "MISSED"
        rows.append(f"| worker start-up to its first request, joining a crawl | {total:.2f} s "
                    f"| - | <= 1.5 s: {verdict} |")
    groups = by_config(results)
    if "worker1" in groups and "stock" in groups:
        more = median(groups["worker1"], "rss_mib") - median(groups["stock"], "rss_mib")
        verdict = "met" if more <= 20 else "MISSED"
        rows.append(f"| peak RSS, 1 worker above stock | {more:+.0f} MiB | - "
                    f"| <= +20 MiB: {verdict} |")
    return rows


def _machine() -> str:
    try:
        redis = subprocess.run(["redis-server", "--version"], capture_output=True, text=True,
                               check=False).stdout.split()[2]
    except (OSError, IndexError):
        redis = "?"
    return (f"{os.cpu_count()} cores ({cpu_model()}), Python {platform.python_version()}, "
            f"{platform.machine()}, redis-server {redis}, Apache Kafka {KAFKA_VERSION}")


def cpu_model() -> str:
    """The CPU's model name: runs on two machines differ by more than their noise."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


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


def markdown(results: list[Run], spec: SiteSpec, argv: list[str],
             extras: dict[str, Any] | None = None) -> str:
    extras = extras or {}
    out = [
        "# Benchmark: crawler vs stock Scrapy vs scrapy-redis", "",
        f"Produced by `{shlex.join(['python', '-m', 'benchmarks.runner', *argv[1:]])}` "
        f"on {datetime.now(UTC):%Y-%m-%d %H:%M} UTC ({_machine()}; {_versions()}).", "",
        f"Site: {spec.pages} static pages, {spec.links} links a page, {spec.min_bytes}-"
        f"{spec.max_bytes} bytes a page, served by nginx on loopback. Every crawler runs the "
        "same spider and settings (see `benchmarks/runner.py`); rounds are interleaved.", "",
        "![chart](chart.png)", "", "## Medians", "",
        "| run | pages/s (every round) | pages per CPU-second | peak RSS (MiB) "
        "| start-up (s) | pages/s after start-up | services' CPU-s | Redis commands a page |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for config, runs in by_config(results).items():
        rng = ", ".join(f"{r.pages_per_s:.1f}" for r in runs)
        out.append(f"| {LABELS[config]} | {median(runs, 'pages_per_s'):.1f} ({rng}) | "
                   f"{median(runs, 'pages_per_cpu_s'):.1f} | {median(runs, 'rss_mib'):.0f} | "
                   f"{median(runs, 'startup_s'):.1f} | {median(runs, 'crawl_pages_per_s'):.1f} | "
                   f"{median(runs, 'services_cpu'):.1f} | {_redis_per_page(runs)} |")
    out += ["", "## Ratios (median of the pair ratios within each round)", "",
            "| ratio | median | per round | target |", "|---|---|---|---|"]
    for row in ratio_rows(results):
        pairs = ", ".join(f"{p:.2f}" for p in row["pairs"])
        target = "-" if row["target"] is None else f">= {row['target']}: {row['verdict']}"
        out.append(f"| {row['name']} | {row['median']:.2f}x | {pairs} | {target} |")
    out += limit_rows(results, extras.get("joined"))
    out += threads_section(results)
    out += startup_section(results, extras.get("joined"))
    out += profile_section(extras.get("profiled"))
    out += ["", "## Every run", "",
            "| round | run | processes | pages | seconds | pages/s | CPU-s | pages/CPU-s "
            "| peak RSS (MiB) | services' CPU-s |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        out.append(f"| {r.round} | {LABELS[r.config]} | {r.processes} | {r.pages} | "
                   f"{r.wall:.1f} | {r.pages_per_s:.1f} | {r.cpu:.1f} | "
                   f"{r.pages_per_cpu_s:.1f} | {r.rss_mib:.0f} | {r.services_cpu:.1f} |")
    return "\n".join(out) + "\n"


def _redis_per_page(runs: list[Run]) -> str:
    found = [r.extra["redis_commands_per_page"] for r in runs
             if "redis_commands_per_page" in r.extra]
    return f"{statistics.median(found):.2f}" if found else "-"


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


def _median_parts(parts: list[dict[str, float]]) -> dict[str, float]:
    from crawler.frontier.startup import PARTS

    return {p: statistics.median(d.get(p, 0.0) for d in parts)
            for p in (*PARTS, "total") if any(p in d for d in parts)}


def startup_section(results: list[Run], joined: dict[str, Any] | None) -> list[str]:
    """The parts of a worker's start-up (``startup/*`` stats), median over its processes."""
    from crawler.frontier.startup import PARTS

    rows: list[tuple[str, dict[str, float]]] = []
    for config, runs in by_config(results).items():
        found = [p for r in runs for p in r.extra.get("startup", [])]
        if found:
            rows.append((f"{LABELS[config]}, a new crawl", _median_parts(found)))
    if joined and joined.get("joined"):
        rows.append((f"a worker joining a crawl {joined['share']:.0%} done",
                     _median_parts([joined["joined"]])))
    if not rows:
        return []
    names = [p for p in (*PARTS, "total") if any(p in r for _, r in rows)]
    out = ["", "## A worker's start-up, by part (seconds, median)", "",
           "| run | " + " | ".join(n.replace("_", " ") for n in names) + " |",
           "|---|" + "---|" * len(names)]
    for label, medians in rows:
        out.append(f"| {label} | " + " | ".join(f"{medians.get(n, 0.0):.2f}" for n in names)
                   + " |")
    out += ["", "From the process's start to its first request reaching the downloader "
            "(`crawler/frontier/startup.py` says where each part ends)."]
    return out


def profile_section(profiled: dict[str, Any] | None) -> list[str]:
    """Where one worker's CPU went, by component (py-spy's samples)."""
    if not profiled or not profiled.get("samples"):
        return []
    waits = profiled["samples"].get("waiting", 0)
    total = sum(profiled["samples"].values()) - waits
    out = ["", "## Where a worker's CPU goes, by component (py-spy, one more 1-worker run)", "",
           f"{profiled['pages']} pages, {profiled['cpu_s']:.1f} CPU-s, {total} samples at "
           f"{profiled['rate']} Hz, and {waits} more of a thread blocked in a wait (epoll, a "
           "condition), left out; a sample is the component's whose module is its stack's "
           "innermost frame of this package (`benchmarks/profile.py`).", "",
           "| component | share of the samples | ms of CPU per page |", "|---|---|---|"]
    for name, ms in profiled["ms_per_page"].items():
        out.append(f"| {name} | {profiled['samples'][name] / total:.1%} | {ms:.2f} |")
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


def write(out: Path, results: list[Run], spec: SiteSpec, argv: list[str],
          extras: dict[str, Any] | None = None) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "report.md").write_text(markdown(results, spec, argv, extras))
    chart(out / "chart.png", results)
    data = {"site": asdict(spec), "runs": [asdict(r) for r in results],
            "ratios": ratio_rows(results), "extras": extras or {}}
    (out / "results.json").write_text(json.dumps(data, indent=1))
