"""Two runs beside the measured rounds (their figures are reported, not in the ratios):

- :func:`profiled`: one worker under py-spy, its samples given to components
  (:mod:`benchmarks.profile`): where a worker's CPU goes, in ms per page;
- :func:`joined`: a second worker started once another has stored a share of the site: its
  start-up on a crawl that already exists (topics there, a group to join), by part
  (:mod:`crawler.frontier.startup`).
"""

from __future__ import annotations

import subprocess
import time
from collections import Counter
from pathlib import Path
from typing import Any

from pymongo import MongoClient

from benchmarks import profile, services
from benchmarks.runner import Context, launch, plan


def _checked(ctx: Context, tag: str, probes: list[Path],
             usage: list[services.Usage]) -> list[dict[str, Any]]:
    """The probes of a run whose every process ended well and stored the site once."""
    if any(u.status for u in usage):
        raise RuntimeError(f"{tag}: exit status {[u.status for u in usage]}; logs in "
                           f"{ctx.workdir / 'logs'}/{tag}-*.log")
    seen = [services.read_probe(p) for p in probes]
    services.verify("worker1", ctx.pages, ctx.services, tag, seen)
    services.after_run("worker1", ctx.services, tag, seen)
    return seen


def profiled(ctx: Context, rate: int = 100) -> dict[str, Any]:
    """One worker's crawl of the site under py-spy; {} where py-spy is not installed."""
    tag = f"bench-{int(time.time())}-profile"
    _, settings, env = plan("worker1", ctx, tag)
    proc, probe = launch(ctx, tag, 0, settings, env)
    out = ctx.workdir / f"{tag}.pyspy.txt"
    spy = profile.record(proc.pid, out, rate)
    usage = services.reap([proc], ctx.timeout)
    if spy is None:
        _checked(ctx, tag, [probe], usage)
        return {}
    spy.wait(timeout=120)
    [seen] = _checked(ctx, tag, [probe], usage)
    samples: Counter[str] = profile.attribute(out.read_text().splitlines())
    return {"cpu_s": usage[0].cpu, "pages": seen["pages"], "rate": rate,
            "samples": dict(samples),
            "ms_per_page": profile.ms_per_page(samples, usage[0].cpu, seen["pages"])}


def joined(ctx: Context, share: float = 0.3) -> dict[str, Any]:
    """The start-up parts of a worker started once another has stored *share* of the site.

    A small site (the smoke run's) is crawled at 1 page per ``30 / pages`` s cluster-wide,
    so that the crawl lasts about 30 s: at full speed it would end before the second worker
    has joined, which would then have no first request to time.
    """
    tag = f"bench-{int(time.time())}-join"
    _, settings, env = plan("worker1", ctx, tag)
    if ctx.pages < 3000:
        settings = {**settings, "DOWNLOAD_DELAY": round(30.0 / ctx.pages, 4),
                    "RANDOMIZE_DOWNLOAD_DELAY": False}
    first, probe0 = launch(ctx, tag, 0, settings, env)
    try:
        _wait_until_stored(ctx, tag, first, share * ctx.pages)
    except BaseException:
        services.kill([first])
        raise
    second, probe1 = launch(ctx, tag, 1, settings, env)
    usage = services.reap([first, second], ctx.timeout)
    seen = _checked(ctx, tag, [probe0, probe1], usage)
    return {"share": share, "first": seen[0].get("startup", {}),
            "joined": seen[1].get("startup", {})}


def _wait_until_stored(ctx: Context, tag: str, first: subprocess.Popen[bytes],
                       count: float) -> None:
    """Wait until crawl *tag* has stored *count* pages; raise if *first* ends or
    ``ctx.timeout`` passes before."""
    client: MongoClient[dict[str, Any]] = MongoClient(ctx.services["MONGO_URI"])
    try:
        pages = client["crawler"][tag]
        deadline = time.monotonic() + ctx.timeout
        while pages.estimated_document_count() < count:
            if first.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{tag}: the first worker stored too little")
            time.sleep(0.1)
    finally:
        client.close()
