"""The production-stack files in ``deploy/``: they parse, fit together and only use real metrics.

Docker does not run here, so the compose file and the Dockerfile are checked by reading
them. Prometheus' configuration and rules are checked with ``promtool`` (Debian's
``prometheus`` package): ``check config``, ``check rules``, every dashboard query
compiled as a recording rule, and ``test rules`` feeding synthetic series to every alert.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from helpers import require

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
COMPOSE = DEPLOY / "docker-compose.yml"
DOCKERFILE = DEPLOY / "Dockerfile"
PROMETHEUS = DEPLOY / "prometheus" / "prometheus.yml"
ALERTS = DEPLOY / "prometheus" / "alerts.yml"
DASHBOARD = DEPLOY / "grafana" / "crawler-dashboard.json"
METRICS_DOC = ROOT / "docs" / "metrics.md"
PROMTOOL = shutil.which("promtool") or (
    "/usr/bin/promtool" if Path("/usr/bin/promtool").exists() else None
)
needs_promtool = pytest.mark.usefixtures("_promtool")


@pytest.fixture
def _promtool() -> None:
    """Skip without promtool; fail instead when CI=true."""
    require(PROMTOOL, "promtool not found (Debian package `prometheus`: apt-get install "
            "prometheus)")

ALERT_NAMES = {
    "CrawlerHighFailureRate", "CrawlerFrontierUnackedGrowing", "CrawlerFrontierStalled",
    "CrawlerFewHealthyProxies", "CrawlerDedupRatioHigh", "CrawlerWorkerDown", "CrawlerNoWorkers",
}
PROMQL_KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right",
                   "and", "or", "unless", "bool", "offset", "inf", "nan"}


def load_yaml(path: Path) -> Any:
    with path.open(encoding="utf-8") as f:
        return yaml.safe_load(f)


def documented_metrics() -> set[str]:
    """Metric names of the table in docs/metrics.md, with a histogram's series suffixes."""
    text = METRICS_DOC.read_text(encoding="utf-8")
    section = text.split("\n## Metrics\n", 1)[1].split("\n## ", 1)[0]
    names: set[str] = set()
    for line in section.splitlines():
        if not line.startswith("| `"):
            continue
        cells = [c.strip() for c in line.strip("|").split("|")]
        found = re.findall(r"`([a-z_:][a-z0-9_:]*)`", cells[0])
        names.update(found)
        if cells[1] == "histogram":
            names.update(f"{n}{s}" for n in found for s in ("_bucket", "_sum", "_count"))
    names.update(re.findall(r"`([a-z_:][a-z0-9_:]*_created)`", section))
    return names


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects (Grafana variables allowed)."""
    e = re.sub(r'"(?:\\.|[^"\\])*"', '""', expr)  # string literals
    e = re.sub(r"\{[^}]*\}", " ", e)  # label matchers
    e = re.sub(r"\[[^\]]*\]", " ", e)  # range selectors
    e = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", e)
    e = re.sub(r"\$\{?\w+\}?", " ", e)  # $crawl_id, $__rate_interval
    names = set()
    for m in re.finditer(r"(?<![\w.])[A-Za-z_:][A-Za-z0-9_:]*", e):
        if e[m.end():].lstrip().startswith("(") or m.group().lower() in PROMQL_KEYWORDS:
            continue  # a function or an aggregation, not a metric
        names.add(m.group())
    return names


def test_metric_name_parsing() -> None:
    known = documented_metrics()
    assert {"crawler_pages_total", "crawler_frontier_unacked_records",
            "crawler_download_latency_seconds_bucket", "process_virtual_memory_bytes",
            "crawler_download_latency_seconds_created"} <= known
    assert len(known) >= 25
    expr = ('histogram_quantile(0.95, sum by (le) (rate(foo_bucket{a="b(c)"}[$__rate_interval])))'
            ' / on (x) group_left sum without (y) (bar) > bool 0.5')
    assert metric_names(expr) == {"foo_bucket", "bar"}


def test_yaml_files_parse() -> None:
    for path in (COMPOSE, PROMETHEUS, ALERTS):
        assert isinstance(load_yaml(path), dict), path


def test_compose_services() -> None:
    compose = load_yaml(COMPOSE)
    services = compose["services"]
    assert {"kafka", "redis", "mongo", "worker", "prometheus"} <= set(services)

    kafka = services["kafka"]
    assert kafka["image"].startswith("apache/kafka:")
    env = kafka["environment"]
    for name in ("CLUSTER_ID", "KAFKA_NODE_ID", "KAFKA_PROCESS_ROLES", "KAFKA_LISTENERS",
                 "KAFKA_ADVERTISED_LISTENERS", "KAFKA_CONTROLLER_LISTENER_NAMES",
                 "KAFKA_CONTROLLER_QUORUM_VOTERS", "KAFKA_LISTENER_SECURITY_PROTOCOL_MAP"):
        assert name in env, name
    assert set(env["KAFKA_PROCESS_ROLES"].split(",")) == {"broker", "controller"}
    node, _, voter = env["KAFKA_CONTROLLER_QUORUM_VOTERS"].partition("@")
    assert int(node) == env["KAFKA_NODE_ID"]
    assert voter.endswith(":9093") and "CONTROLLER://:9093" in env["KAFKA_LISTENERS"]
    assert env["KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR"] == 1  # one broker

    redis = services["redis"]
    assert redis["image"] == "redis:7"
    assert "--appendonly" in redis["command"]
    assert redis["command"][redis["command"].index("--appendonly") + 1] == "yes"
    assert services["mongo"]["image"] == "mongo:7"
    for name in ("kafka", "redis", "mongo"):
        assert services[name]["volumes"], f"{name} keeps its data in a volume"

    worker = services["worker"]
    build = worker["build"]
    assert (COMPOSE.parent / build["context"] / build["dockerfile"]).resolve() == DOCKERFILE
    assert worker["deploy"]["replicas"] == 3
    wenv = worker["environment"]
    for name in ("KAFKA_BOOTSTRAP_SERVERS", "REDIS_URL", "MONGO_URI", "CRAWL_ID", "START_URLS"):
        assert wenv[name], name
    assert wenv["KAFKA_BOOTSTRAP_SERVERS"].split(":")[0] == "kafka"
    assert wenv["REDIS_URL"].startswith("redis://redis:")
    assert wenv["MONGO_URI"].startswith("mongodb://mongo:")
    assert (wenv["METRICS_ENABLED"], wenv["METRICS_HOST"], wenv["METRICS_PORT"]) == (
        "True", "0.0.0.0", "9410")
    command = " ".join(worker["command"])
    assert "scrapy crawl site -a start_urls=" in command
    # The crawler reads METRICS_* only as settings, not from the environment.
    for name in ("METRICS_ENABLED", "METRICS_HOST", "METRICS_PORT"):
        assert f'-s {name}="$${name}"' in command, name
    assert {"kafka", "redis", "mongo"} <= set(worker["depends_on"])

    prometheus = services["prometheus"]
    mounts = {v.split(":")[1]: v.split(":")[0] for v in prometheus["volumes"]}
    source = (COMPOSE.parent / mounts["/etc/prometheus"]).resolve()
    assert source == PROMETHEUS.parent
    assert "--config.file=/etc/prometheus/prometheus.yml" in prometheus["command"]

    scrape = load_yaml(PROMETHEUS)["scrape_configs"][0]
    sd = scrape["dns_sd_configs"][0]
    assert sd["names"] == ["worker"] and sd["type"] == "A"
    assert str(sd["port"]) == wenv["METRICS_PORT"]


def test_compose_dollars_are_escaped_or_interpolations() -> None:
    """A bare $NAME would be replaced by compose from the host's environment."""
    text = re.sub(r"(?m)#.*$", "", COMPOSE.read_text(encoding="utf-8"))
    text = text.replace("$$", "")
    bare = re.findall(r"\$(?!\{[A-Z_][A-Z0-9_]*(?::?[-?][^}]*)?\})\S*", text)
    assert bare == []


