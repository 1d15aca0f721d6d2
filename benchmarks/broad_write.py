"""The broad-crawl benchmark's ``results.json`` and ``report.md`` (:mod:`benchmarks.broad`)."""

from __future__ import annotations

import json
import statistics
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from benchmarks.broad_report import SLACK
from benchmarks.broad_site import BroadSpec, Host
from benchmarks.report import cpu_model

STEP = 10.0  # seconds per bin of the timeline
TARGET_SHARE, TARGET_VS_REDIS, TARGET_SCALING = 0.85, 1.5, 3.4


def site_summary(spec: BroadSpec, hosts: Sequence[Host]) -> dict[str, Any]:
    sizes = sorted(h.pages for h in hosts)
    longest = max(hosts, key=lambda h: h.chain)
    return {"spec": asdict(spec), "hosts": len(hosts), "pages": sum(sizes),
            "largest": sizes[-5:][::-1], "median": statistics.median(sizes),
            "at_most_10": sum(s <= 10 for s in sizes),
            "delays": {f"{d:g}": n for d, n in sorted(Counter(h.delay for h in hosts
                                                               if h.delay).items())},
            "delayed_pages": sum(h.pages for h in hosts if h.delay),
            "longest_chain": {"host": longest.address, "pages": longest.pages,
                              "delay": longest.delay, "seconds": longest.chain},
            "slow": sum(h.slow for h in hosts), "failing": sum(h.failing for h in hosts),
            "no_robots": sum(not h.robots for h in hosts)}


def pages_per_s(run: dict[str, Any]) -> float:
    return run["coverage"]["pages"] / run["wall"] if run["wall"] > 0 else 0.0


