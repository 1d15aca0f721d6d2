"""What ``scrapy cluster status`` shows: the state of one crawl, built and rendered.

Pure: no I/O. The heartbeats of ``{<CRAWL_ID>}:workers`` come parsed by the crawl state's
one parser (:func:`crawler.frontier.crawlstate.parse_heartbeats`) and are judged by its one
rule (:func:`~crawler.frontier.crawlstate.is_lost`); :func:`parse_alerts` reads the alerts
hash ``{<CRAWL_ID>}:alerts``
(written by :mod:`crawler.extensions.alerts`), :mod:`~crawler.operations.proxyview` the proxy
failures by the party at fault, :class:`RateTracker` turns successive
heartbeats into pages acknowledged per second, :func:`build_status` makes the JSON-able status
dict (what ``--json`` prints) and :func:`render_text` the text form.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from crawler.connections.records import UNREADABLE
from crawler.frontier.crawlstate import is_lost
from crawler.operations import proxyview
from crawler.operations.texttable import aligned
from crawler.politeness.proxypool import Health

ALERTS_UNREAD = "unknown"  # the reader did not read {CRAWL_ID}:alerts
_COLUMNS = ("node", "host", "pid", "health", "beat", "lag", "parts", "leases", "buffered",
            "delayed", "acked", "rate/s")


@dataclass(frozen=True)
class Snapshot:
    """One read of a crawl's state in Redis."""

    crawl_id: str
    now: float  # time.time() of the read
    workers: dict[str, dict[str, Any]]  # worker id -> heartbeat (crawlstate.parse_heartbeats)
    unreadable: list[str] = field(default_factory=list)  # entries that are not heartbeats
    bloom: dict[str, Any] | None = None  # BloomInfo as a dict; None: no filter yet
    proxies: dict[str, int] | None = None  # proxy_counts(); None: no proxy in this crawl
    finished_at: float | None = None  # the crawl's finished mark, if set
    alerts: dict[str, dict[str, Any]] | None = None  # parse_alerts(); None: not read
    proxy_faults: list[dict[str, Any]] | None = None  # proxyview.proxy_faults(); None: not read
    host_faults: dict[str, dict[str, int]] | None = None  # proxyview.host_faults(); None: not read
    ledger: dict[str, int] | None = None  # the crawl ledger's counters; None: not read


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def proxy_counts(members: int, health: Mapping[Any, Any]) -> dict[str, int] | None:
    """Proxy members and health records by state; None if the crawl has no proxy at all."""
    if not members and not health:
        return None
    counts = {"members": members, "alive": 0, "probation": 0, "dead": 0, "unreadable": 0}
    for value in health.values():
        try:
            counts[Health.from_json(value).state.value] += 1
        except UNREADABLE:
            counts["unreadable"] += 1
    return counts


def parse_alerts(raw: Mapping[Any, Any], now: float) -> dict[str, dict[str, Any]]:
    """The alerts hash as {alert name: document}, without unreadable or expired entries.

    Each document was refreshed at ``ts`` and is valid for ``ttl`` seconds: an
    entry left by a worker that died with the alert active expires on its own.
    """
    alerts: dict[str, dict[str, Any]] = {}
    for name, value in raw.items():
        try:
            doc = dict(json.loads(value))
            expired = now - float(doc["ts"]) > float(doc["ttl"])
        except UNREADABLE:
            continue
        if not expired:
            alerts[_text(name)] = doc
    return alerts


def alerts_status(alerts: Mapping[str, Mapping[str, Any]] | None) -> dict[str, Any]:
    """``{"status": "ok"|"active"|"unknown", "active": [...]}`` (sorted by alert name)."""
    if alerts is None:
        return {"status": ALERTS_UNREAD, "active": []}
    active = [{"alert": name, **{k: v for k, v in doc.items() if k != "alert"}}
              for name, doc in sorted(alerts.items())]
    return {"status": "active" if active else "ok", "active": active}


class RateTracker:
    """Pages acknowledged per second per worker, from its last two distinct heartbeats."""

    def __init__(self) -> None:
        self._last: dict[str, tuple[float, int]] = {}
        self._prev: dict[str, tuple[float, int]] = {}

    def update(self, workers: Mapping[str, Mapping[str, Any]]) -> dict[str, float | None]:
        rates: dict[str, float | None] = {}
        for worker, doc in workers.items():
            sample = (float(doc["ts"]), int(doc["info"].get("acked") or 0))
            last = self._last.get(worker)
            if last is None or sample[0] > last[0]:
                if last is not None:
                    self._prev[worker] = last
                self._last[worker] = last = sample
            prev = self._prev.get(worker)
            ok = prev is not None and last[0] > prev[0] and last[1] >= prev[1]
            rates[worker] = (last[1] - prev[1]) / (last[0] - prev[0]) if ok and prev else None
        return rates


def health_of(doc: Mapping[str, Any], now: float, stale_after: float) -> str:
    """``lost`` if the heartbeat is older than *stale_after*, else ``idle`` or ``ok``."""
    if is_lost(now, float(doc["ts"]), stale_after):
        return "lost"
    return "idle" if doc.get("idle") else "ok"