def test_dockerfile() -> None:
    text = DOCKERFILE.read_text(encoding="utf-8")
    assert re.search(r"(?m)^FROM python:3\.11-slim$", text)
    assert re.search(r"(?m)^RUN pip install \.", text)
    for line in re.findall(r"(?m)^COPY (.+)$", text):
        for source in line.split()[:-1]:
            assert (ROOT / source).exists(), source
    assert re.search(r"(?m)^USER \w+", text), "the worker does not run as root"


def dashboard_exprs(dashboard: dict[str, Any]) -> list[str]:
    exprs = []

    def walk(panels: list[dict[str, Any]]) -> None:
        for panel in panels:
            exprs.extend(t["expr"] for t in panel.get("targets", []))
            walk(panel.get("panels", []))

    walk(dashboard["panels"])
    return exprs


def test_dashboard_is_valid_and_uses_documented_metrics() -> None:
    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    for field in ("title", "uid", "panels", "schemaVersion", "templating", "time", "version"):
        assert field in dashboard, field
    assert isinstance(dashboard["schemaVersion"], int)
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    for panel in dashboard["panels"]:
        assert set(panel["gridPos"]) == {"h", "w", "x", "y"}
        assert panel["gridPos"]["x"] + panel["gridPos"]["w"] <= 24
    known = documented_metrics()
    exprs = dashboard_exprs(dashboard)
    used: set[str] = set()
    for expr in exprs:
        names = metric_names(expr)
        assert names, expr
        assert names <= known, f"undocumented metric(s) {names - known} in {expr}"
        used |= names
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            metric = re.fullmatch(r"label_values\((\w+),\s*\w+\)", variable["query"])
            assert metric and metric.group(1) in known
    assert {"crawler_pages_total", "crawler_failures_total", "crawler_retries_total",
            "crawler_frontier_unacked_records", "crawler_proxy_pool_proxies",
            "crawler_dedup_filtered_total", "crawler_download_latency_seconds_bucket"} <= used
    assert any(e.startswith("histogram_quantile(") for e in exprs)