def targets(runs: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each target against each of our runs it applies to: (target, run, figure, met)."""
    by = {r["config"]: r for r in runs}
    ours = [r for r in runs if r["config"].startswith("worker")]
    rows = []
    for r in ours:
        viol = r["gaps"]["count"] + r["in_flight"]["over"]
        rows += [_row(f">= {TARGET_SHARE:.0%} of the bound", r, f"{r['share']:.0%}",
                      r["share"] >= TARGET_SHARE),
                 _row("0 politeness violations", r, f"{r['gaps']['count']} gaps, "
                      f"{r['in_flight']['over']} over the limit", viol == 0),
                 _row("1 robots.txt fetch per host", r, _robots(r),
                      r["robots"]["max"] == 1 and r["robots"]["never"] == 0)]
        if "scrapy-redis" in by:
            ratio = pages_per_s(r) / pages_per_s(by["scrapy-redis"])
            rows.append(_row(f">= {TARGET_VS_REDIS}x scrapy-redis pages/s", r, f"{ratio:.2f}x",
                             ratio >= TARGET_VS_REDIS))
    if "worker1" in by and "worker4" in by:
        one, four = by["worker1"], by["worker4"]
        ratio = pages_per_s(four) / pages_per_s(one)
        allowed = one["bound"]["total"] / four["bound"]["total"]
        rows.append(_row(f"4 workers >= {TARGET_SCALING}x 1 worker", four,
                         f"{ratio:.2f}x (the bound allows {allowed:.2f}x)",
                         ratio >= TARGET_SCALING))
    return rows


def _row(target: str, run: dict[str, Any], figure: str, met: bool) -> dict[str, Any]:
    return {"target": target, "config": run["config"], "figure": figure, "met": met}


def _robots(run: dict[str, Any]) -> str:
    r = run["robots"]
    return (f"max {r['max']}, mean {r['mean']:.3f}, {r['more_than_once']} hosts more than "
            f"once, {r['never']} never")


def assemble(spec: BroadSpec, hosts: Sequence[Host], runs: list[dict[str, Any]], cores: int,
             argv: list[str]) -> dict[str, Any]:
    return {"date": time.strftime("%Y-%m-%d %H:%M:%S %z"), "argv": argv,
            "machine": {"cpu": cpu_model(), "cores": cores,
                        "note": "shared with another engineer's test runs"},
            "site": site_summary(spec, hosts), "runs": runs, "targets": targets(runs)}


def _table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return lines + ["| " + " | ".join(row) + " |" for row in rows]


MAIN = ("config", "procs", "pages", "wall s", "pages/s", "CPU s", "pages/CPU-s",
        "bound s (delay / CPU)", "share of bound", "gap violations (<90%)",
        "max in flight (limit)", "starts over limit", "robots.txt per host")


def main_row(r: dict[str, Any]) -> list[str]:
    b, cov, g = r["bound"], r["coverage"], r["gaps"]
    rate = f"{cov['pages'] / r['cpu']:.0f}" if r["cpu"] else "-"
    pages = f"{cov['pages']}/{cov['expected']}" + (" (timed out)" if r["timed_out"] else "")
    return [r["config"], str(r["processes"]), pages, f"{r['wall']:.1f}", f"{pages_per_s(r):.1f}",
            f"{r['cpu']:.1f}", rate,
            f"{b['total']:.1f} ({b['delay_s']:.1f} / {b['cpu_s']:.1f})", f"{r['share']:.0%}",
            f"{g['count']} ({g['below_90']})", f"{r['in_flight']['max']} ({r['host_limit']})",
            str(r["in_flight"]["over"]), _robots(r)]


TIME = ("config", "first request s", "50% s", "95% s", "last page s", "tail hosts (delayed)",
        "chain host first / span / ideal s", "idle s", "cores used", "exit s")


def time_row(r: dict[str, Any]) -> list[str]:
    p, c = r["phases"], r["chain"]
    if not p:
        return [r["config"]] + ["-"] * (len(TIME) - 1)
    chain = f"{c['first']:.1f} / {c['span']:.1f} / {c['ideal']:.1f}" if c else "-"
    return [r["config"], f"{p['first_request']:.1f}", f"{p['t50']:.1f}", f"{p['t95']:.1f}",
            f"{p['last_page']:.1f}", f"{p['tail_hosts']} ({p['tail_delayed']})", chain,
            str(p["idle_s"]), f"{r['cpu'] / r['wall']:.2f}" if r["wall"] > 0 else "-",
            f"{r['exit_s']:.1f}"]


ORIGIN = ("config", "requests", "statuses", "pages fetched again", "disallowed fetched",
          "pages missing", "stored (distinct)", "exit codes", "RSS MiB", "services CPU s")


def origin_row(r: dict[str, Any]) -> list[str]:
    cov = r["coverage"]
    stored = f"{r['stored']} ({r['stored_urls']})" if "stored" in r else "-"
    statuses = ", ".join(f"{k}: {v}" for k, v in cov["statuses"].items())
    return [r["config"], str(cov["requests"]), statuses, str(cov["refetched"]),
            str(cov["disallowed"]), str(cov["missing"]), stored,
            ",".join(map(str, r["exit_codes"])) or "timed out", f"{r['rss_mib']:.0f}",
            f"{r['services_cpu']:.1f}"]


PARTS = ("imports", "preflight", "setup", "connections", "topics", "join", "first_request",
         "total")


def startup_row(r: dict[str, Any]) -> list[str] | None:
    """Our workers' start-up parts (``startup/*``), the mean over the run's processes."""
    parts = r.get("worker_startup") or []
    if not parts:
        return None
    return [r["config"], *(f"{statistics.mean(p.get(k, 0.0) for p in parts):.2f}"
                           for k in PARTS)]


def rest_line(r: dict[str, Any]) -> str:
    """Where a run's time went beyond its bound."""
    b, p, c = r["bound"], r["phases"], r["chain"]
    if not (p and r["cpu"] and r["wall"] > 0):
        return f"- {r['config']}: no figures"
    parts = [f"{p['first_request']:.1f} s to the first request",
             f"{r['cpu'] / r['wall']:.2f} cores used of the {b['cores']} the bound counts",
             f"{r['coverage']['pages'] / r['cpu']:.0f} pages/CPU-s against the "
             f"{b['rate']:.0f} it counts"]
    if c:
        parts.append(f"the chain host's span {c['span']:.1f} s against {c['ideal']:.1f}, its "
                     f"last request at {c['last']:.1f} s, the other hosts' last page at "
                     f"{c['others_last']:.1f} s")
    parts.append(f"exit {r['exit_s'] - r['wall']:.1f} s after the last page")
    return (f"- {r['config']}: {r['wall']:.1f} s against a bound of {b['total']:.1f} s "
            f"({b['limit']}): " + "; ".join(parts))


def politeness_lines(runs: Sequence[dict[str, Any]]) -> list[str]:
    """The shortest gaps of each run (gap / Crawl-delay) and the hosts whose robots.txt was
    fetched more than once."""
    lines = []
    for r in runs:
        worst = ", ".join(f"{w['host']} {w['gap']:.3f} s of {w['delay']:g} at {w['at']:.1f} s"
                          for w in r["gaps"]["worst"])
        twice = ", ".join(f"{t['host']} at {t['at']} s" for t in r["robots_twice"][:5])
        lag = r.get("token_lag") or {}
        token = (f" From the rate-limit token to the origin (pages of hosts with a delay): "
                 f"median {lag['median']:.3f} s, 90% {lag['p90']:.3f} s, most {lag['max']:.3f}"
                 f" s, {lag['over_100ms']} of {lag['requests']} over 0.1 s." if lag else "")
        lines.append(f"- {r['config']}: {r['gaps']['count']} gaps on {r['gaps']['hosts']} "
                     f"hosts; shortest: {worst or 'none'}. robots.txt more than once: "
                     f"{len(r['robots_twice'])} hosts{': ' + twice if twice else ''}.{token}")
    return lines


def site_lines(data: dict[str, Any]) -> list[str]:
    s = data["site"]
    c = s["longest_chain"]
    return [
        f"- Site: {s['hosts']} hosts (127.20.x.y, one nginx, one port), {s['pages']} pages; "
        f"largest hosts {s['largest']} pages, median {s['median']:g}, {s['at_most_10']} hosts "
        f"with 10 pages or fewer; seed {s['spec']['seed']}",
        f"- Crawl-delay on {sum(s['delays'].values())} hosts (seconds: hosts {s['delays']}), "
        f"{s['delayed_pages']} pages; the longest chain: {c['host']}, {c['pages']} pages at "
        f"{c['delay']:g} s = {c['seconds']:.1f} s",
        f"- {s['slow']} slow hosts ({s['spec']['slow_rate']} bytes/s), {s['failing']} failing "
        f"hosts (links to /fail/, 500), {s['no_robots']} hosts without robots.txt (404); "
        "broken links (404) and links to /private/ (disallowed) elsewhere",
    ]


def write(out: Path, data: dict[str, Any]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(data, indent=1) + "\n")
    (out / "report.md").write_text("\n".join(report(data)) + "\n")


def report(data: dict[str, Any]) -> list[str]:
    runs = data["runs"]
    m = data["machine"]
    lines = ["# Issue 34, item 6: a broad crawl", "",
             f"- Date: {data['date']}", f"- Command: `{' '.join(data['argv'])}`",
             f"- Machine: {m['cores']} cores of an {m['cpu']}, {m['note']}: the rates are "
             "this run's, read the ratios and the politeness figures", *site_lines(data), ""]
    lines += [*SETTINGS, "", *_table(MAIN, map(main_row, runs)), "", "## Targets", ""]
    lines += _table(("target", "config", "figure", "met"),
                    ([t["target"], t["config"], t["figure"], "yes" if t["met"] else "no"]
                     for t in data["targets"]))
    lines += ["", "## Where the time goes", "", *TIME_NOTE, "",
              *_table(TIME, map(time_row, runs)), "", *map(rest_line, runs), "",
              "## At the origin", "",
              *_table(ORIGIN, map(origin_row, runs)), "", "## Politeness details", "",
              *politeness_lines(runs), ""]
    started = [row for row in map(startup_row, runs) if row]
    if started:
        lines += ["## Our workers' start-up, seconds (mean of the processes)", "",
                  *_table(("config", *PARTS), started), ""]
    lines += [f"## Pages per {STEP:g} s", ""]
    width = max((len(r["timeline"]) for r in runs), default=0)
    lines += _table(("config", *(f"{i * STEP:g}" for i in range(width))),
                    ([r["config"], *map(str, r["timeline"])] + [""] * (width - len(r["timeline"]))
                     for r in runs))
    return lines


SETTINGS = [
    "Every crawler runs `benchmarks/broad_spider.py` seeded with every host's `/`, "
    "robots.txt obeyed. Stock Scrapy: `SCHEDULER_PRIORITY_QUEUE = "
    "DownloaderAwarePriorityQueue`, scrapy-redis: its scheduler and dupefilter; both with "
    "a worker's `CONCURRENT_REQUESTS` and Scrapy's 8 per domain per process. Our workers: "
    "defaults (16 per host for the cluster, Crawl-delay obeyed), `CRAWL_IDLE_TIMEOUT=3` "
    "as in `benchmarks/runner.py`. Pages/s: distinct pages of the site fetched (200), "
    "from the launch to the last response or item, start-up included.",
    "",
    "The bound is the ideal finish: the longer of the longest chain of Crawl-delays and "
    "the pages' CPU time at the 1-process run's pages per CPU-second spread over "
    "min(processes, cores) cores (our workers: the 1-worker run's rate; services' CPU not "
    "counted). Share = bound / wall. Violations are read in the origin's access log: a gap "
    f"shorter than the host's Crawl-delay (less {SLACK * 1000:g} ms of log rounding; in "
    "brackets those under 90% of it; robots.txt left out), and a request starting while the "
    "host already had the crawler's per-host limit at the origin.",
]
TIME_NOTE = [
    "Seconds after the launch. Tail hosts: hosts asked after 95% of the pages, in brackets "
    "those with a Crawl-delay. Chain host: the host with the longest chain of delays, its first "
    "request, the span from its first request to its last, and the ideal span. Idle: whole "
    "seconds with no request starting at the origin between the first request and the last "
    "page. Cores used: the crawler processes' CPU seconds / wall. Exit: the last process's "
    "exit (idle timeout included).",
]


def line(run: dict[str, Any]) -> str:
    """One run, one line (the log)."""
    return (f"{run['config']:<12} {run['coverage']['pages']}/{run['coverage']['expected']} "
            f"pages in {run['wall']:.1f} s ({pages_per_s(run):.1f} pages/s), CPU {run['cpu']:.1f}"
            f" s, gaps {run['gaps']['count']}, over limit {run['in_flight']['over']}, robots.txt "
            f"max {run['robots']['max']}")


def summary(data: dict[str, Any]) -> str:
    return "\n".join(_table(MAIN, map(main_row, data["runs"])))
