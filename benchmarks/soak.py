"""Issue 16's soak: a long crawl at the default settings with a ``kill -9`` every few minutes;
after warm-up, worker RSS grows by less than 10% and the open file descriptors stay flat::

    .venv/bin/python -m benchmarks.soak              # 200,000 pages, 3 workers, kill every 120 s
    .venv/bin/python -m benchmarks.soak --pages 8000 --kill-every 15 --warmup 20 --out /tmp/soak

The local stack (Redis, the broker, mongod) and the generated demo site (its own process) run
on loopback; the workers are ``scrapy crawl site`` processes with no setting changed. Worker 0
is never killed, so one process lives through the whole crawl and every rebalance; slots 1 and
up are killed in turn every ``--kill-every`` seconds and restarted at once, until
``--stop-killing-at`` of the pages are stored (a worker started on a crawl that has just
finished can wait on the broker's group for good, which is not what this measures). Every
``--sample-every`` seconds the driver reads each live worker's ``VmRSS`` and ``/proc/<pid>/fd``.

It checks what the crawl must keep whatever it was killed at: every page stored once, every
worker's exit code 0, and the crawl ledger balanced (``scrapy cluster report``: nothing
pending, unaccounted or overcounted); then the bounds of :mod:`benchmarks.soak_report`.
Writes ``results.json`` and ``report.md`` to ``--out``; the exit code is 1 on any failure.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from pymongo import MongoClient

from benchmarks import services
from benchmarks import soak_report as report
from crawler.localstack import demo_site
from crawler.localstack.demo import Worker, start_worker, stored_pages, worker_command
from crawler.localstack.stack import Stack


@dataclass(frozen=True)
class Plan:
    pages: int = 200_000
    workers: int = 3
    kill_every: float = 120.0
    warmup: float = 180.0  # longer than one kill period: the first rebalance is in it
    sample_every: float = 2.0
    stop_killing_at: float = 0.9
    # a share of the pages stored since the last kill before the next one: kills closer than
    # the group's failover (6 s session timeout, then the rejoin) would keep it rebalancing
    kill_after_progress: float = 0.0
    timeout: float = 4 * 3600.0
    max_rss_growth: float = 0.10
    fd_slack: int = 4  # a connection opened or closed between the two fifths
    origin_limit: int = 32  # CONCURRENT_REQUESTS of the project settings: the HTTP pool's bound
    service_limit: int = 64  # Redis, broker, mongod: 14-17 held in 8,000 pages, 27 in 200,000
    leak_bytes: int = 0  # a leak on purpose (benchmarks.leak): proves the bounds catch one
    # CRAWL_IDLE_TIMEOUT, None for the default (30 s): the short soak in the suite lowers it
    idle_timeout: float | None = None


@dataclass
class Outcome:
    plan: Plan
    elapsed: float = 0.0
    stored: int = 0
    distinct: int = 0
    codes: list[int] = field(default_factory=list)
    kills: list[float] = field(default_factory=list)
    ledger: dict[str, Any] = field(default_factory=dict)
    lives: list[report.Life] = field(default_factory=list)
    samples: list[report.Sample] = field(default_factory=list)
    growths: list[report.Growth] = field(default_factory=list)

    def problems(self) -> list[str]:
        """Every way this run fell short; empty when it held."""
        found = []
        if (self.stored, self.distinct) != (self.plan.pages, self.plan.pages):
            found.append(f"stored {self.stored} documents, {self.distinct} distinct URLs, "
                         f"of {self.plan.pages} pages")
        if any(self.codes):
            found.append(f"exit codes of the last processes: {self.codes}")
        unbalanced = {k: self.ledger.get(k) for k in ("pending", "unaccounted", "overcounted")}
        if any(v != 0 for v in unbalanced.values()):
            found.append(f"crawl ledger: {unbalanced}")
        return found + report.failures(self.growths, self.plan.max_rss_growth,
                                       self.plan.fd_slack, self.plan.origin_limit,
                                       self.plan.service_limit)


class Soak:
    """The worker processes of one crawl, their kills and their samples."""

    def __init__(self, env: dict[str, str], crawl_id: str, start_url: str, log_dir: Path,
                 plan: Plan) -> None:
        if plan.workers < 2:
            raise ValueError("a soak needs two workers at least: worker 0 is never killed")
        self.env, self.crawl_id, self.plan, self.log_dir = env, crawl_id, plan, log_dir
        self.origin_port = urlsplit(start_url).port or 80
        idle = {} if plan.idle_timeout is None else {"CRAWL_IDLE_TIMEOUT": plan.idle_timeout}
        self.cmd = worker_command(start_url, {**_leak(plan.leak_bytes), **idle})  # else defaults
        self.slots: dict[int, tuple[Worker, report.Life]] = {}
        self.outcome = Outcome(plan)
        self.t0 = time.monotonic()

    def now(self) -> float:
        return time.monotonic() - self.t0

    def start(self, index: int, generation: int) -> None:
        worker = start_worker(index, self.cmd, {**self.env, "CRAWL_ID": self.crawl_id},
                              self.log_dir)
        self.slots[index] = (worker, report.Life(index, generation, worker.process.pid,
                                                 self.now(), 0.0, False))

    def end(self, index: int, *, killed: bool) -> int:
        worker, life = self.slots.pop(index)
        if killed:
            os.kill(worker.process.pid, signal.SIGKILL)
        code = worker.process.wait()
        worker.log.close()
        self.outcome.lives.append(replace(life, ended=self.now(), killed=killed))
        return code

    def kill(self, index: int) -> None:
        generation = self.slots[index][1].generation
        self.end(index, killed=True)
        self.outcome.kills.append(self.now())
        print(f"[soak {self.now():7.1f}s] kill -9 worker {index} gen {generation}", flush=True)
        self.start(index, generation + 1)

    def sample(self, stored: int) -> None:
        for index, (worker, life) in list(self.slots.items()):
            if worker.process.poll() is not None:
                self.outcome.codes.append(self.end(index, killed=False))
                continue
            probe = _probe(worker.process.pid, self.origin_port)
            if probe:
                self.outcome.samples.append(report.Sample(self.now(), index, life.generation,
                                                          *probe, stored))

    def run(self) -> Outcome:
        plan, col = self.plan, _collection(self.env["MONGO_URI"], self.crawl_id)
        for index in range(plan.workers):
            self.start(index, 0)
        next_kill, victim, killed_at = plan.kill_every, 1, 0
        try:
            while self.slots:
                stored = col.estimated_document_count()
                self.sample(stored)
                if self.now() >= next_kill and self._may_kill(stored, killed_at):
                    if victim in self.slots:
                        self.kill(victim)
                    victim = victim % (plan.workers - 1) + 1
                    next_kill, killed_at = self.now() + plan.kill_every, stored
                if self.now() > plan.timeout:
                    raise TimeoutError(f"workers still running after {plan.timeout:.0f}s")
                time.sleep(plan.sample_every)
        finally:
            for index in list(self.slots):
                self.end(index, killed=True)
            col.database.client.close()
        return self.finish()

    def _may_kill(self, stored: int, killed_at: int) -> bool:
        """Whether a kill is due by progress: below ``stop_killing_at`` of the pages, and
        ``kill_after_progress`` of them stored since the last kill (at *killed_at*)."""
        plan = self.plan
        return (stored < plan.stop_killing_at * plan.pages
                and stored - killed_at >= plan.kill_after_progress * plan.pages)

    def finish(self) -> Outcome:
        out = self.outcome
        out.elapsed = self.now()
        out.stored, out.distinct = stored_pages(self.env["MONGO_URI"], "crawler", self.crawl_id)
        out.ledger = ledger(self.crawl_id, self.env)
        end = report.crawl_end(out.samples)
        out.growths = [report.growth(life, out.samples, self.plan.warmup, end)
                       for life in sorted(out.lives, key=lambda x: (x.index, x.generation))]
        return out


def _collection(mongo_uri: str, crawl_id: str) -> Any:
    return MongoClient(mongo_uri, serverSelectionTimeoutMS=5000)["crawler"][crawl_id]


def _probe(pid: int, origin_port: int) -> tuple[int, int, int, int] | None:
    """(VmRSS in KiB, open descriptors, TCP connections to *origin_port*, other TCP
    connections) of *pid*; None once it has gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            rss = next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))
        targets = []
        for fd in os.listdir(f"/proc/{pid}/fd"):
            with contextlib.suppress(OSError):  # closed meanwhile
                targets.append(os.readlink(f"/proc/{pid}/fd/{fd}"))
        remote = _remote_ports(pid)
    except (OSError, StopIteration):
        return None
    sockets = [t.removeprefix("socket:[").rstrip("]") for t in targets if t.startswith("socket:")]
    ports = [remote[inode] for inode in sockets if remote.get(inode)]  # 0: listening
    origin = sum(port == origin_port for port in ports)
    return rss, len(targets), origin, len(ports) - origin