def alert_rules() -> list[dict[str, Any]]:
    return [rule for group in load_yaml(ALERTS)["groups"] for rule in group["rules"]]


def test_alerts_use_documented_metrics() -> None:
    known = documented_metrics() | {"up"}  # up: Prometheus' own per-target series
    rules = alert_rules()
    assert {r["alert"] for r in rules} == ALERT_NAMES
    for rule in rules:
        names = metric_names(rule["expr"])
        assert names and names <= known, (rule["alert"], names - known)
        assert rule["labels"]["severity"] in {"info", "warning", "critical"}
        assert rule["annotations"]["summary"]


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    assert PROMTOOL is not None
    return subprocess.run([PROMTOOL, *args], capture_output=True, text=True, timeout=60)


@needs_promtool
def test_promtool_check_config() -> None:
    result = promtool("check", "config", str(PROMETHEUS))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 rule files found" in result.stdout + result.stderr


@needs_promtool
def test_promtool_check_rules() -> None:
    result = promtool("check", "rules", str(ALERTS))
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"{len(ALERT_NAMES)} rules found" in result.stdout + result.stderr


@needs_promtool
def test_dashboard_queries_compile(tmp_path: Path) -> None:
    """Every dashboard query, with its Grafana variables filled in, is valid PromQL."""
    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    rules = [
        {"record": f"dashboard:query_{i}",
         "expr": expr.replace("$__rate_interval", "1m").replace("$crawl_id", ".*")}
        for i, expr in enumerate(dashboard_exprs(dashboard))
    ]
    path = tmp_path / "dashboard-rules.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    result = promtool("check", "rules", str(path))
    assert result.returncode == 0, result.stdout + result.stderr


def series(name: str, values: str, **labels: str) -> dict[str, str]:
    text = ",".join(f'{k}="{v}"' for k, v in labels.items())
    return {"series": f"{name}{{{text}}}", "values": values}


def crawl_series(name: str, crawl: str, values: str, **labels: str) -> dict[str, str]:
    return series(name, values, crawl_id=crawl, worker=f"{crawl}-host:1", **labels)


def expect(alert: str, at: str, *crawls: str) -> dict[str, Any]:
    rule = next(r for r in alert_rules() if r["alert"] == alert)
    severity = rule["labels"]["severity"]
    return {"eval_time": at, "alertname": alert,
            "exp_alerts": [{"exp_labels": {"severity": severity, "crawl_id": c}} for c in crawls]}


