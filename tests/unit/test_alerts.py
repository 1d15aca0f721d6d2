"""The alert rules, the lag tracker and the extension without services."""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import pytest
from scrapy import Spider
from scrapy.exceptions import NotConfigured
from scrapy.utils.misc import build_from_crawler
from scrapy.utils.test import get_crawler

from crawler.config.readers import SettingError
from crawler.extensions.alerts import AlertsExtension, post_json
from crawler.extensions.metrics import CrawlStatsCollector
from crawler.operations import clusterview
from crawler.operations.alert_rules import (
    AlertInput,
    LagTracker,
    Thresholds,
    evaluate,
    failure_rate,
    summed_lag,
)

NOW = 1_000_000.0
LIMITS = Thresholds()


def names(data: AlertInput, limits: Thresholds = LIMITS) -> list[str]:
    return [a.name for a in evaluate(data, limits)]


def test_nothing_to_report():
    assert evaluate(AlertInput(now=NOW), LIMITS) == []
    healthy = AlertInput(now=NOW, stats={"response_received_count": 100, "retry/failed": 5,
                                         "proxy/pool/alive": 1},
                         heartbeats={"w1": NOW - 30}, bloom_fill=0.9,
                         lag_growing=(600.0, 0, 0))
    assert names(healthy) == []  # every value exactly at its limit is not an alert
    # but the lag's window is a duration: grown for exactly 10 minutes is an alert
    assert names(AlertInput(now=NOW, lag_growing=(600.0, 0, 1))) == ["lag_growing"]


def test_failure_rate_rule():
    assert failure_rate({}) is None
    assert failure_rate({"retry/failed": 1, "retry/max_reached": 3,
                         "response_received_count": 12}) == 0.2
    data = AlertInput(now=NOW, stats={"retry/failed": 6, "response_received_count": 94})
    [alert] = evaluate(data, LIMITS)
    assert (alert.name, alert.severity, alert.value, alert.threshold) == (
        "failure_rate", "warning", 0.06, 0.05)
    assert "6.0% above 5.0%" in alert.message
    assert names(data, Thresholds(failure_rate=0.1)) == []
    assert names(AlertInput(now=NOW, stats={"retry/failed": 2})) == ["failure_rate"]  # no page


def test_lag_growing_rule_with_a_fake_clock():
    tracker = LagTracker()
    limits = Thresholds(lag_growing_minutes=2)
    seen = []
    for minute, lag in enumerate([50, 10, 20, 20, None, 35, 40]):
        growing = tracker.update(NOW + 60 * minute, lag)
        seen.append(names(AlertInput(now=NOW, lag_growing=growing), limits))
    # falls at minute 1 (run starts there), grows until minute 6: 5 minutes >= 2
    assert seen == [[], [], [], ["lag_growing"], ["lag_growing"], ["lag_growing"],
                    ["lag_growing"]]
    assert tracker.current() == (300.0, 10, 40)
    [alert] = evaluate(AlertInput(now=NOW, lag_growing=tracker.current()), limits)
    assert (alert.value, alert.threshold) == (5.0, 2)
    assert "from 10 to 40" in alert.message
    assert tracker.update(NOW + 420, 39) == (0.0, 39, 39)  # a fall restarts the run
    flat = AlertInput(now=NOW, lag_growing=(900.0, 5, 5))
    assert names(flat, limits) == []  # not higher than at the start: not growing


def test_summed_lag_over_fresh_heartbeats():
    docs = {"a": {"ts": NOW - 1, "lag": 3}, "b": {"ts": NOW - 2, "lag": 4},
            "old": {"ts": NOW - 100, "lag": 1000}}
    assert summed_lag(docs, NOW, 30) == 7
    assert summed_lag({**docs, "c": {"ts": NOW, "lag": None}}, NOW, 30) is None
    assert summed_lag({}, NOW, 30) is None


def test_proxy_rule_only_with_a_pool():
    assert names(AlertInput(now=NOW, stats={})) == []
    [alert] = evaluate(AlertInput(now=NOW, stats={"proxy/pool/alive": 0}), LIMITS)
    assert (alert.name, alert.severity, alert.value, alert.threshold) == (
        "proxies_low", "critical", 0.0, 1.0)
    assert names(AlertInput(now=NOW, stats={"proxy/pool/alive": 2}),
                 Thresholds(min_proxies=3)) == ["proxies_low"]


def test_bloom_fill_rule():
    assert names(AlertInput(now=NOW, bloom_fill=None)) == []
    [alert] = evaluate(AlertInput(now=NOW, bloom_fill=0.95), LIMITS)
    assert (alert.name, alert.value, alert.threshold) == ("bloom_fill", 0.95, 0.9)


