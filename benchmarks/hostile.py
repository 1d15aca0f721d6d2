"""Issue 12's check: a flaky origin behind proxies must never kill the proxy pool::

    .venv/bin/python -m benchmarks.hostile                   # 121 pages, 1 round
    .venv/bin/python -m benchmarks.hostile --pages 20 --out /tmp/hostile   # smoke

In one invocation (and once per ``--rounds``), three crawls by two workers each
(``scrapy crawl site``) at the default settings plus ``ROTATING_PROXY_LIST`` (which switches
the proxy pool on) and ``-a allowed_domains``, each with its own CRAWL_ID and its own fault
origin (``tests/servers/faultorigin.py``: two loopback hosts, seed :data:`SEED`, fresh
attempt counters):

- ``a-hostile-mixed``: the hostile profile through the mixed pool: the two healthy proxies (the
  second with basic auth), the slow one, the 403 one and a dead port;
- ``b-hostile-healthy``: the hostile profile through the two healthy proxies;
- ``c-friendly-healthy``: no faults, through the two healthy proxies.

Each reports the wall time from the launch to the exit of both workers, the pages stored
(distinct URLs in MongoDB) and duplicates, failures recorded, the pages not stored by
scenario, the longest gap between two consecutive origin arrivals, and the ``proxy/*`` and
``retry/*`` stats of the workers' final dumps, summed (proxy ids shown by role). Writes
``results.json`` and ``report.md`` to ``--out``.
"""

from __future__ import annotations

import argparse
import logging
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks import hostile_report as report
from benchmarks import services
from crawler.localstack.demo import Worker, running, wait_all, worker_command
from crawler.localstack.stack import Stack
from crawler.politeness.proxypool import parse_proxy

REPO = Path(__file__).resolve().parent.parent
# The test servers (the fault origin and the proxy.py proxies) stay in tests/servers, imported
# as ``servers.*`` the way the tests import them (pytest's pythonpath is tests/).
if str(REPO / "tests") not in sys.path:
    sys.path.insert(0, str(REPO / "tests"))
from servers.faultorigin import (  # noqa: E402
    Faults,
    page_scenarios,
    read_log,
    site_urls,
    start_origin,
)
from servers.testproxies import start_proxies  # noqa: E402

logger = logging.getLogger(__name__)
HOSTS = ("127.0.0.1", "127.0.0.2")
SEED = 1  # page 0 (the start URL) is served at once; see the report for every page's scenario
WORKERS = 2


@dataclass(frozen=True)
class Crawl:
    name: str
    faults: str  # a Faults spec: "hostile" or "none"
    pool: str  # "mixed" (every test proxy) or "healthy" (the two healthy ones)
    title: str


CRAWLS = (
    Crawl("a-hostile-mixed", "hostile", "mixed", "hostile origin, mixed pool "
          "(2 healthy + slow + 403 + dead)"),
    Crawl("b-hostile-healthy", "hostile", "healthy", "hostile origin, healthy proxies only"),
    Crawl("c-friendly-healthy", "none", "healthy", "friendly origin, healthy proxies only"),
)


@dataclass
class Context:
    workdir: Path
    services: dict[str, str]  # the stack's KAFKA_BOOTSTRAP_SERVERS, REDIS_URL, MONGO_URI
    proxies: Any  # servers.testproxies.ProxySet
    pages: int
    timeout: float

    def pool(self, kind: str) -> list[str]:
        return list(self.proxies.all if kind == "mixed" else self.proxies.healthy)

    def roles(self) -> dict[str, str]:
        """Proxy id -> its role, so that stats keys read the same in every run."""
        named = {f"healthy{i}": url for i, url in enumerate(self.proxies.healthy)}
        named.update(dead=self.proxies.dead, slow=self.proxies.slow,
                     forbidden=self.proxies.forbidden)
        return {parse_proxy(url).id: role for role, url in named.items()}


