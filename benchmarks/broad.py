"""Issue 34, item 6: a broad crawl of many small hosts, politeness read at the origin::

    .venv/bin/python -m benchmarks.broad        # 1,000 hosts, ~15,000 pages: docs/benchmarks/broad
    .venv/bin/python -m benchmarks.broad --hosts 100 --pages 1000 --chain 8 --out /tmp/broad

The site (:mod:`benchmarks.broad_site`): every host its own loopback address, one nginx for
all, a long tail of host sizes, robots.txt with ``Crawl-delay`` on some hosts, slow and
failing hosts, cross-host links. Every crawler runs the benchmarks' spider
(:mod:`benchmarks.broad_spider`) seeded with every host's ``/``, one run each, one after the
other, against a fresh nginx with its own access log:

- ``stock``: Scrapy, robots.txt obeyed, Scrapy's broad-crawl scheduler
  (``DownloaderAwarePriorityQueue``), ``CONCURRENT_REQUESTS`` a worker's default;
- ``scrapy-redis``: its scheduler and dupefilter against the stack's Redis, the same;
- ``worker1``, ``worker2``, ``worker4``: this project's workers at their defaults against the
  local stack (Kafka, Redis, MongoDB); the one override is the runner's
  ``CRAWL_IDLE_TIMEOUT`` (:data:`benchmarks.runner.OURS`).

Figures (:mod:`benchmarks.broad_report`) come from the origin's log, the processes' ``wait4``
and the probe; :mod:`benchmarks.broad_write` writes ``results.json`` and ``report.md``.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from scrapy.settings import default_settings

from benchmarks import broad_report as maths
from benchmarks import broad_write, runner, services
from benchmarks.broad_site import BroadNginx, BroadSpec, Host, ensure, seeds
from crawler import settings as project
from crawler.config import defaults
from crawler.localstack.demo import stored_pages
from crawler.localstack.services import free_port
from crawler.localstack.stack import Stack

logger = logging.getLogger(__name__)
SPIDER = runner.REPO / "benchmarks" / "broad_spider.py"
CONFIGS = ("stock", "scrapy-redis", "worker1", "worker2", "worker4")
# the runner's settings for every crawler (robots.txt obeyed, INFO, the probe) but its
# concurrency (64: there, one host): here each crawler's per-host default, and for Scrapy and
# scrapy-redis a worker's CONCURRENT_REQUESTS (Scrapy's 16 would measure that limit)
BASE = {k: v for k, v in runner.COMMON.items() if not k.startswith("CONCURRENT_")}
SCRAPY = {"CONCURRENT_REQUESTS": project.CONCURRENT_REQUESTS}
STOCK = {**SCRAPY, "SCHEDULER_PRIORITY_QUEUE": "scrapy.pqueues.DownloaderAwarePriorityQueue"}
# our workers also record when each request's rate-limit token was taken (it only records)
TRACED = {"EXTENSIONS": '{"benchmarks.spider.Probe": 0, "benchmarks.broad_spider.TokenTrace": 0}'}


@dataclass
class Context:
    workdir: Path
    cwd: Path  # outside any Scrapy project
    site: Path
    hosts: list[Host]
    port: int
    seeds: Path
    services: dict[str, str]
    stack_pids: list[int]
    timeout: float
    slow_rate: int
    trace: bool = True


def processes(config: str) -> int:
    return int(config.removeprefix("worker")) if config.startswith("worker") else 1


def host_limit(config: str) -> int:
    """Requests a config may have in flight to one host: ours cluster-wide
    (``HOSTLIMIT_CONCURRENCY``, 0: ``CONCURRENT_REQUESTS_PER_DOMAIN``), Scrapy's per process."""
    if config.startswith("worker"):
        return defaults.HOSTLIMIT_CONCURRENCY or project.CONCURRENT_REQUESTS_PER_DOMAIN
    return int(default_settings.CONCURRENT_REQUESTS_PER_DOMAIN) * processes(config)


def plan(config: str, ctx: Context, tag: str) -> tuple[dict[str, Any], dict[str, str]]:
    """(settings, environment) of a run of *config*."""
    env = runner.base_env()
    if config == "stock":
        return {**BASE, **STOCK}, env
    if config == "scrapy-redis":
        settings = {**BASE, **SCRAPY, **runner.SCRAPY_REDIS, "REDIS_URL": ctx.services["REDIS_URL"]}
        if ctx.services.get("REDIS_PARAMS"):
            settings["REDIS_PARAMS"] = ctx.services["REDIS_PARAMS"]
        return settings, env
    env.update(ctx.services, SCRAPY_SETTINGS_MODULE="crawler.settings", CRAWL_ID=tag)
    return {**BASE, **(TRACED if ctx.trace else {}), **runner.OURS}, env


