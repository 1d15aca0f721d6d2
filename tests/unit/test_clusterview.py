"""The status of a crawl built and rendered from a synthetic state (no services)."""

from __future__ import annotations

import json

from crawler.frontier.crawlstate import parse_heartbeats
from crawler.operations import clusterview
from crawler.operations.clusterview import RateTracker, Snapshot
from crawler.politeness.proxypool import Health, State

NOW = 1_000_000.0


def _beat(pid: int, *, ts: float, acked: int, idle: bool = False, lag: int | None = 3,
          parts: int = 2) -> str:
    info = {"leases": 4, "buffered": 10, "delayed": 1, "acked": acked, "pid": pid,
            "host": "h1", "pages": acked, "items": acked}
    return json.dumps({"idle": idle, "assigned": [f"c.requests:{i}" for i in range(parts)],
                       "lag": lag, "ts": ts, "info": info})


def _raw(ts_shift: float = 0.0, acked_gain: int = 0) -> dict[bytes, bytes]:
    return {
        b"h1:11:aa": _beat(11, ts=NOW - 0.5 + ts_shift, acked=100 + acked_gain).encode(),
        b"h1:22:bb": _beat(22, ts=NOW - 0.2 + ts_shift, acked=50, idle=True, lag=0).encode(),
        b"h1:33:cc": _beat(33, ts=NOW - 60, acked=7, lag=9).encode(),  # died a minute ago
        b"junk": b"not json",
    }


def _snapshot(raw: dict[bytes, bytes], now: float = NOW) -> Snapshot:
    workers, unreadable = parse_heartbeats(raw)
    health = {b"p1": Health().to_json(), b"p2": Health(state=State.DEAD).to_json(), b"p3": b"?"}
    bloom = {"key": "{c}:bloom", "capacity": 1000, "error_rate": 0.001, "growth": 2,
             "slices": 1, "items": 250, "current_fill": 0.25, "fill": 0.25,
             "memory_bytes": 2 * 2**20}
    return Snapshot("c", now, workers, unreadable, bloom,
                    clusterview.proxy_counts(3, health), finished_at=None,
                    alerts=clusterview.parse_alerts({}, now))


def _status() -> dict:
    rates = RateTracker()
    rates.update(_snapshot(_raw()).workers)
    later = _snapshot(_raw(ts_shift=1.0, acked_gain=20), now=NOW + 1.0)
    return clusterview.build_status(later, rates.update(later.workers), stale_after=3.0)


def test_lost_idle_and_ok_nodes():
    nodes = {n["pid"]: n for n in _status()["nodes"]}
    assert {p: n["health"] for p, n in nodes.items()} == {11: "ok", 22: "idle", 33: "lost"}
    assert nodes[33]["rate"] is None and nodes[33]["age"] == 61.0


def test_totals_rates_and_lag():
    status = _status()
    totals = status["totals"]
    assert totals["acked"] == 120 + 50 + 7  # every listed node, the lost one included
    assert totals["rate"] == 20.0  # 20 acks in one second on node 11, none on node 22
    assert totals["lag"] == 3  # live nodes only: the lost node's partitions moved on
    assert (totals["ok"], totals["idle"], totals["lost"], totals["nodes"]) == (1, 1, 1, 3)
    assert totals["partitions"] == 4 and totals["leases"] == 8
    assert status["lag"] == {"per_partition": None, "per_node": {"h1:11:aa": 3, "h1:22:bb": 0}}


def test_rate_needs_two_distinct_heartbeats():
    rates = RateTracker()
    first = _snapshot(_raw()).workers
    assert set(rates.update(first).values()) == {None}
    assert set(rates.update(first).values()) == {None}  # the same heartbeats again


def test_json_shape():
    status = json.loads(clusterview.to_json(_status()))
    assert set(status) == {"crawl_id", "time", "stale_after", "nodes", "totals", "unreadable",
                           "lag", "dedup", "proxies", "finished_at", "alerts",
                           "proxy_failures", "ledger"}
    assert set(status["nodes"][0]) == {
        "id", "host", "pid", "health", "age", "lag", "partitions", "assigned", "leases",
        "buffered", "delayed", "acked", "pages", "items", "rate"}
    assert status["unreadable"] == ["junk"]
    assert status["proxies"] == {"members": 3, "alive": 1, "probation": 0, "dead": 1,
                                 "unreadable": 1}
    assert status["alerts"] == {"status": "ok", "active": []}
    assert status["proxy_failures"] is None  # not read into this snapshot


def test_text_names_every_node_and_the_summary():
    text = clusterview.render_text(_status())
    for worker in ("h1:11:aa", "h1:22:bb", "h1:33:cc"):
        assert worker in text
    assert "1 ok, 1 idle, 1 lost" in text
    assert "177 pages" in text and "20.0 pages/s" in text
    assert "25.00% full" in text
    assert "3 members; health: 1 alive, 0 on probation, 1 dead, 1 unreadable" in text
    assert "alerts    ok: none active" in text
    assert "unreadable heartbeat entries: junk" in text


def test_empty_crawl():
    status = clusterview.build_status(Snapshot("c", NOW, {}), {}, stale_after=3.0)
    text = clusterview.render_text(status)
    assert "no workers found" in text and "none in this crawl" in text
    assert "no Bloom filter in Redis yet" in text
    assert status["totals"]["rate"] is None and status["totals"]["acked"] == 0
    assert status["alerts"] == {"status": "unknown", "active": []}  # alerts hash not read
    assert "alerts    unknown (not read from Redis)" in text


def test_lag_per_partition_comes_from_the_live_heartbeats():
    now = 1000.0
    workers = {
        "w1": {"idle": False, "assigned": ["c.requests:0"], "lag": 5, "ts": now,
               "info": {"pid": 1, "acked": 3, "lag_by_partition": {"c.requests:0": 5}}},
        "w2": {"idle": True, "assigned": ["c.requests:1"], "lag": 0, "ts": now,
               "info": {"pid": 2, "acked": 1, "lag_by_partition": {"c.requests:1": 0}}},
        "gone": {"idle": True, "assigned": [], "lag": 9, "ts": now - 600,
                 "info": {"pid": 3, "acked": 0, "lag_by_partition": {"c.requests:2": 9}}},
    }
    status = clusterview.build_status(
        clusterview.Snapshot(crawl_id="c", now=now, workers=workers), {}, stale_after=3.0)
    assert status["lag"]["per_partition"] == {"c.requests:0": 5, "c.requests:1": 0}
    assert "c.requests:0=5" in clusterview.render_text(status)


def test_the_ledger_is_summed_by_kind():
    counters = {"fetched/2xx": 5, "fetched/4xx": 2, "failed/retries": 1, "dropped/robots": 1,
                "dead": 1, "seeds/accepted": 2, "seeds/duplicate": 1, "items/stored": 4,
                "again/fetched/2xx": 3, "again/items/stored": 3, "retries": 7}
    assert clusterview.ledger_summary(counters) == {
        "fetched": 7, "failed": 1, "dropped": {"robots": 1}, "dead": 1, "seeds": 3,
        "items_stored": 4, "items_dropped": 0, "redelivered": 3, "balance": {}}
    assert clusterview.ledger_summary(None) is None
