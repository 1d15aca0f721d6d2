"""Worker memory through a Redis outage at full crawl speed::

    .venv/bin/python -m benchmarks.outage                            # 20,000 pages, 60 s
    .venv/bin/python -m benchmarks.outage --pages 3000 --outage 20   # smoke

One worker (the runner's ``worker1`` settings) crawls the synthetic site. Once
``--before`` pages are stored, Redis is stopped for ``--outage`` seconds, then started
again, and the crawl runs to its end. The worker's RSS is read from ``/proc`` every
second; the summary gives its range and the pages stored in each phase (before, during,
after the outage), and the worker's ``frontier/unacked_peak``.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks import services
from benchmarks.nginx import Nginx
from benchmarks.runner import COMMON, OURS, REPO, base_env, command
from benchmarks.sitegen import SiteSpec, ensure
from benchmarks.spider import rss_kib
from crawler.localstack.demo import stored_pages
from crawler.localstack.stack import Stack


@dataclass
class Phase:
    name: str
    rss_kib: list[int] = field(default_factory=list)
    stored: list[int] = field(default_factory=list)
    seconds: float = 0.0

    def summary(self) -> dict[str, Any]:
        rss = self.rss_kib or [0]
        pages = self.stored[-1] - self.stored[0] if len(self.stored) > 1 else 0
        return {"phase": self.name, "seconds": round(self.seconds, 1),
                "rss_min_mib": round(min(rss) / 1024, 1), "rss_max_mib": round(max(rss) / 1024, 1),
                "rss_last_mib": round(rss[-1] / 1024, 1), "pages": pages,
                "pages_per_s": round(pages / self.seconds, 1) if self.seconds else 0.0}


def sample(phase: Phase, proc: subprocess.Popen[bytes], count: Callable[[], int],
           until: Callable[[int], bool]) -> None:
    """Sample RSS and stored pages every second into *phase* until *until(stored)*."""
    started = time.monotonic()
    while proc.poll() is None:
        rss, stored = rss_kib(proc.pid), count()
        if rss:  # None once the process is gone, 0 while it starts
            phase.rss_kib.append(rss)
        phase.stored.append(stored)
        if until(stored):
            break
        time.sleep(1.0)
    phase.seconds = time.monotonic() - started


def run(args: argparse.Namespace) -> dict[str, Any]:
    site = ensure(args.workdir / f"site-{args.pages}-{SiteSpec.links}", SiteSpec(args.pages))
    stack = Stack(args.workdir / "outage-stack")
    tag = f"outage-{int(time.time())}"
    try:
        services = stack.start()
        with Nginx(site, args.workdir / "outage-nginx") as server:
            env = {**base_env(), **services, "SCRAPY_SETTINGS_MODULE": "crawler.settings",
                   "CRAWL_ID": tag}
            log = args.workdir / f"{tag}.log"
            settings = {**COMMON, **OURS, "EXTENSIONS": "{}"}
            proc = subprocess.Popen(command(server.base_url + "/", settings),
                                    cwd=tempfile.mkdtemp(prefix="crawler-outage-"), env=env,
                                    stdout=subprocess.DEVNULL, stderr=open(log, "wb"),
                                    start_new_session=True)
            count = lambda: stored_pages(services["MONGO_URI"], "crawler", tag)[0]  # noqa: E731
            phases = [Phase("before"), Phase("outage"), Phase("after")]
            sample(phases[0], proc, count, lambda n: n >= args.before)
            stack.stop_service("redis")
            end = time.monotonic() + args.outage
            try:
                sample(phases[1], proc, count, lambda _n: time.monotonic() >= end)
            finally:
                stack.start_service("redis")
            sample(phases[2], proc, count, lambda _n: False)
            code = proc.wait(args.timeout)
            text = log.read_text(errors="replace")
    finally:
        stack.stop()
    peak = re.findall(r"'frontier/unacked_peak': (\d+)", text)
    return {"pages": args.pages, "outage_s": args.outage, "exit_code": code,
            "stored": phases[2].stored[-1] if phases[2].stored else None,
            "unacked_peak": int(peak[-1]) if peak else None,
            "paused": "Fetching paused" in text, "phases": [p.summary() for p in phases]}


def main(argv: Sequence[str] | None = None) -> int:
    services.end_on_sigterm()  # a SIGTERM stops what it started, too
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pages", type=int, default=20_000)
    parser.add_argument("--before", type=int, default=2_000, help="pages stored before")
    parser.add_argument("--outage", type=float, default=60.0, help="seconds Redis is down")
    parser.add_argument("--workdir", type=Path, default=REPO / ".bench")
    parser.add_argument("--timeout", type=float, default=1800.0)
    parser.add_argument("--out", type=Path, help="write the result as JSON here")
    args = parser.parse_args(argv)
    result = run(args)
    if args.out:
        args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return 0 if result["exit_code"] == 0 and result["stored"] == args.pages else 1


if __name__ == "__main__":
    sys.exit(main())
