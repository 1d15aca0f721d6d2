"""What :mod:`benchmarks.hostile` measures after each crawl, and its report.

Reads the crawl's MongoDB collections, the fault origin's JSON log and the workers' logs
(their final "Dumping Scrapy stats" dump); writes ``results.json`` and ``report.md``.
"""

from __future__ import annotations

import itertools
import json
import logging
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from pymongo import MongoClient
from pymongo.database import Database

logger = logging.getLogger(__name__)

STAT_PREFIXES = ("proxy/", "retry/")  # the stats summed into the report
EXCEPTIONS = "downloader/exception_type_count/"  # kept in the JSON too
_DUMP = "Dumping Scrapy stats:"
_LOG_LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d", re.M)
_NUMBER = re.compile(r"'([^']+)': (-?\d+(?:\.\d+)?)(?=[,}])")


def stored(mongo_uri: str, crawl_id: str) -> tuple[int, set[str], dict[str, str]]:
    """(documents, distinct URLs, failures recorded: URL -> reason) of crawl *crawl_id*."""
    client: MongoClient[dict[str, Any]]
    with MongoClient(mongo_uri, serverSelectionTimeoutMS=5000) as client:
        db: Database[dict[str, Any]] = client["crawler"]
        docs = db[crawl_id].count_documents({})
        urls = {str(url) for url in db[crawl_id].distinct("url")}
        failed = {str(d["url"]): str(d.get("reason")) for d in db[f"{crawl_id}.failures"].find()}
    return docs, urls, failed


def longest_gap(entries: Sequence[dict[str, Any]], launched: float) -> tuple[float, float]:
    """(the longest gap in seconds between two consecutive origin arrivals, when it began in
    seconds after the launch); (0, 0) with fewer than two arrivals."""
    stamps = sorted(float(entry["ts"]) for entry in entries)
    gaps = [(later - earlier, earlier) for earlier, later in itertools.pairwise(stamps)]
    if not gaps:
        return 0.0, 0.0
    gap, start = max(gaps)
    return gap, start - launched


def final_stats(log_text: str) -> dict[str, float] | None:
    """The numeric values of the last stats dump in a worker's log; None without a dump."""
    if _DUMP not in log_text:
        return None
    block = log_text.rsplit(_DUMP, 1)[1]
    end = _LOG_LINE.search(block)
    block = block[:end.start()] if end else block
    return {key: float(value) for key, value in _NUMBER.findall(block)}


def summed(dumps: Iterable[dict[str, float]], roles: dict[str, str],
           prefixes: tuple[str, ...] = STAT_PREFIXES) -> dict[str, float]:
    """Stats starting with one of *prefixes*, summed over *dumps*; a proxy id in a key is
    replaced by its role (``proxy/<id>/requests`` -> ``proxy/dead/requests``)."""
    total: dict[str, float] = {}
    for dump in dumps:
        for key, value in dump.items():
            if key.startswith(prefixes):
                name = _rename(key, roles)
                total[name] = total.get(name, 0.0) + value
    return {key: _number(total[key]) for key in sorted(total)}


def _rename(key: str, roles: dict[str, str]) -> str:
    head, _, rest = key.partition("/")
    proxy_id, sep, tail = rest.partition("/")
    return f"{head}/{roles[proxy_id]}{sep}{tail}" if proxy_id in roles else key


def _number(value: float) -> float:
    return int(value) if float(value).is_integer() else round(value, 3)


def origin_summary(entries: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Requests at the origin by status, and how many came without a proxy."""
    statuses = Counter(str(entry["status"]) for entry in entries)
    return {"requests": len(entries), "statuses": dict(sorted(statuses.items())),
            "direct": sum(1 for entry in entries if not entry.get("proxy"))}


def missing(urls: Sequence[str], scenarios: Sequence[str | None], have: set[str]) -> dict[str, Any]:
    """The pages not stored: their numbers, and how many of each scenario."""
    lost = [n for n, url in enumerate(urls) if url not in have]
    by = Counter(str(scenarios[n]) for n in lost)
    return {"pages": lost, "by_scenario": dict(sorted(by.items()))}


def site_summary(scenarios: Sequence[str | None]) -> dict[str, Any]:
    counts = Counter(str(name) for name in scenarios)
    return {"scenarios": dict(sorted(counts.items())),
            "pages_503x3": [n for n, name in enumerate(scenarios) if name == "503x3"],
            "first_attempt_failures": sum(1 for name in scenarios
                                          if name in ("503x1", "429x2", "reset", "503x3"))}


_COLUMNS = ("crawl", "round", "wall s", "stored", "dups", "failures", "longest gap s",
            "gap at s", "origin requests", "exit codes")


def _row(run: dict[str, Any]) -> list[str]:
    return [run["crawl"], str(run["round"]), f"{run['wall_s']:.1f}"
            + (" (timed out)" if run["timed_out"] else ""),
            f"{run['stored']}/{run['pages']}", str(run["duplicates"]), str(run["failures"]),
            f"{run['longest_gap_s']:.1f}", f"{run['longest_gap_at_s']:.1f}",
            str(run["origin"]["requests"]), ",".join(map(str, run["exit_codes"]))]


def _table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return lines + ["| " + " | ".join(row) + " |" for row in rows]


def summary(runs: Sequence[dict[str, Any]]) -> str:
    """The results as a plain-text table."""
    rows = [list(_COLUMNS), *(_row(run) for run in runs)]
    widths = [max(len(row[i]) for row in rows) for i in range(len(_COLUMNS))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True))
                     for row in rows)


def markdown(data: dict[str, Any]) -> str:
    runs, site = data["runs"], data["site"]
    lines = ["# Issue 12: a hostile origin behind proxies", "",
             f"- Date: {data['date']}", f"- Command: `{' '.join(data['argv'])}`",
             f"- Site: {data['pages']} pages on {', '.join(data['hosts'])}, seed {data['seed']}; "
             f"hostile scenarios {site['scenarios']} (None: served at once), "
             f"{site['first_attempt_failures']} pages fail their first attempt; "
             f"503x3 pages {site['pages_503x3']}",
             "- Each crawl: 2 workers, default settings plus `ROTATING_PROXY_LIST`, its own "
             "CRAWL_ID and a fresh origin; wall time is launch to the exit of both workers "
             "(CRAWL_IDLE_TIMEOUT included)", ""]
    lines += [*_table(_COLUMNS, (_row(run) for run in runs)), ""]
    for run in runs:
        lines += [f"## {run['crawl']} (round {run['round']}): {run['title']}", "",
                  f"- origin: {run['origin']}", f"- not stored: {run['missing']}",
                  f"- failures by reason: {run['failure_reasons']}",
                  f"- download exceptions: {run['exceptions']}",
                  f"- stats dumps found: {run['dumps']} of 2", ""]
        stats = ([key, str(value)] for key, value in run["stats"].items())
        lines += [*_table(("stat (summed over workers)", "value"), stats), ""]
    return "\n".join(lines)


def write(out: Path, data: dict[str, Any]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(data, indent=2) + "\n")
    (out / "report.md").write_text(markdown(data))
    logger.info("wrote %s and %s", out / "results.json", out / "report.md")
