"""Proxy failures by the party at fault, per proxy and per host, in the status JSON and its
text (no services; read from a real Redis: tests/integration/test_proxy_status.py)."""

from __future__ import annotations

import json

from crawler.operations import clusterview, proxyview
from crawler.operations.clusterview import Snapshot
from crawler.politeness.proxypool import Health, State

NOW = 1_000_000.0
HEALTH = {
    b"127.0.0.1:3128": Health(proxy_faults=2, origin_faults=9).to_json().encode(),
    b"10.0.0.1:3128~81a60f20": Health(state=State.DEAD, proxy_faults=30).to_json().encode(),
    b"10.0.0.2:3128": json.dumps({"success": 1.0, "latency": None, "state": "alive",
                                  "until": 0.0, "deaths": 0, "streak": 0}).encode(),  # older
    b"10.0.0.3:3128": b"not json",
}
HOSTS = {
    b"proxy:127.0.0.2:8123": b"20", b"origin:127.0.0.2:8123": b"4",
    b"origin:shop.example": b"5", b"proxy:[::1]:8080": b"1",
    b"origin:": b"3", b"nocause": b"1", b"other:x.example": b"2", b"proxy:bad.example": b"x",
}


def _snapshot(**kw) -> Snapshot:
    return Snapshot("c", NOW, {}, proxies=clusterview.proxy_counts(4, HEALTH), **kw)


def _status(top: int = proxyview.TOP_HOSTS) -> dict:
    return proxyview.failures_status(proxyview.proxy_faults(HEALTH),
                                     proxyview.host_faults(HOSTS), top)


def test_per_proxy_split_most_failures_first():
    assert proxyview.proxy_faults(HEALTH) == [
        {"id": "10.0.0.1:3128~81a60f20", "state": "dead", "proxy_faults": 30, "origin_faults": 0},
        {"id": "127.0.0.1:3128", "state": "alive", "proxy_faults": 2, "origin_faults": 9},
        {"id": "10.0.0.2:3128", "state": "alive", "proxy_faults": 0, "origin_faults": 0},
    ]  # the unreadable record is left out (it is counted in proxies.unreadable)


def test_per_host_split_from_cause_fields():
    assert proxyview.host_faults(HOSTS) == {
        "127.0.0.2:8123": {"proxy_faults": 20, "origin_faults": 4},
        "shop.example": {"proxy_faults": 0, "origin_faults": 5},
        "[::1]:8080": {"proxy_faults": 1, "origin_faults": 0},
    }


def test_status_totals_top_hosts_and_count():
    status = _status(top=2)
    assert status["totals"] == {"proxy_faults": 32, "origin_faults": 9}
    assert status["by_host"] == [
        {"host": "127.0.0.2:8123", "proxy_faults": 20, "origin_faults": 4},
        {"host": "shop.example", "proxy_faults": 0, "origin_faults": 5}]
    assert status["hosts"] == 3 and len(status["by_proxy"]) == 3


def test_top_ten_hosts_by_default():
    hosts = {f"proxy:h{n}.example": str(n).encode() for n in range(1, 16)}
    status = proxyview.failures_status([], proxyview.host_faults(hosts))
    assert [h["host"] for h in status["by_host"]] == [f"h{n}.example" for n in range(15, 5, -1)]
    assert status["hosts"] == 15 and status["totals"] == {"proxy_faults": 0, "origin_faults": 0}


def test_no_record_no_section():
    assert proxyview.failures_status(None, None) is None
    assert proxyview.failures_status([], {}) is None
    status = clusterview.build_status(Snapshot("c", NOW, {}, proxy_faults=[], host_faults={}),
                                      {}, stale_after=3.0)
    assert status["proxy_failures"] is None
    assert "blame" not in clusterview.render_text(status)


def test_in_the_status_json_and_text():
    snapshot = _snapshot(proxy_faults=proxyview.proxy_faults(HEALTH),
                         host_faults=proxyview.host_faults(HOSTS))
    status = json.loads(clusterview.to_json(clusterview.build_status(snapshot, {}, 3.0)))
    assert status["proxy_failures"] == _status()
    assert status["proxies"]["unreadable"] == 1  # the existing counts are unchanged
    text = clusterview.render_text(status)
    assert "blame     32 failures blamed on proxies, 9 on origin sites" in text
    lines = text.splitlines()
    head = next(i for i, line in enumerate(lines) if "PROXY FAULTS  ORIGIN FAULTS" in line)
    assert lines[head].split() == ["PROXY", "STATE", "PROXY", "FAULTS", "ORIGIN", "FAULTS"]
    assert lines[head + 1].split() == ["10.0.0.1:3128~81a60f20", "dead", "30", "0"]
    assert lines[head + 2].split() == ["127.0.0.1:3128", "alive", "2", "9"]
    hosts = next(i for i, line in enumerate(lines) if "HOST (top 3 of 3)" in line)
    assert lines[hosts + 1].split() == ["127.0.0.2:8123", "20", "4"]
    assert lines[hosts + 3].split() == ["[::1]:8080", "1", "0"]


def test_text_lists_twenty_proxies_and_says_how_many_more():
    health = {f"10.0.1.{n}:3128": Health(proxy_faults=n).to_json() for n in range(25)}
    status = proxyview.failures_status(proxyview.proxy_faults(health), {})
    lines = proxyview.failure_lines(status)
    assert sum("10.0.1." in line for line in lines) == proxyview.TEXT_PROXIES
    assert any("... 5 more proxies (--json lists them all)" in line for line in lines)
    assert lines[-1].strip() == "no host has a failure through the pool yet"
    assert len(status["by_proxy"]) == 25


def test_an_old_snapshot_without_the_new_fields_still_builds():
    status = clusterview.build_status(_snapshot(), {}, stale_after=3.0)
    assert status["proxy_failures"] is None and status["proxies"]["members"] == 4
