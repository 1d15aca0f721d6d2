"""Crawl one synthetic site with stock Scrapy, this project (one and two workers) and
scrapy-redis, in interleaved rounds, and write a report with ratios from the same run::

    ./run bench                      # 20,000 pages, 3 rounds: docs/benchmarks/
    .venv/bin/python -m benchmarks.runner --pages 300 --rounds 1 --out /tmp/smoke   # smoke

Every crawler process runs the same spider (:mod:`benchmarks.spider`) and settings
(:data:`COMMON`); its CPU time and peak RSS come from ``wait4``. Pages per second count
from the launch of the first process to the last item, start-up included.
"""

from __future__ import annotations

import argparse
import logging
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks import report, services
from benchmarks.nginx import Nginx
from benchmarks.sitegen import SiteSpec, ensure
from crawler.localstack.stack import Stack

logger = logging.getLogger(__name__)
REPO = Path(__file__).resolve().parent.parent
SPIDER = REPO / "benchmarks" / "spider.py"
CONFIGS = ("stock", "worker1", "worker2", "scrapy-redis")
# Every crawler's production defaults, the same for all: robots.txt obeyed (the project's
# default here, and Scrapy's project template's); the one override is concurrency, since the
# synthetic site is one host: at 16 per domain (the project's default, shared cluster-wide)
# the benchmark would measure that limit, not the crawler, and two workers could not pass one.
COMMON: dict[str, Any] = {
    "LOG_LEVEL": "INFO", "CONCURRENT_REQUESTS": 64, "CONCURRENT_REQUESTS_PER_DOMAIN": 64,
    "ROBOTSTXT_OBEY": True, "TELNETCONSOLE_ENABLED": False,
    "EXTENSIONS": '{"benchmarks.spider.Probe": 0}',
}
SCRAPY_REDIS: dict[str, Any] = {
    "SCHEDULER": "scrapy_redis.scheduler.Scheduler",
    "DUPEFILTER_CLASS": "scrapy_redis.dupefilter.RFPDupeFilter",
    "SCHEDULER_PERSIST": True, "SCHEDULER_FLUSH_ON_START": True,
}
OURS: dict[str, Any] = {"CRAWL_IDLE_TIMEOUT": 3}
_SCRUB = ("SCRAPY_SETTINGS_MODULE", "KAFKA_BOOTSTRAP_SERVERS", "REDIS_URL", "REDIS_PARAMS",
          "MONGO_URI", "CRAWL_ID", "SCRAPY_PROJECT")


@dataclass
class Context:
    workdir: Path
    cwd: Path  # outside any Scrapy project, so no scrapy.cfg is picked up
    base_url: str
    pages: int
    services: dict[str, str]
    watch_pids: list[int]
    timeout: float
    extra: dict[str, dict[str, str]] = field(default_factory=dict)  # config -> settings


@dataclass
class Run:
    round: int
    config: str
    processes: int
    pages: int  # distinct pages crawled (verified)
    wall: float  # launch to the last item, seconds
    cpu: float  # user + system CPU seconds of the crawler processes
    rss_mib: float  # largest peak RSS of one crawler process
    services_cpu: float  # CPU seconds of Redis, the broker, mongod and nginx meanwhile
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def pages_per_s(self) -> float:
        return self.pages / self.wall

    @property
    def pages_per_cpu_s(self) -> float:
        return self.pages / self.cpu


def command(start_url: str, settings: dict[str, Any]) -> list[str]:
    cmd = [sys.executable, "-m", "scrapy", "runspider", str(SPIDER), "-a", f"start_url={start_url}"]
    for name, value in settings.items():
        cmd += ["-s", f"{name}={value}"]
    return cmd


def base_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _SCRUB}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    return env


def plan(config: str, ctx: Context, tag: str) -> tuple[int, dict[str, Any], dict[str, str]]:
    """(processes, settings, environment) of one run of *config*."""
    env = base_env()
    settings = {**COMMON, **ctx.extra.get(config, {})}
    if config == "scrapy-redis":
        settings.update(SCRAPY_REDIS, REDIS_URL=ctx.services["REDIS_URL"])
        if ctx.services.get("REDIS_PARAMS"):  # JSON: scrapy-redis reads it with getdict
            settings["REDIS_PARAMS"] = ctx.services["REDIS_PARAMS"]
        return 1, settings, env
    if config == "stock":
        return 1, settings, env
    env.update(ctx.services, SCRAPY_SETTINGS_MODULE="crawler.settings", CRAWL_ID=tag)
    settings.update(OURS)
    return (2 if config == "worker2" else 1), settings, env


def launch(ctx: Context, tag: str, index: int, settings: dict[str, Any],
           env: dict[str, str]) -> tuple[subprocess.Popen[bytes], Path]:
    """Start crawler process *index* of run *tag*: the process, and the path of its probe;
    its log is ``<workdir>/logs/<tag>-<index>.log``."""
    probe = ctx.workdir / f"{tag}-{index}.probe.json"
    logs = ctx.workdir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    proc = subprocess.Popen(command(ctx.base_url + "/", {**settings, "BENCH_PROBE_PATH": probe}),
                            cwd=ctx.cwd, env=env, stdout=subprocess.DEVNULL,
                            stderr=open(logs / f"{tag}-{index}.log", "wb"),
                            start_new_session=True)
    return proc, probe