def launch(ctx: Context, tag: str, index: int, settings: dict[str, Any],
           env: dict[str, str]) -> tuple[subprocess.Popen[bytes], Path]:
    """Crawler process *index* of run *tag* and its probe's path; its log is
    ``<workdir>/logs/<tag>-<index>.log``."""
    probe = ctx.workdir / "logs" / f"{tag}-{index}.probe.json"
    trace = ctx.workdir / "logs" / f"{tag}-{index}.trace.jsonl"
    cmd = [sys.executable, "-m", "scrapy", "runspider", str(SPIDER), "-a", f"seeds={ctx.seeds}"]
    for name, value in {**settings, "BENCH_PROBE_PATH": probe, "BENCH_TRACE_PATH": trace}.items():
        cmd += ["-s", f"{name}={value}"]
    log = open(ctx.workdir / "logs" / f"{tag}-{index}.log", "wb")
    with log:
        proc = subprocess.Popen(cmd, cwd=ctx.cwd, env=env, stdout=subprocess.DEVNULL,
                                stderr=log, start_new_session=True)
    return proc, probe


def crawl(config: str, ctx: Context, tag: str, log: Path) -> dict[str, Any]:
    """Run *config* against a fresh nginx logging to *log*: the processes' figures."""
    settings, env = plan(config, ctx, tag)
    with BroadNginx(ctx.site, ctx.workdir / "broad-nginx", ctx.hosts, ctx.port, log,
                    ctx.slow_rate) as server:
        pids = ctx.stack_pids + services.family(server)
        before = services.cpu_seconds(pids)
        started = time.time()
        procs, probes = zip(*(launch(ctx, tag, i, settings, env)
                              for i in range(processes(config))), strict=True)
        try:
            usage: list[services.Usage] = services.reap(list(procs), ctx.timeout)
        except TimeoutError:
            usage = []
        exited = time.time() - started
        services_cpu = services.cpu_seconds(pids) - before
    return {"started": started, "exit_s": exited, "timed_out": not usage,
            "exit_codes": [u.status for u in usage], "cpu": sum(u.cpu for u in usage),
            "rss_mib": max((u.rss_mib for u in usage), default=0.0),
            "services_cpu": services_cpu, "probes": [str(p) for p in probes]}


def read_probes(paths: Sequence[str]) -> list[dict[str, Any]]:
    found = []
    for path in paths:
        try:
            found.append(services.read_probe(Path(path)))
        except RuntimeError as exc:
            logger.warning("%s", exc)
    return found


def run_once(config: str, ctx: Context) -> dict[str, Any]:
    tag = f"broad-{int(time.time())}-{config}"
    (ctx.workdir / "logs").mkdir(parents=True, exist_ok=True)
    log = ctx.workdir / "logs" / f"{tag}.access.log"
    run = {"config": config, "processes": processes(config), "tag": tag,
           "host_limit": host_limit(config), **crawl(config, ctx, tag, log)}
    paths = run.pop("probes")
    probes = read_probes(paths)
    started = run.pop("started")
    stamps = [max(p["last"] or 0, p["last_item"] or 0) for p in probes]
    run["wall"] = max(stamps, default=time.time()) - started
    run["startup_s"] = min((p["first"] for p in probes if p["first"]), default=started) - started
    if config.startswith("worker"):
        run["stored"], run["stored_urls"] = stored_pages(ctx.services["MONGO_URI"], "crawler", tag)
    cleanup = "worker1" if config.startswith("worker") else config  # its keys, its collection
    extra = services.after_run(cleanup, ctx.services, tag, probes)
    run["worker_startup"] = extra["startup"]
    hits = maths.parse(log.read_text().splitlines())
    run.update(origin(hits, ctx, started, run))
    traces = [Path(p.replace(".probe.json", ".trace.jsonl")) for p in paths]
    rows = [json.loads(line) for t in traces if t.exists() for line in t.read_text().splitlines()]
    run["token_lag"] = maths.token_lag(rows, hits, {h.address: h.delay for h in ctx.hosts
                                                     if h.delay})
    return run


