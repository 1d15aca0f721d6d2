"""The broad-crawl benchmark's figures, read from the origin's access log (pure maths).

A line of the log (:class:`benchmarks.broad_site.BroadNginx`) is one request:
``$msec $server_addr $request_uri $status $request_time ...``; nginx writes it when the
response is sent, so the request was at the origin over ``[msec - request_time, msec]``
(``request_time`` counts from the first byte read). That interval lies within the one the
client sees, so overlaps read here never exceed what the crawler had in flight. nginx stamps
both with its clock cached once per turn of its event loop, in milliseconds: requests served
within one millisecond share a time (see :func:`sweep`), and a turn delayed by CPU contention
shifts the stamps of the requests read in it.

- a *gap violation*: two requests to a host with a ``Crawl-delay`` (robots.txt left out)
  whose starts are closer than the delay, less :data:`SLACK` (the log's millisecond
  rounding, twice);
- an *in-flight violation*: a request that starts while the host already has the
  crawler's per-host limit of requests at the origin;
- the *bound*: the ideal finish time, the longer of the longest chain of delays,
  ``max((pages_h - 1) * delay_h)``, and the CPU time the pages take at a one-process run's
  pages per CPU-second, spread over ``min(processes, cores)`` cores.
"""

from __future__ import annotations

import itertools
import math
import re
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from benchmarks.broad_site import PROBE, Host, page_path

SLACK = 0.005  # seconds
ROBOTS = "/robots.txt"
_PAGE = re.compile(r"^/(p/\d+\.html)?$")


@dataclass(frozen=True)
class Hit:
    start: float  # epoch seconds
    end: float
    host: str
    uri: str
    status: int


@dataclass(frozen=True)
class Gap:
    host: str
    at: float  # the later request's start
    gap: float
    delay: float


@dataclass(frozen=True)
class Bound:
    delay_s: float  # the longest chain of Crawl-delays
    host: str  # its host
    cpu_s: float  # the pages' CPU time over the cores they may use
    cores: int

    @property
    def total(self) -> float:
        return max(self.delay_s, self.cpu_s)

    @property
    def limit(self) -> str:
        return "delay" if self.delay_s >= self.cpu_s else "CPU"


def parse(lines: Iterable[str]) -> list[Hit]:
    """The requests of an access log (the start-up check's left out)."""
    hits = []
    for line in lines:
        fields = line.split()
        if len(fields) < 5 or fields[2] == PROBE:
            continue
        end, took = float(fields[0]), float(fields[4])
        hits.append(Hit(end - took, end, fields[1], fields[2], int(fields[3])))
    return hits


def by_host(hits: Iterable[Hit]) -> dict[str, list[Hit]]:
    """Hits per host, each list by start."""
    out: dict[str, list[Hit]] = defaultdict(list)
    for hit in hits:
        out[hit.host].append(hit)
    return {host: sorted(group, key=lambda h: h.start) for host, group in out.items()}


def gap_violations(hits: Iterable[Hit], delays: dict[str, float],
                   slack: float = SLACK) -> list[Gap]:
    """Consecutive requests to a host with a delay, closer than it (robots.txt left out)."""
    chosen = (h for h in hits if h.uri != ROBOTS and delays.get(h.host, 0) > 0)
    found = []
    for host, group in by_host(chosen).items():
        delay = delays[host]
        found += [Gap(host, b.start, b.start - a.start, delay)
                  for a, b in itertools.pairwise(group) if b.start - a.start < delay - slack]
    return found


def sweep(intervals: Sequence[tuple[float, float]], limit: int) -> tuple[int, int]:
    """(the most intervals open at once, the starts that found *limit* or more open).
    Only certain overlaps count: at one instant (the log has milliseconds) ends come before
    starts, and an interval of length 0 overlaps only those open across its instant."""
    events = []
    for start, end in intervals:
        events += [(start, 1, 0)] if end <= start else [(start, 2, 1), (end, 0, -1)]
    level = peak = over = 0
    for _, kind, delta in sorted(events):
        if kind:  # a start
            over += level >= limit
            peak = max(peak, level + 1)
        level += delta
    return peak, over


def in_flight(hits: Iterable[Hit], limit: int) -> dict[str, tuple[int, int]]:
    """Host -> (most requests at the origin at once, requests started above *limit*)."""
    return {host: sweep([(h.start, h.end) for h in group], limit)
            for host, group in by_host(hits).items()}


def robots_fetches(hits: Iterable[Hit], hosts: Sequence[str]) -> dict[str, Any]:
    """robots.txt requests per host: the most, the mean, hosts asked more than once, never."""
    counts = Counter(h.host for h in hits if h.uri == ROBOTS)
    per = [counts.get(host, 0) for host in hosts]
    return {"max": max(per, default=0), "mean": sum(per) / max(len(per), 1),
            "more_than_once": sum(c > 1 for c in per), "never": sum(c == 0 for c in per),
            "total": sum(per)}


