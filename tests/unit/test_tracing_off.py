"""Tracing off costs nothing: with no ``OTEL_EXPORTER_OTLP_ENDPOINT`` a crawl with the add-on
imports no module of OpenTelemetry, and neither the extension nor its spider middleware runs.
And how the tracing settings are read (the spans themselves: tests/integration/test_otel.py).

The crawls run in a fresh interpreter: other tests of this process may have imported
OpenTelemetry already. One importer is not ours: redis-py (8.2) imports
``opentelemetry.sdk.metrics`` whenever the SDK is installed (``redis.observability``), and
:mod:`crawler.connections` imports redis in both modes. The crawl may import those modules
and no other: none of tracing's (``opentelemetry.sdk.trace``, the exporter, the protobufs).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from scrapy import Spider
from scrapy.utils.test import get_crawler
from support.onecrawl import one_crawl

from crawler.config.readers import SettingError
from crawler.extensions.tracing import TracingConfig

ADDON = {"ADDONS": {"crawler.addon.DistributedAddon": 0}}
OTEL_ENVIRONMENT = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_SERVICE_NAME")
#: what tracing on imports, and redis-py does not
TRACING_MODULES = ("opentelemetry.sdk.trace", "opentelemetry.exporter", "opentelemetry.proto")
SPANS = "crawler.extensions.tracingspans"


@pytest.fixture(autouse=True)
def _no_otel_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in OTEL_ENVIRONMENT:
        monkeypatch.delenv(name, raising=False)


def run(tmp_path: Path, mode: str, **env: str) -> dict[str, Any]:
    seen, _ = one_crawl(tmp_path, {**ADDON, "LOG_LEVEL": "WARNING"}, mode=mode,
                        roots=("opentelemetry", SPANS), unset=OTEL_ENVIRONMENT, env=env)
    seen["otel"] = [m for m in seen["modules"] if m.split(".")[0] == "opentelemetry"]
    seen["spans_module"] = SPANS in seen["modules"]
    return seen


def test_a_crawl_without_an_endpoint_imports_nothing_of_opentelemetry(tmp_path: Path) -> None:
    seen = run(tmp_path, "crawl")
    assert seen["items"] == 1  # the crawl ran, through the add-on's components
    assert "DownloadErrorLog" in seen["extensions"]
    assert "CanonicalLinksMiddleware" in seen["spider_middlewares"]
    assert "Tracing" not in seen["extensions"]
    assert "TracingMiddleware" not in seen["spider_middlewares"]
    assert not seen["spans_module"]
    assert set(seen["otel"]) <= imported_by_redis(), set(seen["otel"]) - imported_by_redis()
    assert not [m for m in seen["otel"] if m.startswith(TRACING_MODULES)]


def imported_by_redis() -> set[str]:
    """What ``import redis`` alone imports of OpenTelemetry, in a fresh interpreter."""
    code = ("import json, sys, redis; print(json.dumps("
            "[m for m in sys.modules if m.split('.')[0] == 'opentelemetry']))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, check=True)
    return set(json.loads(done.stdout))


def test_the_check_sees_opentelemetry_when_an_endpoint_is_set(tmp_path: Path) -> None:
    """The same script with an endpoint (nothing listens: no span is sent while building)."""
    seen = run(tmp_path, "build", OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:9")
    assert "Tracing" in seen["extensions"]
    assert seen["spans_module"]
    assert set(seen["otel"]) - imported_by_redis()
    assert [m for m in seen["otel"] if m.startswith(TRACING_MODULES)]


def config(monkeypatch: pytest.MonkeyPatch, env: dict[str, str] | None = None,
           **settings: Any) -> TracingConfig:
    for name, value in (env or {}).items():
        monkeypatch.setenv(name, value)
    return TracingConfig.from_settings(get_crawler(Spider, {**ADDON, **settings}).settings)


def test_off_by_default_and_the_service_name(monkeypatch: pytest.MonkeyPatch) -> None:
    assert config(monkeypatch) == TracingConfig(endpoint="", service_name="scrapy-fleet")


def test_the_standard_environment_variables_are_read(monkeypatch: pytest.MonkeyPatch) -> None:
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318",
           "OTEL_SERVICE_NAME": "crawler-eu"}
    assert config(monkeypatch, env) == TracingConfig("http://collector:4318", "crawler-eu")


def test_a_setting_wins_over_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318", "OTEL_SERVICE_NAME": "env"}
    found = config(monkeypatch, env, OTEL_EXPORTER_OTLP_ENDPOINT="https://tempo:4318",
                   OTEL_SERVICE_NAME="mine")
    assert found == TracingConfig("https://tempo:4318", "mine")


def test_an_endpoint_that_is_not_http_fails_naming_the_setting(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with pytest.raises(SettingError, match="OTEL_EXPORTER_OTLP_ENDPOINT") as raised:
        config(monkeypatch, OTEL_EXPORTER_OTLP_ENDPOINT="collector:4317?token=s3cr3t")
    assert "s3cr3t" not in str(raised.value)