def run_crawl(crawl: Crawl, ctx: Context, round_no: int) -> dict[str, Any]:
    crawl_id = f"hostile-{int(time.time())}-{round_no}-{crawl.name}"
    logs = ctx.workdir / crawl_id
    logs.mkdir(parents=True, exist_ok=True)
    faults = Faults.parse(crawl.faults)
    origin, _base = start_origin(ctx.pages, logs / "origin.jsonl", seed=SEED, hosts=HOSTS,
                                faults=faults)
    # both hosts are seeds: private networks (loopback) are closed but to the seeds' hosts
    seeds = ",".join(url + "/" for url in origin.base_urls)
    cmd = worker_command(seeds, {"ROTATING_PROXY_LIST": ",".join(ctx.pool(crawl.pool))})
    cmd += ["-a", "allowed_domains=" + ",".join(HOSTS)]
    with origin:
        launched = time.time()
        workers, timed_out = _crawl(cmd, {**ctx.services, "CRAWL_ID": crawl_id}, logs,
                                    ctx.timeout)
        wall = time.time() - launched
        entries = read_log(origin.log_path)
    texts = [Path(w.log.name).read_text(errors="replace") for w in workers]
    urls = site_urls(origin.base_urls, ctx.pages)
    hostile = crawl.faults == "hostile"
    scenarios = page_scenarios(faults, SEED, HOSTS, ctx.pages) if hostile else [None] * len(urls)
    result = {"crawl": crawl.name, "title": crawl.title, "round": round_no,
              "crawl_id": crawl_id, "logs": str(logs), "wall_s": round(wall, 1),
              "timed_out": timed_out, "exit_codes": [w.process.returncode for w in workers]}
    result.update(_measure(ctx, crawl_id, entries, launched, texts, urls, scenarios))
    return result


def _crawl(cmd: list[str], env: dict[str, str], logs: Path,
           timeout: float) -> tuple[list[Worker], bool]:
    """Run the workers until they all exit (or *timeout*: then they are killed)."""
    with running(WORKERS, cmd, env, logs) as workers:
        try:
            wait_all(workers, timeout)
        except subprocess.TimeoutExpired:
            logger.warning("workers still running after %.0fs: killed", timeout)
            return workers, True  # leaving running() kills them
    return workers, False


def _measure(ctx: Context, crawl_id: str, entries: list[dict[str, Any]], launched: float,
             texts: list[str], urls: list[str], scenarios: list[str | None]) -> dict[str, Any]:
    docs, have, failed = report.stored(ctx.services["MONGO_URI"], crawl_id)
    gap, gap_at = report.longest_gap(entries, launched)
    dumps = [d for d in map(report.final_stats, texts) if d is not None]
    last = max((float(e["ts"]) for e in entries), default=launched) - launched
    return {"pages": ctx.pages, "stored": len(have & set(urls)), "documents": docs,
            "duplicates": docs - len(have), "failures": len(failed),
            "failure_reasons": dict(Counter(failed.values())),
            "missing": report.missing(urls, scenarios, have),
            "longest_gap_s": round(gap, 2), "longest_gap_at_s": round(gap_at, 1),
            "last_arrival_s": round(last, 1), "origin": report.origin_summary(entries),
            "dumps": len(dumps), "stats": report.summed(dumps, ctx.roles()),
            "exceptions": report.summed(dumps, ctx.roles(), (report.EXCEPTIONS,))}


def run(args: argparse.Namespace) -> list[dict[str, Any]]:
    chosen = [c for c in CRAWLS if c.name in args.crawls]
    stack = Stack(args.workdir / "hostile-stack")
    runs: list[dict[str, Any]] = []
    try:
        services = stack.start()
        with start_proxies(args.workdir / "hostile-proxies") as proxies:
            ctx = Context(args.workdir, services, proxies, args.pages, args.timeout)
            for round_no in range(1, args.rounds + 1):
                for crawl in chosen:
                    logger.info("round %d: %s (%s)", round_no, crawl.name, crawl.title)
                    runs.append(run_crawl(crawl, ctx, round_no))
                    logger.info("%s: %.1fs, %d/%d stored", crawl.name, runs[-1]["wall_s"],
                                runs[-1]["stored"], args.pages)
    finally:
        stack.stop()
    return runs


def main(argv: Sequence[str] | None = None) -> int:
    services.end_on_sigterm()  # a SIGTERM stops what it started, too
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pages", type=int, default=121)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--out", type=Path, default=REPO / "docs" / "benchmarks" / "issue12")
    parser.add_argument("--workdir", type=Path, default=REPO / ".bench")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds a crawl may take")
    parser.add_argument("--crawls", default=",".join(c.name for c in CRAWLS),
                        help="comma-separated crawl names (default: all three)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    logging.getLogger("kafka").setLevel(logging.WARNING)  # the stack's start-up probe
    args.crawls = [name for name in args.crawls.split(",") if name]
    if unknown := set(args.crawls) - {c.name for c in CRAWLS}:
        parser.error(f"unknown crawls {sorted(unknown)}")
    args.workdir = args.workdir.absolute()
    runs = run(args)
    scenarios = page_scenarios(Faults.parse("hostile"), SEED, HOSTS, args.pages)
    data = {"date": time.strftime("%Y-%m-%d %H:%M:%S %z"), "pages": args.pages, "seed": SEED,
            "hosts": list(HOSTS), "argv": ["python", "-m", "benchmarks.hostile",
                                           *(sys.argv[1:] if argv is None else argv)],
            "site": report.site_summary(scenarios), "runs": runs}
    report.write(args.out, data)
    print(report.summary(runs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