def run_once(config: str, ctx: Context, round_no: int) -> Run:
    tag = f"bench-{int(time.time())}-{round_no}-{config}"
    count, settings, env = plan(config, ctx, tag)
    before = services.cpu_seconds(ctx.watch_pids)
    commands = services.redis_commands(ctx.services)
    started = time.time()
    procs, probes = zip(*(launch(ctx, tag, i, settings, env) for i in range(count)), strict=True)
    usage = services.reap(list(procs), ctx.timeout)
    services_cpu = services.cpu_seconds(ctx.watch_pids) - before
    run = finish(config, ctx, round_no, tag, started, list(probes), usage, services_cpu)
    # the run's Redis round trips (and the runner's few reads and the clean-up's)
    run.extra["redis_commands_per_page"] = (
        services.redis_commands(ctx.services) - commands) / run.pages
    return run


def finish(config: str, ctx: Context, round_no: int, tag: str, started: float,
           probes: list[Path], usage: list[services.Usage], services_cpu: float) -> Run:
    failed = [u for u in usage if u.status != 0]
    if failed:
        raise RuntimeError(f"{config} round {round_no}: exit status {failed[0].status}; "
                           f"logs in {ctx.workdir / 'logs'}/{tag}-*.log")
    seen = [services.read_probe(p) for p in probes]
    last = max(max(p["last"] or 0, p["last_item"] or 0) for p in seen)
    first = min(p["first"] for p in seen if p["first"])
    pages = services.verify(config, ctx.pages, ctx.services, tag, seen)
    extra = services.after_run(config, ctx.services, tag, seen)
    extra["startup_s"] = first - started  # launch to the first response
    extra["crawl_pages_per_s"] = pages / (last - first)
    return Run(round_no, config, len(usage), pages, last - started,
               sum(u.cpu for u in usage), max(u.rss_mib for u in usage), services_cpu, extra)


def rounds(configs: Sequence[str], ctx: Context, count: int) -> list[Run]:
    """Every config once per round; each round starts one config later (interleaved)."""
    results: list[Run] = []
    for r in range(count):
        order = list(configs[r % len(configs):]) + list(configs[:r % len(configs)])
        for config in order:
            run = run_once(config, ctx, r + 1)
            logger.info("round %d %-12s %6.1f pages/s %6.1f pages/CPU-s %5.0f MiB", r + 1,
                        config, run.pages_per_s, run.pages_per_cpu_s, run.rss_mib)
            results.append(run)
    return results


def beside(ctx: Context, *, profiled: bool, joined: bool) -> dict[str, Any]:
    """The runs beside the rounds (:mod:`benchmarks.extra_runs`) that were asked for."""
    from benchmarks import extra_runs  # it imports this module

    extras: dict[str, Any] = {}
    if profiled:
        extras["profiled"] = extra_runs.profiled(ctx)
    if joined:
        extras["joined"] = extra_runs.joined(ctx)
    return extras


def main(argv: Sequence[str] | None = None) -> int:
    services.end_on_sigterm()  # a SIGTERM stops what it started, too
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pages", type=int, default=20_000)
    parser.add_argument("--links", type=int, default=SiteSpec.links)
    parser.add_argument("--min-bytes", type=int, default=SiteSpec.min_bytes)
    parser.add_argument("--max-bytes", type=int, default=SiteSpec.max_bytes)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--configs", default=",".join(CONFIGS))
    parser.add_argument("--workdir", type=Path, default=REPO / ".bench")
    parser.add_argument("--out", type=Path, default=REPO / "docs" / "benchmarks")
    parser.add_argument("--timeout", type=float, default=1800.0)
    parser.add_argument("--set", action="append", default=[], metavar="CONFIG:NAME=VALUE",
                        help="an extra Scrapy setting for one config (repeatable)")
    parser.add_argument("--profile", action="store_true",
                        help="one more 1-worker run under py-spy: CPU by component")
    parser.add_argument("--join", action="store_true",
                        help="one more run where a second worker joins the crawl at 30%%")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    configs = [c for c in args.configs.split(",") if c]
    if unknown := set(configs) - set(CONFIGS):
        parser.error(f"unknown configs {sorted(unknown)}; choose from {', '.join(CONFIGS)}")
    extra: dict[str, dict[str, str]] = {}
    for item in args.set:
        config, _, assignment = item.partition(":")
        name, _, value = assignment.partition("=")
        extra.setdefault(config, {})[name] = value
    spec = SiteSpec(args.pages, args.links, args.min_bytes, args.max_bytes)
    site = ensure(args.workdir / f"site-{args.pages}-{args.links}", spec)
    stack = Stack(args.workdir / "stack")
    try:
        env = stack.start()
        with Nginx(site, args.workdir / "nginx") as server:
            pids = [s["pid"] for s in stack.status().values()] + services.family(server)
            cwd = Path(tempfile.mkdtemp(prefix="crawler-bench-"))
            ctx = Context(args.workdir, cwd, server.base_url, args.pages, env, pids,
                          args.timeout, extra)
            results = rounds(configs, ctx, args.rounds)
            extras = beside(ctx, profiled=args.profile, joined=args.join)
    finally:
        stack.stop()
    report.write(args.out, results, spec, argv=sys.argv if argv is None else list(argv),
                 extras=extras)
    print(report.summary(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