def _node(worker: str, doc: Mapping[str, Any], now: float, stale_after: float,
          rate: float | None) -> dict[str, Any]:
    info = doc["info"]
    health = health_of(doc, now, stale_after)
    assigned = list(doc.get("assigned") or [])
    return {
        "id": worker, "host": info.get("host"), "pid": info.get("pid"), "health": health,
        "age": round(max(now - float(doc["ts"]), 0.0), 1), "lag": doc.get("lag"),
        "partitions": len(assigned), "assigned": assigned,
        "leases": info.get("leases"), "buffered": info.get("buffered"),
        "delayed": info.get("delayed"), "acked": int(info.get("acked") or 0),
        "pages": info.get("pages"), "items": info.get("items"),
        "rate": None if health == "lost" or rate is None else round(rate, 1),
    }


def _sum(nodes: list[dict[str, Any]], key: str) -> int:
    return sum(int(n[key] or 0) for n in nodes)


def _totals(nodes: list[dict[str, Any]]) -> dict[str, Any]:
    live = [n for n in nodes if n["health"] != "lost"]
    rates = [n["rate"] for n in live if n["rate"] is not None]
    return {
        "nodes": len(nodes),
        **{h: sum(n["health"] == h for n in nodes) for h in ("ok", "idle", "lost")},
        "acked": _sum(nodes, "acked"),
        "rate": round(sum(rates), 1) if rates else None,
        "lag": _sum(live, "lag") if all(n["lag"] is not None for n in live) else None,
        "partitions": _sum(live, "partitions"),
        **{k: _sum(live, k) for k in ("leases", "buffered", "delayed")},
    }


def build_status(snapshot: Snapshot, rates: Mapping[str, float | None],
                 stale_after: float) -> dict[str, Any]:
    """The status of the crawl as a JSON-able dict."""
    nodes = [_node(w, snapshot.workers[w], snapshot.now, stale_after, rates.get(w))
             for w in sorted(snapshot.workers)]
    return {
        "crawl_id": snapshot.crawl_id, "time": snapshot.now, "stale_after": stale_after,
        "nodes": nodes, "totals": _totals(nodes), "unreadable": snapshot.unreadable,
        "lag": {"per_partition": _partition_lag(snapshot, nodes),
                "per_node": {n["id"]: n["lag"] for n in nodes if n["health"] != "lost"}},
        "dedup": snapshot.bloom, "proxies": snapshot.proxies,
        "finished_at": snapshot.finished_at,
        "alerts": alerts_status(snapshot.alerts),
        "proxy_failures": proxyview.failures_status(snapshot.proxy_faults, snapshot.host_faults),
        "ledger": ledger_summary(snapshot.ledger, _balance(snapshot)),
    }


def _balance(snapshot: Snapshot) -> dict[str, Any] | None:
    """The crawl's balance from the newest heartbeat that carries one."""
    newest: tuple[float, dict[str, Any]] | None = None
    for doc in snapshot.workers.values():
        info = doc.get("info", {}) if isinstance(doc, dict) else {}
        found = info.get("ledger_balance") if isinstance(info, dict) else None
        ts = float(doc.get("ts") or 0) if isinstance(doc, dict) else 0.0
        if found and (newest is None or ts > newest[0]):
            newest = (ts, found)
    return newest[1] if newest else None


def ledger_summary(counters: Mapping[str, int] | None,
                   balance: Mapping[str, Any] | None = None) -> dict[str, Any] | None:
    """The ledger's outcomes, summed by kind, and the *balance* a worker last read
    (``pending``, ``unaccounted``...: :mod:`crawler.ledger.balance`)."""
    if counters is None:
        return None
    total: dict[str, Any] = {"fetched": 0, "failed": 0, "dropped": {}, "dead": 0, "seeds": 0,
                             "items_stored": counters.get("items/stored", 0),
                             "items_dropped": counters.get("items/dropped", 0),
                             "redelivered": 0, "balance": dict(balance or {})}
    for name, value in counters.items():
        kind, _, rest = name.partition("/")
        if kind in ("fetched", "failed", "seeds"):
            total[kind] += value
        elif kind == "dropped":
            total["dropped"][rest] = value
        elif name == "dead":
            total["dead"] += value
        elif kind == "again" and not rest.startswith("items/"):
            total["redelivered"] += value
    return total

