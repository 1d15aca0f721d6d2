"""What a soak run measured: per worker process, RSS and open file descriptors after warm-up.

A *life* is one worker process (one generation of one worker slot), from its start to its exit
or its ``kill -9``. Only samples taken while the crawl was still storing pages count (the idle
drain at the end holds less and would hide growth), and only after the life's warm-up.
Those samples are cut in fifths: the growth of a life compares the highest RSS (and the most
file descriptors) of its last fifth with those of its first fifth. RSS of a Python process
hardly ever falls, so a leak shows as a last fifth above the first; a page in flight or a
buffer that comes and goes shows in both.

The TCP connections are counted apart from the other descriptors: to the origin, a worker
keeps as many as its share of the host's concurrency, which grows when a peer is killed and
its share is handed on, so they are bounded (``origin_limit``) rather than held flat. Its
connection pools to the services (Redis above all: one connection per command in flight)
grow with that share in the same way, so they are bounded too (``service_limit``): a short
run's restarted worker, judged 20 s after its start, saw its Redis pool go from 5 to 8
connections when a peer's partitions came to it. Every other descriptor (files, pipes,
listening and Unix sockets, the reactor's own) must stay flat.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

FIFTHS = 5
MIN_SAMPLES = 2 * FIFTHS  # a life with fewer samples after warm-up is reported, not judged


@dataclass(frozen=True)
class Sample:
    at: float  # seconds since the launch of the first worker
    index: int  # the worker slot
    generation: int  # 0 for the slot's first process, +1 at each restart
    rss_kib: int
    fds: int  # every open descriptor
    origin: int  # of which TCP connections to the crawled site
    services: int  # and TCP connections to anything else (Redis, the broker, mongod)
    stored: int  # pages in MongoDB at that moment

    @property
    def others(self) -> int:
        return self.fds - self.origin - self.services


@dataclass(frozen=True)
class Life:
    index: int
    generation: int
    pid: int
    started: float
    ended: float
    killed: bool


@dataclass(frozen=True)
class Growth:
    """One life's figures; ``judged`` is False where it lived too short after warm-up (fewer
    than :data:`MIN_SAMPLES` samples, or for less time than the warm-up)."""

    index: int
    generation: int
    pid: int
    lived: float
    killed: bool
    judged: bool
    rss_first_kib: int = 0
    rss_last_kib: int = 0
    rss_peak_kib: int = 0
    fds_first: int = 0  # descriptors other than TCP connections
    fds_last: int = 0
    origin_peak: int = 0
    services_peak: int = 0

    @property
    def rss_growth(self) -> float:
        return self.rss_last_kib / self.rss_first_kib - 1 if self.rss_first_kib else 0.0

    @property
    def fds_growth(self) -> int:
        return self.fds_last - self.fds_first


def growth(life: Life, samples: Iterable[Sample], warmup: float, crawl_end: float) -> Growth:
    """The growth of *life* over its samples after *warmup* s, up to *crawl_end*."""
    own = [s for s in samples if (s.index, s.generation) == (life.index, life.generation)]
    late = [s for s in own if s.at - life.started >= warmup and s.at <= crawl_end]
    # judged over a window at least as long as the warm-up: a restarted worker takes in a
    # dead peer's share for a while (a life killed at 37 s grew 10.5% over its last 17 s,
    # its peers' long lives 1.5%), which is no leak
    window = late[-1].at - late[0].at if late else 0.0
    base = Growth(life.index, life.generation, life.pid, life.ended - life.started, life.killed,
                  judged=len(late) >= MIN_SAMPLES and window >= warmup,
                  rss_peak_kib=max((s.rss_kib for s in own), default=0),
                  origin_peak=max((s.origin for s in own), default=0),
                  services_peak=max((s.services for s in own), default=0))
    if not base.judged:
        return base
    part = len(late) // FIFTHS
    first, last = late[:part], late[-part:]
    return replace(base, rss_first_kib=max(s.rss_kib for s in first),
                   rss_last_kib=max(s.rss_kib for s in last),
                   fds_first=max(s.others for s in first), fds_last=max(s.others for s in last))


def crawl_end(samples: Sequence[Sample]) -> float:
    """When the last page was stored: the first sample that saw the final count."""
    final = max((s.stored for s in samples), default=0)
    return min((s.at for s in samples if s.stored == final), default=0.0)


def failures(growths: Sequence[Growth], max_rss_growth: float, fd_slack: int,
             origin_limit: int, service_limit: int) -> list[str]:
    """One line for each life over a bound; empty when every one holds."""
    found = []
    for g in growths:
        for peak, limit, what in ((g.origin_peak, origin_limit, "the origin"),
                                  (g.services_peak, service_limit, "the services")):
            if peak > limit:
                found.append(f"worker {g.index} gen {g.generation}: {peak} connections "
                             f"to {what} at once, more than {limit}")
        if not g.judged:
            continue
        if g.rss_growth >= max_rss_growth:
            found.append(f"worker {g.index} gen {g.generation}: RSS grew {g.rss_growth:.1%} "
                         f"({g.rss_first_kib} -> {g.rss_last_kib} KiB) after warm-up")
        if g.fds_growth > fd_slack:
            found.append(f"worker {g.index} gen {g.generation}: open files other than TCP "
                         f"connections grew {g.fds_first} -> {g.fds_last}")
    return found


def table(growths: Sequence[Growth]) -> list[str]:
    """A Markdown table of every life."""
    rows = ["| worker | gen | lived s | ended by | RSS first/last fifth MiB | growth | "
            "peak MiB | other fds first/last | origin conns peak | service conns peak |",
            "|---|---|---|---|---|---|---|---|---|---|"]
    for g in growths:
        ended = "kill -9" if g.killed else "itself"
        if g.judged:
            rss = f"{g.rss_first_kib / 1024:.0f} / {g.rss_last_kib / 1024:.0f}"
            change, fds = f"{g.rss_growth:+.1%}", f"{g.fds_first} / {g.fds_last}"
        else:
            rss, change, fds = "too short", "", ""
        rows.append(f"| {g.index} | {g.generation} | {g.lived:.0f} | {ended} | {rss} | "
                    f"{change} | {g.rss_peak_kib / 1024:.0f} | {fds} | {g.origin_peak} | "
                    f"{g.services_peak} |")
    return rows


def as_json(growths: Sequence[Growth]) -> list[dict[str, Any]]:
    return [{**asdict(g), "rss_growth": g.rss_growth, "fds_growth": g.fds_growth}
            for g in growths]