def _remote_ports(pid: int) -> dict[str, int]:
    """The remote port of each TCP socket in *pid*'s network namespace, by inode (0 for a
    listening one): ``/proc/<pid>/net/tcp``'s ``rem_address`` is the third field, the inode
    the tenth."""
    found = {}
    for table in ("tcp", "tcp6"):
        with contextlib.suppress(FileNotFoundError), open(f"/proc/{pid}/net/{table}") as f:
            for line in f.readlines()[1:]:
                fields = line.split()
                found[fields[9]] = int(fields[2].rsplit(":", 1)[1], 16)
    return found


def ledger(crawl_id: str, env: dict[str, str]) -> dict[str, Any]:
    """``scrapy cluster report CRAWL_ID --json`` as a user runs it."""
    full = {**os.environ, "SCRAPY_SETTINGS_MODULE": "crawler.settings", **env}
    proc = subprocess.run([sys.executable, "-m", "scrapy", "cluster", "report", crawl_id,
                           "--json"], env=full, capture_output=True, text=True, timeout=120)
    if proc.returncode:
        return {"error": proc.stderr.strip().splitlines()[-1:]}
    return json.loads(proc.stdout)  # type: ignore[no-any-return]


def write(out: Outcome, directory: Path) -> list[str]:
    """``results.json`` and ``report.md`` in *directory*; the report's lines."""
    directory.mkdir(parents=True, exist_ok=True)
    p = out.plan
    lines = [f"# Soak: {p.pages} pages, {p.workers} workers, kill -9 every {p.kill_every:.0f} s",
             "", f"- wall time {out.elapsed:.0f} s, {len(out.kills)} kills, "
             f"{out.stored} documents stored, {out.distinct} distinct URLs",
             f"- ledger: pending {out.ledger.get('pending')}, unaccounted "
             f"{out.ledger.get('unaccounted')}, overcounted {out.ledger.get('overcounted')}",
             f"- bounds after a {p.warmup:.0f} s warm-up: RSS growth < {p.max_rss_growth:.0%}, "
             f"open files other than TCP connections + {p.fd_slack} at most, "
             f"{p.origin_limit} connections to the origin and {p.service_limit} to the "
             f"services at most", "",
             *report.table(out.growths), ""]
    problems = out.problems()
    lines += [f"**FAILED**: {x}" for x in problems] or ["All checks held."]
    (directory / "report.md").write_text("\n".join(lines) + "\n")
    results = {"plan": asdict(p), "elapsed": out.elapsed, "kills": out.kills,
               "stored": out.stored, "distinct": out.distinct, "codes": out.codes,
               "ledger": out.ledger, "lives": report.as_json(out.growths),
               "samples": [asdict(s) for s in out.samples], "problems": problems}
    (directory / "results.json").write_text(json.dumps(results))
    return lines