def _partition_lag(snapshot: Snapshot, nodes: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Lag per partition from the live nodes' heartbeats (each reports its own partitions);
    None when no live node reports it."""
    live = {n["id"] for n in nodes if n["health"] != "lost"}
    lag: dict[str, Any] = {}
    reported = False
    for worker, doc in snapshot.workers.items():
        info = doc.get("info", {}) if isinstance(doc, dict) else {}
        if worker in live and "lag_by_partition" in info:
            reported = True
            lag.update(info["lag_by_partition"] or {})
    return dict(sorted(lag.items())) if reported else None


def _partition_lines(lag: Mapping[str, Any] | None) -> list[str]:
    """Partitions that have a backlog, a few to a line (all of them in --json)."""
    busy = [f"{p}={v}" for p, v in (lag or {}).items() if v]
    if not busy:
        return ["          no partition has a backlog" if lag else "          "
                "per-partition lag: not reported yet"]
    return [f"          {'  '.join(busy[i:i + 6])}" for i in range(0, len(busy), 6)]


def to_json(status: Mapping[str, Any]) -> str:
    return json.dumps(status, indent=2, sort_keys=True)


def _cell(value: Any, suffix: str = "") -> str:
    return "-" if value is None else f"{value}{suffix}"


def _row(node: Mapping[str, Any]) -> list[str]:
    return [node["id"], _cell(node["host"]), _cell(node["pid"]), node["health"],
            _cell(node["age"], "s"), _cell(node["lag"]), str(node["partitions"]),
            _cell(node["leases"]), _cell(node["buffered"]), _cell(node["delayed"]),
            str(node["acked"]), _cell(node["rate"])]


def _total_row(totals: Mapping[str, Any]) -> list[str]:
    return ["total", "", "", f"{totals['nodes']} nodes", "", _cell(totals["lag"]),
            str(totals["partitions"]), str(totals["leases"]), str(totals["buffered"]),
            str(totals["delayed"]), str(totals["acked"]), _cell(totals["rate"])]


def table(rows: list[list[str]]) -> list[str]:
    """Left-aligned text columns, numbers (from column 3 on, except health) right-aligned."""
    return aligned(rows, left=(0, 1, 3))


def _dedup_line(bloom: Mapping[str, Any] | None) -> str:
    if not bloom or not bloom.get("slices"):
        return "no Bloom filter in Redis yet"
    line = (f"Bloom {bloom['key']}: {bloom['items']:,} of {bloom['capacity']:,} fingerprints, "
            f"{bloom['fill']:.2%} full ({bloom['slices']} slice(s), newest "
            f"{bloom['current_fill']:.2%} full), {bloom['memory_bytes'] / 2**20:.1f} MiB")
    return line + _recrawl_part(bloom)


def _recrawl_part(bloom: Mapping[str, Any]) -> str:
    """``; recrawl generation N, age, RECRAWL_AFTER`` when the crawl has generations."""
    if not bloom.get("generation"):
        return ""
    return (f"; recrawl generation {bloom['generation']}, "
            f"{float(bloom.get('generation_age') or 0):.0f} s old "
            f"(RECRAWL_AFTER {float(bloom.get('recrawl_after') or 0):g} s; previous "
            f"generation {int(bloom.get('previous_memory_bytes') or 0) / 2**20:.1f} MiB)")


def _proxy_line(proxies: Mapping[str, int] | None) -> str:
    if proxies is None:
        return "none in this crawl"
    text = (f"{proxies['members']} members; health: {proxies['alive']} alive, "
            f"{proxies['probation']} on probation, {proxies['dead']} dead")
    return text + (f", {proxies['unreadable']} unreadable" if proxies["unreadable"] else "")


def _alert_lines(alerts: Mapping[str, Any]) -> list[str]:
    if alerts["status"] == ALERTS_UNREAD:
        return ["alerts    unknown (not read from Redis)"]
    if not alerts["active"]:
        return ["alerts    ok: none active"]
    lines = [f"alerts    {len(alerts['active'])} active"]
    for doc in alerts["active"]:
        lines.append(f"  {doc.get('severity', '?'):<8} {doc['alert']}: {doc.get('message', '')}"
                     f" (worker {doc.get('worker', '?')})")
    return lines


def _summary(status: Mapping[str, Any]) -> list[str]:
    totals = status["totals"]
    rate = "rate n/a (needs two heartbeats)" if totals["rate"] is None \
        else f"{totals['rate']} pages/s"
    lag = _cell(totals["lag"], " records")
    finished = status["finished_at"]
    since = "not marked" if finished is None \
        else f"marked drained {max(status['time'] - finished, 0):.0f}s ago"
    return [
        f"acked     {totals['acked']} pages (sum over the nodes listed), {rate}",
        f"lag       {lag} in total over live nodes (per node above)",
        *_partition_lines(status["lag"]["per_partition"]),
        f"dedup     {_dedup_line(status['dedup'])}",
        f"proxies   {_proxy_line(status['proxies'])}",
        *proxyview.failure_lines(status.get("proxy_failures")),
        f"finished  {since}",
        *_alert_lines(status["alerts"]),
    ]


def render_text(status: Mapping[str, Any]) -> str:
    """The status as text: a header, one line per node, a total line and a summary."""
    totals = status["totals"]
    head = (f"crawl {status['crawl_id']}: {totals['nodes']} nodes: {totals['ok']} ok, "
            f"{totals['idle']} idle, {totals['lost']} lost "
            f"(lost = no heartbeat for {status['stale_after']:g}s)")
    lines = [head, ""]
    if status["nodes"]:
        rows = [[c.upper() for c in _COLUMNS]] + [_row(n) for n in status["nodes"]]
        lines += table([*rows, _total_row(totals)])
    else:
        lines.append("no workers found")
    if status["unreadable"]:
        lines.append(f"unreadable heartbeat entries: {', '.join(status['unreadable'])}")
    return "\n".join([*lines, "", *_summary(status)])
