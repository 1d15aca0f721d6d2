"""The main job: a local multi-worker crawl of a bundled demo site.

``python -m crawler.localstack.demo [--workers 3] [--pages 2000] [--secured]`` starts the
local stack (Redis, Apache Kafka, mongod; with ``--secured`` each with TLS and a
password, :mod:`crawler.localstack.secured`), serves a generated site on loopback,
runs the workers as separate ``scrapy crawl site`` processes with a progress
line, waits until every worker has exited by itself and prints a summary.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from crawler.localstack import demo_site
from crawler.localstack.secured import SecuredStack
from crawler.localstack.stack import Stack

CLOSE_WATCH = "[crawler.frontier.closewatch]"  # its lines: what a slow close waits on


@dataclass
class Worker:
    index: int
    process: subprocess.Popen[bytes]
    log: IO[bytes]


def worker_command(start_url: str, settings: dict[str, Any]) -> list[str]:
    """The command line of one ``site`` worker."""
    cmd = [sys.executable, "-m", "scrapy", "crawl", "site", "-a", f"start_urls={start_url}"]
    for name, value in settings.items():
        cmd += ["-s", f"{name}={value}"]
    return cmd


def start_worker(index: int, cmd: list[str], env: dict[str, str], log_dir: Path) -> Worker:
    """Start worker *index*; its log goes to ``log_dir/worker-<index>.log`` (appended)."""
    log_dir.mkdir(parents=True, exist_ok=True)
    log = open(log_dir / f"worker-{index}.log", "ab")
    # PYTHONFAULTHANDLER: a worker stuck past its deadline gets SIGABRT, and its log then
    # holds every thread's stack (see :func:`wait_all`)
    full_env = {**os.environ, "SCRAPY_SETTINGS_MODULE": "crawler.settings",
                "PYTHONFAULTHANDLER": "1", **env}
    process = subprocess.Popen(cmd, env=full_env, stdout=log, stderr=subprocess.STDOUT,
                               start_new_session=True)
    return Worker(index, process, log)


@contextmanager
def running(
    count: int, cmd: list[str], env: dict[str, str], log_dir: Path
) -> Iterator[list[Worker]]:
    """Start *count* workers; on leaving, kill those still running and close their logs."""
    workers = [start_worker(i, cmd, env, log_dir) for i in range(count)]
    try:
        yield workers
    finally:
        stop_workers(workers)


def stop_workers(workers: list[Worker]) -> None:
    """Kill the *workers* still running and close every log."""
    for worker in workers:
        if worker.process.poll() is None:
            worker.process.kill()
            worker.process.wait()
        worker.log.close()


class WorkersStuck(AssertionError):
    """Workers still running at their deadline; the message holds the tail of each one's
    log, which ends with the stacks of its threads."""


def wait_all(workers: list[Worker], timeout: float) -> list[int]:
    """Wait until every worker has exited by itself; their exit codes. Those still running
    after *timeout* seconds are aborted with their stacks dumped (:class:`WorkersStuck`)."""
    deadline = time.monotonic() + timeout
    try:
        for worker in workers:
            worker.process.wait(timeout=max(deadline - time.monotonic(), 0.1))
    except subprocess.TimeoutExpired:
        raise WorkersStuck(_abort_stuck(workers, timeout)) from None
    return [w.process.returncode for w in workers]


def stop_gracefully(worker: Worker, timeout: float, sig: int = signal.SIGINT) -> int:
    """Send *sig* (SIGINT and SIGTERM are Scrapy's graceful shutdown) and wait for the exit
    code; a worker still running after *timeout* seconds is :class:`WorkersStuck`."""
    worker.process.send_signal(sig)
    return wait_all([worker], timeout)[0]


def _abort_stuck(workers: list[Worker], timeout: float) -> str:
    stuck = [w for w in workers if w.process.poll() is None]
    for worker in stuck:
        worker.process.send_signal(signal.SIGABRT)  # the fault handler dumps every stack
    for worker in stuck:
        try:
            worker.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            worker.process.kill()
            worker.process.wait()
    tails = [f"--- worker {w.index} (pid {w.process.pid}) ---\n{_last_words(w)}" for w in stuck]
    return f"{len(stuck)} worker(s) still running after {timeout:.0f} s:\n" + "\n".join(tails)


def _last_words(worker: Worker) -> str:
    """The end of *worker*'s log, after the last report of what its close waited on."""
    text = Path(worker.log.name).read_text(errors="replace")
    watched = [line for line in text.splitlines() if CLOSE_WATCH in line][-1:]
    return "".join(f"{line}\n[...]\n" for line in watched) + text[-6000:]


def worker_logs(workers: list[Worker]) -> str:
    return "\n".join(Path(w.log.name).read_text(errors="replace") for w in workers)


def stored_pages(mongo_uri: str, database: str, collection: str) -> tuple[int, int]:
    """(documents, distinct URLs) in the crawl's collection."""
    from pymongo import MongoClient
    from pymongo.collection import Collection

    client: MongoClient[dict[str, Any]]
    with MongoClient(mongo_uri, serverSelectionTimeoutMS=5000) as client:
        col: Collection[dict[str, Any]] = client[database][collection]
        docs = col.count_documents({})
        urls = len(col.distinct("url")) if docs else 0
    return docs, urls


def _progress(started: float, docs: int, expected: int, alive: int) -> None:
    elapsed = time.monotonic() - started
    rate = docs / elapsed if elapsed else 0.0
    line = (f"\r[{elapsed:6.1f}s] pages stored {docs:>6}/{expected}  "
            f"{rate:7.1f} pages/s  workers running {alive}")
    sys.stdout.write(line)
    sys.stdout.flush()


@dataclass
class Timing:
    elapsed: float = 0.0  # launch to the last worker's exit
    crawling: float = 0.0  # launch to the last new page stored


def watch(workers: list[Worker], env: dict[str, str], crawl_id: str, expected: int,
          timeout: float, interval: float = 0.5) -> Timing:
    """Show progress until every worker has exited."""
    started = time.monotonic()
    timing, last = Timing(), -1
    while True:
        running = sum(w.process.poll() is None for w in workers)
        docs, _ = stored_pages(env["MONGO_URI"], "crawler", crawl_id)
        now = time.monotonic()
        if docs != last:
            timing.crawling, last = now - started, docs
        _progress(started, docs, expected, running)
        if not running:
            break
        if now - started > timeout:
            raise TimeoutError(f"workers still running after {timeout:.0f}s")
        time.sleep(interval)
    print()
    timing.elapsed = time.monotonic() - started
    return timing


def _summary(env: dict[str, str], crawl_id: str, expected: int, timing: Timing,
             workers: list[Worker], idle: float) -> int:
    docs, urls = stored_pages(env["MONGO_URI"], "crawler", crawl_id)
    print(f"\nSummary of crawl {crawl_id!r}")
    print(f"  pages stored in MongoDB       {docs} (site has {expected})")
    print(f"  duplicates found in MongoDB   {docs - urls}")
    print(f"  pages per second              {docs / max(timing.crawling, 0.001):.1f} "
          f"({timing.crawling:.1f}s from launch to the last page, start-up included)")
    print(f"  all workers exited after      {timing.elapsed:.1f}s "
          f"(CRAWL_IDLE_TIMEOUT={idle:.0f}s after the crawl drained)")
    print(f"  worker exit codes             {[w.process.returncode for w in workers]}")
    print(f"  worker logs                   {Path(workers[0].log.name).parent}")
    ok = docs == expected and urls == docs and all(w.process.returncode == 0 for w in workers)
    return 0 if ok else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--pages", type=int, default=2000)
    parser.add_argument("--dir", type=Path, default=Path(".stack"))
    parser.add_argument("--keep", action="store_true", help="leave the services running")
    parser.add_argument("--secured", action="store_true",
                        help="through the secured stack: TLS, users and passwords everywhere")
    args = parser.parse_args(argv)
    stack = SecuredStack(args.dir / "secured") if args.secured else Stack(args.dir)
    env = stack.start()
    crawl_id = f"demo-{int(time.time())}"
    site_dir = args.dir / "demo-site"
    demo_site.generate(site_dir, args.pages)
    server = demo_site.serve(site_dir)
    idle = 5.0
    settings = {"CRAWL_IDLE_TIMEOUT": idle, "LOG_LEVEL": "INFO"}
    cmd = worker_command(server.base_url + "/", settings)
    print(f"Crawling {server.base_url}/ ({args.pages} pages) with {args.workers} workers, "
          f"crawl id {crawl_id}")
    log_dir = args.dir / "logs" / crawl_id
    try:
        with running(args.workers, cmd, {**env, "CRAWL_ID": crawl_id}, log_dir) as workers:
            timing = watch(workers, env, crawl_id, args.pages, timeout=1800)
            return _summary(env, crawl_id, args.pages, timing, workers, idle)
    finally:
        server.close()
        if not args.keep:
            stack.stop()


if __name__ == "__main__":
    sys.exit(main())