def test_node_silent_rule():
    beats = {"fresh": NOW - 1, "late": NOW - 31, "gone": NOW - 120}
    [alert] = evaluate(AlertInput(now=NOW, heartbeats=beats), LIMITS)
    assert (alert.name, alert.severity, alert.value, alert.threshold) == (
        "node_silent", "critical", 120.0, 30.0)
    assert "2 node(s)" in alert.message and "gone, late" in alert.message
    assert names(AlertInput(now=NOW, heartbeats=beats), Thresholds(node_silent_seconds=200)) == []


def test_a_value_over_its_threshold_is_never_shown_as_the_threshold():
    """Rounded to nearest, 10.04 s over a 10 s limit read 10.0 (seen in a live run)."""
    beats = {"gone": NOW - 10.04}
    [silent] = evaluate(AlertInput(now=NOW, heartbeats=beats),
                        Thresholds(node_silent_seconds=10))
    assert silent.value == 10.1 and "(oldest 10.1s)" in silent.message
    [fill] = evaluate(AlertInput(now=NOW, bloom_fill=0.90001), LIMITS)
    assert fill.value == 0.9001 > fill.threshold and "90.1% full" in fill.message
    stats = {"response_received_count": 9499, "retry/failed": 501}  # 5.01 %
    [rate] = evaluate(AlertInput(now=NOW, stats=stats), LIMITS)
    assert rate.value == 0.0501 and "5.1% above 5.0%" in rate.message
    [exact] = evaluate(AlertInput(now=NOW, bloom_fill=0.95), LIMITS)
    assert exact.value == 0.95  # a value with no more digits is not pushed up


def test_bloom_missing_rule():
    lost = {"bloom/missing": 1}
    assert names(AlertInput(now=NOW, stats={}, bloom_exists=False)) == []  # never had it
    assert names(AlertInput(now=NOW, stats=lost, bloom_exists=True)) == []  # back again
    assert names(AlertInput(now=NOW, stats=lost)) == []  # not read (no Redis)
    [alert] = evaluate(AlertInput(now=NOW, stats={"bloom/missing": 2}, bloom_exists=False),
                       LIMITS)
    assert (alert.name, alert.severity, alert.value, alert.threshold) == (
        "bloom_missing", "critical", 2.0, 0.0)
    assert "missing from Redis" in alert.message and "BLOOM_ON_MISSING" in alert.message


def test_storage_stalled_rule():
    assert names(AlertInput(now=NOW, stats={"mongo/stalled": 0, "mongo/stalls": 2})) == []
    [alert] = evaluate(AlertInput(now=NOW, stats={"mongo/stalled": 1, "mongo/stalls": 3}),
                       LIMITS)
    assert (alert.name, alert.severity, alert.value) == ("storage_stalled", "critical", 3.0)
    assert "MongoDB writes fail" in alert.message


def test_kafka_refused_rule():
    """Issue 33: the broker's ACLs refusing sends or commits is an alert, not a dead letter."""
    assert names(AlertInput(now=NOW, stats={"kafka/refused": 0, "kafka/refusals": 1})) == []
    [alert] = evaluate(AlertInput(now=NOW, stats={"kafka/refused": 1, "kafka/refusals": 2}),
                       LIMITS)
    assert (alert.name, alert.severity, alert.value) == ("kafka_refused", "critical", 2.0)
    assert "refuses this worker's sends" in alert.message


def test_state_lost_rule():
    """Issue 33: Redis losing a crawl's state is said, and stays said for the worker's run."""
    assert names(AlertInput(now=NOW, stats={"crawl/state_lost": 0})) == []
    [alert] = evaluate(AlertInput(now=NOW, stats={"crawl/state_lost": 1,
                                                  "crawl/state_losses": 1}), LIMITS)
    assert (alert.name, alert.severity, alert.value) == ("state_lost", "critical", 1.0)
    assert "being repaired" in alert.message
    [alert] = evaluate(AlertInput(now=NOW, stats={"crawl/state_lost": 1, "crawl/state_losses": 1,
                                                  "crawl/state_repair_seconds": 2.5}), LIMITS)
    assert "repaired in 2.5 s" in alert.message


def test_every_rule_at_once_in_rule_order():
    # bloom_fill and bloom_missing never hold together in a crawl; the rules are pure
    data = AlertInput(now=NOW, stats={"retry/failed": 1, "proxy/pool/alive": 0,
                                      "bloom/missing": 1, "mongo/stalled": 1,
                                      "kafka/refused": 1, "crawl/state_lost": 1},
                      heartbeats={"w": NOW - 60}, bloom_fill=1.0, bloom_exists=False,
                      lag_growing=(601.0, 1, 2))
    assert names(data) == ["failure_rate", "lag_growing", "proxies_low", "bloom_fill",
                           "node_silent", "bloom_missing", "storage_stalled", "kafka_refused",
                           "state_lost"]


class AlertSpider(Spider):
    name = "alerting"


def build(**settings: Any) -> AlertsExtension:
    crawler = get_crawler(AlertSpider, {"ALERTS_ENABLED": True, "EXTENSIONS_BASE": {},
                                        "REDIS_URL": "", **settings})
    return build_from_crawler(AlertsExtension, crawler)