def soak(env: dict[str, str], crawl_id: str, plan: Plan, workdir: Path) -> Outcome:
    """Generate and serve the site in *workdir*, crawl it under kills; the outcome."""
    server, base_url = demo_site.start_server_process(workdir / "site", plan.pages,
                                                      timeout=600)
    try:
        return Soak(env, crawl_id, base_url + "/", workdir / "logs", plan).run()
    finally:
        server.terminate()
        server.wait()


def _leak(size: int) -> dict[str, Any]:
    """The settings of a leak of *size* bytes a page (none for 0): the extension joins
    Scrapy's base extensions, which the project's add-on leaves alone."""
    if size <= 0:
        return {}
    from scrapy.settings.default_settings import EXTENSIONS_BASE

    return {"EXTENSIONS_BASE": json.dumps({**EXTENSIONS_BASE, "benchmarks.leak.Leak": 0}),
            "LEAK_BYTES_PER_PAGE": size}


def main(argv: list[str] | None = None) -> int:
    services.end_on_sigterm()  # a SIGTERM stops what it started, too
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    defaults = Plan()
    for name, value in asdict(defaults).items():
        parser.add_argument("--" + name.replace("_", "-"), type=type(value), default=value)
    parser.add_argument("--out", type=Path, default=Path("docs/benchmarks/soak"))
    args = parser.parse_args(argv)
    plan = Plan(**{k: getattr(args, k) for k in asdict(defaults)})
    with tempfile.TemporaryDirectory(prefix="soak-") as tmp:
        stack = Stack(Path(tmp) / "stack")
        env = stack.start()
        try:
            out = soak(env, f"soak-{int(time.time())}", plan, Path(tmp))
        finally:
            stack.stop()
    lines = write(out, args.out)
    print("\n".join(lines))
    return 1 if out.problems() else 0


if __name__ == "__main__":
    sys.exit(main())
