"""Process accounting and per-run checks of the benchmark runner."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.nginx import Nginx
from benchmarks.spider import stat_cpu_seconds


@dataclass(frozen=True)
class Usage:
    status: int
    cpu: float  # user + system seconds
    rss_mib: float  # peak resident set size


def reap(procs: list[subprocess.Popen[bytes]], timeout: float) -> list[Usage]:
    """Wait for every process with ``wait4`` (their CPU time and peak RSS); raise if any is
    still running after *timeout* seconds. Whatever ends the wait early (the timeout, Ctrl-C,
    SIGTERM through :func:`end_on_sigterm`) kills the processes not reaped yet: they run in
    sessions of their own, so no signal to the runner reaches them."""
    deadline = time.monotonic() + timeout
    usage: dict[int, Usage] = {}
    try:
        while len(usage) < len(procs):
            for proc in procs:
                if proc.pid not in usage:
                    _reaped(proc, usage)
            if time.monotonic() > deadline:
                raise TimeoutError(f"crawler processes still running after {timeout:.0f}s")
            time.sleep(0.1)
    except BaseException:
        kill([proc for proc in procs if proc.pid not in usage])
        raise
    return [usage[p.pid] for p in procs]


def kill(procs: list[subprocess.Popen[bytes]]) -> None:
    """SIGKILL each of *procs* with its process group (the session it was started in), and
    wait for it."""
    for proc in procs:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def _reaped(proc: subprocess.Popen[bytes], usage: dict[int, Usage]) -> None:
    """Put *proc*'s usage in *usage* if it has ended."""
    pid, status, rusage = os.wait4(proc.pid, os.WNOHANG)
    if pid:
        proc.returncode = os.waitstatus_to_exitcode(status)
        usage[pid] = Usage(proc.returncode, rusage.ru_utime + rusage.ru_stime,
                           rusage.ru_maxrss / 1024)


def end_on_sigterm() -> None:
    """Make SIGTERM end this benchmark as Ctrl-C does, through its ``finally`` blocks, which
    stop the services, nginx and the crawler processes it started (by default SIGTERM ends
    Python at once, and they would run on, each in a session of its own)."""
    def _exit(signum: int, _frame: Any) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, _exit)


def cpu_seconds(pids: list[int]) -> float:
    """User + system CPU seconds used so far by *pids* (each process's own threads)."""
    return sum(stat_cpu_seconds(f"/proc/{pid}/stat") or 0.0 for pid in pids)


def family(server: Nginx) -> list[int]:
    """The nginx master and its worker processes."""
    assert server.process is not None
    pid = server.process.pid
    try:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        children = []
    return [pid, *map(int, children)]


def read_probe(path: Path) -> dict[str, Any]:
    try:
        data: dict[str, Any] = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise RuntimeError(f"no probe output in {path}: {exc}") from None
    return data


def verify(config: str, expected: int, env: dict[str, str], tag: str,
           probes: list[dict[str, Any]]) -> int:
    """The number of distinct pages the run crawled; raises unless it is the whole site
    (for this project: every page stored in MongoDB exactly once)."""
    if config in ("stock", "scrapy-redis"):
        pages = sum(p["pages"] for p in probes)
    else:
        from crawler.localstack.demo import stored_pages

        docs, urls = stored_pages(env["MONGO_URI"], "crawler", tag)
        if docs != urls:
            raise RuntimeError(f"{config} {tag}: {docs} documents for {urls} URLs in MongoDB")
        pages = docs
    if pages != expected:
        raise RuntimeError(f"{config} {tag}: crawled {pages} pages of {expected}")
    return pages


@contextlib.contextmanager
def redis_of(env: dict[str, str]) -> Iterator[Any]:
    """A client of the benchmark's Redis (``REDIS_PARAMS`` too: a stack with TLS works),
    closed afterwards."""
    from crawler.connections.clients import redis_sync_client
    from crawler.connections.options import RedisOptions

    options = RedisOptions.from_env(env)
    client = redis_sync_client(options.url, options.params,
                               connect_timeout=options.connect_timeout)
    try:
        yield client
    finally:
        client.close()


def redis_commands(env: dict[str, str]) -> int:
    """Commands the benchmark's Redis has processed so far (``INFO stats``)."""
    with redis_of(env) as client:
        return int(client.info("stats")["total_commands_processed"])


def after_run(config: str, env: dict[str, str], tag: str,
              probes: list[dict[str, Any]]) -> dict[str, Any]:
    """Per-run facts worth reporting; then drop what the run left in Redis and MongoDB."""
    extra: dict[str, Any] = {"responses": sum(p["pages"] for p in probes), "threads": {},
                             "startup": [p["startup"] for p in probes if p.get("startup")],
                             # (pages, RSS MiB, CPU-s) along a one-process crawl
                             "series": probes[0].get("series", []) if len(probes) == 1 else []}
    for probe in probes:  # CPU seconds per thread, summed over processes, kafka's merged
        for name, cpu in probe.get("threads", {}).items():
            name = "MainThread" if name == "MainThread" else "Kafka client threads" if (
                "kafka" in name or "network-thread" in name) else "other"
            extra["threads"][name] = extra["threads"].get(name, 0.0) + cpu
    with redis_of(env) as client:
        if config == "scrapy-redis":
            members = client.scard("bench:dupefilter")
            used = client.memory_usage("bench:dupefilter", samples=0) or 0
            extra["dupefilter_bytes_per_url"] = used / max(members, 1)
            client.delete("bench:dupefilter", "bench:requests")
        else:
            keys = list(client.scan_iter(match=f"{{{tag}}}*", count=1000))
            if keys:
                client.delete(*keys)
    if config in ("worker1", "worker2"):
        from pymongo import MongoClient

        mongo: MongoClient[dict[str, Any]]
        with MongoClient(env["MONGO_URI"]) as mongo:
            mongo["crawler"].drop_collection(tag)
    return extra