@needs_promtool
def test_alerts_fire_on_synthetic_series(tmp_path: Path) -> None:
    """promtool test rules: each alert fires for the bad crawl and not for the good one.

    Annotations are stripped from a copy of the rules (promtool compares them verbatim);
    `promtool check rules` above checks their templates.
    """
    groups = load_yaml(ALERTS)["groups"]
    for group in groups:
        for rule in group["rules"]:
            rule.pop("annotations", None)
    rules_path = tmp_path / "alerts.yml"
    rules_path.write_text(yaml.safe_dump({"groups": groups}))
    p = crawl_series
    tests = [
        {"interval": "1m", "input_series": [  # 1% failures vs 0.1%
            p("crawler_pages_total", "bad", "0+100x30"),
            p("crawler_failures_total", "bad", "0+1x30"),
            p("crawler_pages_total", "good", "0+1000x30"),
            p("crawler_failures_total", "good", "0+1x30"),
         ], "alert_rule_test": [
            expect("CrawlerHighFailureRate", "3m"),  # not yet: `for: 5m`
            expect("CrawlerHighFailureRate", "15m", "bad"),
        ]},
        {"interval": "1m", "input_series": [  # unacked climbing vs flat
            p("crawler_frontier_unacked_records", "bad", "0+2x40"),
            p("crawler_frontier_acked_total", "bad", "0+100x40"),
            p("crawler_frontier_unacked_records", "good", "50x40"),
            p("crawler_frontier_acked_total", "good", "0+100x40"),
         ], "alert_rule_test": [
            expect("CrawlerFrontierUnackedGrowing", "5m"),
            expect("CrawlerFrontierUnackedGrowing", "30m", "bad"),
            expect("CrawlerFrontierStalled", "30m"),
        ]},
        {"interval": "1m", "input_series": [  # in flight, nothing acknowledged
            p("crawler_frontier_unacked_records", "bad", "10x30"),
            p("crawler_frontier_acked_total", "bad", "500x30"),
            p("crawler_frontier_unacked_records", "good", "0x30"),
            p("crawler_frontier_acked_total", "good", "500x30"),
         ], "alert_rule_test": [
            expect("CrawlerFrontierStalled", "20m", "bad"),
            expect("CrawlerFrontierUnackedGrowing", "20m"),
        ]},
        {"interval": "1m", "input_series": [
            p("crawler_proxy_pool_proxies", "bad", "1x10", state="alive"),
            p("crawler_proxy_pool_proxies", "bad", "9x10", state="dead"),
            p("crawler_proxy_pool_proxies", "good", "5x10", state="alive"),
         ], "alert_rule_test": [
            expect("CrawlerFewHealthyProxies", "1m"),
            expect("CrawlerFewHealthyProxies", "5m", "bad"),
        ]},
        {"interval": "1m", "input_series": [  # 95% duplicates vs 50%
            p("crawler_dedup_filtered_total", "bad", "0+95x60"),
            p("crawler_frontier_consumed_total", "bad", "0+5x60"),
            p("crawler_dedup_filtered_total", "good", "0+50x60"),
            p("crawler_frontier_consumed_total", "good", "0+50x60"),
         ], "alert_rule_test": [
            expect("CrawlerDedupRatioHigh", "10m"),
            expect("CrawlerDedupRatioHigh", "40m", "bad"),
        ]},
        {"interval": "1m", "input_series": [
            series("up", "1 1 0 0 0 0 0", job="crawler", instance="10.0.0.5:9410"),
            series("up", "1 1 1 1 1 1 1", job="crawler", instance="10.0.0.6:9410"),
         ], "alert_rule_test": [
            {"eval_time": "5m", "alertname": "CrawlerWorkerDown", "exp_alerts": [{"exp_labels": {
                "severity": "critical", "job": "crawler", "instance": "10.0.0.5:9410"}}]},
            {"eval_time": "5m", "alertname": "CrawlerNoWorkers", "exp_alerts": []},
        ]},
        {"interval": "1m", "input_series": [
            series("up", "1x5", job="prometheus", instance="localhost:9090"),
         ], "alert_rule_test": [
            {"eval_time": "3m", "alertname": "CrawlerNoWorkers", "exp_alerts": [
                {"exp_labels": {"severity": "critical", "job": "crawler"}}]},
        ]},
    ]
    tested = {t["alertname"] for test in tests for t in test["alert_rule_test"]}
    assert tested == ALERT_NAMES
    test_path = tmp_path / "alerts_test.yml"
    test_path.write_text(yaml.safe_dump({
        "rule_files": [str(rules_path)], "evaluation_interval": "1m", "tests": tests,
    }))
    result = promtool("test", "rules", str(test_path))
    assert result.returncode == 0, result.stdout + result.stderr