def coverage(hits: Iterable[Hit], hosts: Sequence[Host]) -> dict[str, Any]:
    """Pages of the site fetched (200), missed, fetched again; disallowed fetches; statuses."""
    hits = list(hits)
    expected = {(h.address, page_path(k)) for h in hosts for k in range(h.pages)}
    pages = Counter((h.host, h.uri) for h in hits if h.status == 200 and _PAGE.match(h.uri))
    got = set(pages) & expected
    return {"pages": len(got), "expected": len(expected), "missing": len(expected - got),
            "refetched": sum(n - 1 for key, n in pages.items() if key in expected),
            "disallowed": sum(h.uri.startswith("/private/") for h in hits),
            "requests": len(hits),
            "statuses": dict(sorted(Counter(str(h.status) for h in hits).items()))}


def bound(hosts: Sequence[Host], pages: int, pages_per_cpu_s: float, processes: int,
          cores: int) -> Bound:
    """The ideal finish time of a crawl of *pages* by *processes* (see the module)."""
    longest = max(hosts, key=lambda h: h.chain)
    used = min(processes, cores)
    cpu = pages / (pages_per_cpu_s * used) if pages_per_cpu_s > 0 else math.inf
    return Bound(longest.chain, longest.address, cpu, used)


def page_ends(hits: Iterable[Hit], launched: float) -> list[float]:
    """Seconds after *launch* at which each distinct page was first fetched, in order."""
    first: dict[tuple[str, str], float] = {}
    for hit in sorted(hits, key=lambda h: h.end):
        if hit.status == 200 and _PAGE.match(hit.uri):
            first.setdefault((hit.host, hit.uri), hit.end - launched)
    return sorted(first.values())


def timeline(hits: Iterable[Hit], launched: float, step: float) -> list[int]:
    """Distinct pages first fetched in each *step* seconds after the launch."""
    ends = page_ends(hits, launched)
    bins = [0] * (int(ends[-1] // step) + 1 if ends else 0)
    for end in ends:
        bins[int(end // step)] += 1
    return bins


def phases(hits: Sequence[Hit], launched: float, delays: dict[str, float]) -> dict[str, Any]:
    """Where a run's time went, seconds after the launch: the first request, 50% and 95% of
    its pages, the last page; idle seconds (no request starting) between the first request
    and the last; the hosts still asked after 95%, and how many of them have a delay."""
    ends = page_ends(hits, launched)
    if not ends:
        return {}
    first = min(h.start for h in hits) - launched
    t95 = ends[math.ceil(0.95 * len(ends)) - 1]
    busy = {int(h.start - launched) for h in hits}
    tail = {h.host for h in hits if h.start - launched > t95 and h.uri != ROBOTS}
    return {"first_request": first, "t50": ends[math.ceil(0.5 * len(ends)) - 1], "t95": t95,
            "last_page": ends[-1],
            "idle_s": sum(s not in busy for s in range(int(first), int(ends[-1]) + 1)),
            "tail_hosts": len(tail), "tail_delayed": sum(delays.get(h, 0) > 0 for h in tail)}


def chain(hits: Sequence[Hit], host: Host, launched: float) -> dict[str, float]:
    """The longest-chain host's pages: its first and last request after the launch, the
    span against the ideal (pages - 1) * delay, the lost time (lag), and when the other
    hosts' last page came (is the chain host the tail?)."""
    starts = sorted(h.start - launched for h in hits
                    if h.host == host.address and h.uri != ROBOTS)
    if not starts:
        return {}
    span = starts[-1] - starts[0]
    others = [h.end - launched for h in hits
              if h.host != host.address and h.status == 200 and _PAGE.match(h.uri)]
    return {"first": starts[0], "last": starts[-1], "span": span, "ideal": host.chain,
            "lag": span - host.chain, "requests": len(starts),
            "others_last": max(others, default=0.0)}


def token_lag(rows: Iterable[dict[str, Any]], hits: Iterable[Hit],
              delays: dict[str, float]) -> dict[str, float]:
    """Seconds from a request's rate-limit token (a trace row of
    :class:`benchmarks.broad_spider.TokenTrace`) to its start at the origin, for the pages of
    hosts with a delay: how many, the median, the 90th percentile, the most, and how many
    took over 0.1 s. A gap kept between tokens shrinks by the difference of two such lags."""
    origin: dict[tuple[str, str], float] = {}
    for hit in hits:
        if hit.host in delays and hit.uri != ROBOTS:
            key = (hit.host, hit.uri)
            origin[key] = min(origin.get(key, math.inf), hit.start)
    lags = []
    for row in rows:
        parts = urlsplit(row["url"])
        key = (parts.hostname or "", parts.path or "/")
        if row.get("taken") and key in origin:
            lags.append(origin[key] - float(row["taken"]))
    if not lags:
        return {}
    lags.sort()
    return {"requests": len(lags), "median": lags[len(lags) // 2],
            "p90": lags[min(len(lags) - 1, int(0.9 * len(lags)))], "max": lags[-1],
            "over_100ms": sum(lag > 0.1 for lag in lags)}