def origin(hits: list[maths.Hit], ctx: Context, started: float,
           run: dict[str, Any]) -> dict[str, Any]:
    """What the origin's log says of a run."""
    delays = {h.address: h.delay for h in ctx.hosts if h.delay}
    gaps = maths.gap_violations(hits, delays)
    flight = maths.in_flight(hits, run["host_limit"])
    longest = max(ctx.hosts, key=lambda h: h.chain)
    return {
        "coverage": maths.coverage(hits, ctx.hosts),
        "gaps": {"count": len(gaps), "below_90": sum(g.gap < 0.9 * g.delay for g in gaps),
                 "hosts": len({g.host for g in gaps}),
                 "worst": [{"host": g.host, "gap": round(g.gap, 3), "delay": g.delay,
                            "at": round(g.at - started, 2)}
                           for g in sorted(gaps, key=lambda g: g.gap / g.delay)[:5]]},
        "in_flight": {"max": max((peak for peak, _ in flight.values()), default=0),
                      "over": sum(over for _, over in flight.values()),
                      "hosts": sum(over > 0 for _, over in flight.values())},
        "robots": maths.robots_fetches(hits, [h.address for h in ctx.hosts]),
        "robots_twice": [{"host": h, "at": [round(t - started, 2) for t in times]}
                         for h, times in robots_times(hits).items() if len(times) > 1],
        "phases": maths.phases(hits, started, delays),
        "chain": maths.chain(hits, longest, started),
        "timeline": maths.timeline(hits, started, broad_write.STEP),
    }


def robots_times(hits: list[maths.Hit]) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {}
    for hit in hits:
        if hit.uri == maths.ROBOTS:
            times.setdefault(hit.host, []).append(hit.start)
    return times


def with_bounds(runs: list[dict[str, Any]], hosts: list[Host], cores: int) -> None:
    """Add each run's bound and share of it; our workers' CPU rate is the 1-worker run's (a
    run's own if there is none)."""
    rates = {r["config"]: r["coverage"]["pages"] / r["cpu"] for r in runs if r["cpu"]}
    for run in runs:
        rate = rates.get("worker1" if run["config"].startswith("worker") else "") or rates.get(
            run["config"])
        pages = run["coverage"]["expected"]
        b = maths.bound(hosts, pages, rate or 0.0, run["processes"], cores)
        run["bound"] = {**asdict(b), "total": b.total, "limit": b.limit, "rate": rate}
        run["share"] = b.total / run["wall"] if run["wall"] > 0 else 0.0


def free_on(port: int, host: str) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def pick_port(site: Path, host: str) -> int:
    """The port the site in *site* was made for if it is free (no new site), else a free one."""
    marker = site / "site.json"
    if marker.exists():
        port = int(json.loads(marker.read_text())["port"])
        if free_on(port, host):
            return port
    return free_port()


def run(args: argparse.Namespace, spec: BroadSpec) -> tuple[list[dict[str, Any]], list[Host]]:
    site = args.workdir / "broad-site"
    port = pick_port(site, "127.20.0.1")
    hosts = ensure(site, spec, port)
    seeds_path = args.workdir / "broad-seeds.txt"
    seeds_path.write_text("\n".join(seeds(hosts, port, spec.seed)) + "\n")
    stack = Stack(args.workdir / "broad-stack")
    runs = []
    try:
        env = stack.start()
        ctx = Context(args.workdir, Path(tempfile.mkdtemp(prefix="crawler-broad-")), site, hosts,
                      port, seeds_path, env, [s["pid"] for s in stack.status().values()],
                      args.timeout, spec.slow_rate, not args.no_trace)
        for config in args.configs:
            runs.append(run_once(config, ctx))
            logger.info("%s", broad_write.line(runs[-1]))
    finally:
        stack.stop()
    return runs, hosts


def main(argv: Sequence[str] | None = None) -> int:
    services.end_on_sigterm()  # a SIGTERM stops what it started, too
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=BroadSpec.hosts)
    parser.add_argument("--pages", type=int, default=BroadSpec.pages)
    parser.add_argument("--chain", type=float, default=BroadSpec.chain,
                        help="seconds: the longest chain of Crawl-delays")
    parser.add_argument("--configs", default=",".join(CONFIGS))
    parser.add_argument("--workdir", type=Path, default=runner.REPO / ".bench")
    parser.add_argument("--out", type=Path, default=runner.REPO / "docs" / "benchmarks" / "broad")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds a run may take")
    parser.add_argument("--no-trace", action="store_true",
                        help="our workers without benchmarks.broad_spider.TokenTrace")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    logging.getLogger("kafka").setLevel(logging.WARNING)  # the stack's start-up probe
    args.configs = [c for c in args.configs.split(",") if c]
    if unknown := set(args.configs) - set(CONFIGS):
        parser.error(f"unknown configs {sorted(unknown)}; choose from {', '.join(CONFIGS)}")
    args.workdir = args.workdir.absolute()
    spec = BroadSpec(hosts=args.hosts, pages=args.pages, chain=args.chain)
    runs, hosts = run(args, spec)
    cores = os.cpu_count() or 1
    with_bounds(runs, hosts, cores)
    argv_used = ["python", "-m", "benchmarks.broad", *(sys.argv[1:] if argv is None else argv)]
    data = broad_write.assemble(spec, hosts, runs, cores, argv_used)
    broad_write.write(args.out, data)
    print(broad_write.summary(data))
    return 0


if __name__ == "__main__":
    sys.exit(main())