def test_extension_settings():
    with pytest.raises(NotConfigured):
        build(ALERTS_ENABLED=False)
    with pytest.raises(SettingError, match="ALERT_FAILURE_RATE"):
        build(ALERT_FAILURE_RATE=2)
    with pytest.raises(SettingError, match="ALERT_LAG_GROWING_MINUTES"):
        build(ALERT_LAG_GROWING_MINUTES=0)
    ext = build()
    assert ext.limits == Thresholds() and ext.interval == 10.0 and ext.webhook == ""
    # never silent before the crawl itself takes a worker for lost (7 s at the defaults)
    assert build(ALERT_NODE_SILENT_SECONDS=5).limits.node_silent_seconds == 7.0
    assert build(ALERT_NODE_SILENT_SECONDS=5, CRAWL_HEARTBEAT_INTERVAL=4).limits == Thresholds(
        node_silent_seconds=12.0)


def test_extension_without_redis_raises_logs_and_clears(caplog):
    ext = build(CRAWL_ID="c1")
    ext.open("alerting")
    stats = ext.crawler.stats
    assert stats is not None
    assert stats.get_value("alerts/active/node_silent") == 0
    stats.set_value("proxy/pool/alive", 0)
    with caplog.at_level(logging.INFO, logger="crawler.extensions.alerts"):
        assert [a.name for a in asyncio.run(ext.check())] == ["proxies_low"]
        asyncio.run(ext.check())  # still active: logged once
        stats.set_value("proxy/pool/alive", 3)
        assert asyncio.run(ext.check()) == []
    messages = [(r.levelname, r.getMessage()) for r in caplog.records]
    assert messages == [
        ("WARNING", "Alert proxies_low active: 0 healthy proxies, fewer than 1"),
        ("INFO", "Alert proxies_low cleared (was: 0 healthy proxies, fewer than 1)")]
    assert stats.get_value("alerts/active/proxies_low") == 0


def test_alert_gauge_in_the_metrics():
    ext = build()
    ext.open("alerting")
    assert ext.crawler.stats is not None
    ext.crawler.stats.set_value("alerts/active/bloom_fill", 1)
    collector = CrawlStatsCollector(ext.crawler.stats, {"crawl_id": "c", "worker": "w"})
    [family] = [f for f in collector.collect() if f.name == "crawler_alerts_active"]
    values = {s.labels["alert"]: s.value for s in family.samples}
    assert values == {"bloom_fill": 1.0, "failure_rate": 0.0, "lag_growing": 0.0,
                      "node_silent": 0.0, "proxies_low": 0.0, "bloom_missing": 0.0,
                      "storage_stalled": 0.0, "kafka_refused": 0.0, "state_lost": 0.0}


def test_webhook_failure_is_logged_not_raised(caplog):
    with caplog.at_level(logging.WARNING):
        post_json("http://user:pw@127.0.0.1:1/hook", {"a": 1}, timeout=1)
    assert "Alert webhook http://user:***@127.0.0.1:1/hook failed" in caplog.text


def test_status_shows_alerts_from_the_hash():
    doc = {"alert": "bloom_fill", "severity": "warning", "message": "Bloom filter 95% full",
           "value": 0.95, "threshold": 0.9, "since": NOW - 50, "ts": NOW - 5, "ttl": 60,
           "worker": "h:1"}
    raw = {b"bloom_fill": json.dumps(doc).encode(), b"junk": b"{",
           b"old": json.dumps({**doc, "ts": NOW - 61}).encode()}
    alerts = clusterview.parse_alerts(raw, NOW)
    assert list(alerts) == ["bloom_fill"]  # unreadable and expired entries are left out
    snapshot = clusterview.Snapshot("c", NOW, {}, alerts=alerts)
    status = clusterview.build_status(snapshot, {}, stale_after=3.0)
    assert status["alerts"]["status"] == "active"
    assert status["alerts"]["active"][0]["worker"] == "h:1"
    text = clusterview.render_text(status)
    assert "alerts    1 active" in text
    assert "warning  bloom_fill: Bloom filter 95% full (worker h:1)" in text
    empty = clusterview.build_status(clusterview.Snapshot("c", NOW, {}, alerts={}), {}, 3.0)
    assert empty["alerts"] == {"status": "ok", "active": []}
    assert "alerts    ok: none active" in clusterview.render_text(empty)



def test_the_addon_enables_alerts_in_distributed_mode():
    from scrapy.settings import Settings

    from crawler.addon import DistributedAddon

    settings = Settings({"KAFKA_BOOTSTRAP_SERVERS": "k:9092", "REDIS_URL": "redis://r",
                         "MONGO_URI": "mongodb://m"})
    DistributedAddon().update_settings(settings)
    assert settings.getbool("ALERTS_ENABLED")
    assert settings.getdict("EXTENSIONS")["crawler.extensions.alerts.AlertsExtension"] == 510
