"""Growth: one worker crawls the synthetic site at two sizes (20,000 and 200,000 pages by
default) in the same run, with the same services, settings and spider as the benchmark
(:mod:`benchmarks.runner`); does the cost of a page stay flat, and its memory bounded?

    .venv/bin/python -m benchmarks.growth                      # docs/benchmarks/growth/
    .venv/bin/python -m benchmarks.growth --sizes 300,3000 --out /tmp/growth   # smoke

Each crawl's worker records, every ``--every`` pages, its RSS and CPU seconds so far
(:class:`benchmarks.spider.Probe`): the report gives pages per CPU-second over the whole
crawl and after warm-up (from the first tenth of the pages on), and RSS along the crawl.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from benchmarks import services
from benchmarks.nginx import Nginx
from benchmarks.runner import REPO, Context, Run, run_once
from benchmarks.sitegen import SiteSpec, ensure
from crawler.localstack.stack import Stack

logger = logging.getLogger(__name__)
TARGET = 0.05  # pages per CPU-second of the larger crawl within 5% of the smaller's


def crawl(stack_env: dict[str, str], pids: list[int], workdir: Path, pages: int,
          every: int, timeout: float) -> Run:
    """One 1-worker crawl of a *pages*-page site."""
    site = ensure(workdir / f"site-{pages}-{SiteSpec.links}", SiteSpec(pages))
    with Nginx(site, workdir / f"nginx-{pages}") as server:
        ctx = Context(workdir, Path(tempfile.mkdtemp(prefix="crawler-growth-")),
                      server.base_url, pages, stack_env, pids + services.family(server),
                      timeout, {"worker1": {"BENCH_SERIES_EVERY": str(every)}})
        return run_once("worker1", ctx, 1)


def after_warmup(series: list[list[float]], pages: int) -> float | None:
    """Pages per CPU-second from the first point past a tenth of *pages* to the last."""
    late = [p for p in series if p[0] >= pages / 10]
    if len(late) < 2 or late[-1][2] <= late[0][2]:
        return None
    return (late[-1][0] - late[0][0]) / (late[-1][2] - late[0][2])


def summary(runs: list[Run]) -> dict[str, Any]:
    rows = []
    for run in runs:
        series = run.extra.get("series", [])
        rows.append({"pages": run.pages, "pages_per_cpu_s": run.pages_per_cpu_s,
                     "after_warmup": after_warmup(series, run.pages),
                     "pages_per_s": run.pages_per_s, "peak_rss_mib": run.rss_mib,
                     "series": series})
    small, large = rows[0], rows[-1]
    change = large["pages_per_cpu_s"] / small["pages_per_cpu_s"] - 1
    return {"rows": rows, "change": change, "met": abs(change) <= TARGET}


def markdown(result: dict[str, Any], argv: list[str]) -> str:
    rows, change = result["rows"], result["change"]
    out = ["# Growth: one worker, the same site at two sizes", "",
           f"Produced by `{' '.join(['python -m benchmarks.growth', *argv])}`; the "
           "stack, settings and spider of the [benchmark](../report.md), one worker, at its "
           "defaults.", "",
           "| pages | pages per CPU-second | after warm-up | pages/s | peak RSS (MiB) |",
           "|---|---|---|---|---|"]
    for row in rows:
        warm = "-" if row["after_warmup"] is None else f"{row['after_warmup']:.1f}"
        out.append(f"| {row['pages']:,} | {row['pages_per_cpu_s']:.1f} | {warm} | "
                   f"{row['pages_per_s']:.1f} | {row['peak_rss_mib']:.0f} |")
    verdict = "met" if result["met"] else "MISSED"
    out += ["", f"Pages per CPU-second, the larger crawl against the smaller: {change:+.1%} "
            f"(target: within {TARGET:.0%}: {verdict}).", "",
            "## RSS along the larger crawl", "", "| pages | RSS (MiB) |", "|---|---|"]
    series = rows[-1]["series"]
    step = max(1, len(series) // 10)
    for pages, rss, _ in series[step - 1::step]:
        out.append(f"| {pages:,} | {rss:.0f} |")
    return "\n".join(out) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    services.end_on_sigterm()  # a SIGTERM stops what it started, too
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="20000,200000", help="page counts, smallest first")
    parser.add_argument("--every", type=int, default=1000, help="pages between RSS samples")
    parser.add_argument("--workdir", type=Path, default=REPO / ".bench")
    parser.add_argument("--out", type=Path, default=REPO / "docs" / "benchmarks" / "growth")
    parser.add_argument("--timeout", type=float, default=3600.0)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    sizes = sorted(int(s) for s in args.sizes.split(","))
    stack = Stack(args.workdir / "stack")
    runs: list[Run] = []
    try:
        env = stack.start()
        pids = [s["pid"] for s in stack.status().values()]
        for pages in sizes:
            runs.append(crawl(env, pids, args.workdir, pages, args.every, args.timeout))
            logger.info("%d pages: %.1f pages/CPU-s, %.0f MiB", pages,
                        runs[-1].pages_per_cpu_s, runs[-1].rss_mib)
    finally:
        stack.stop()
    result = summary(runs)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps(
        {"runs": [asdict(r) for r in runs], **result}, indent=1))
    (args.out / "report.md").write_text(markdown(result, list(sys.argv[1:] if argv is None
                                                               else argv)))
    print(markdown(result, []))
    return 0


if __name__ == "__main__":
    sys.exit(main())
