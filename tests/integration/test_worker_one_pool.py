"""A distributed worker holds one Redis pool: the Kafka frontier (seed claims, heartbeats,
the dupefilter) shares it with the rate limiter, the proxy store and the alerts, and none
of its connections is left once the crawler stopped. Real Kafka, Redis and MongoDB."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from helpers import tracebacks_outside_kafka
from support.connections import run_crawl

pytestmark = pytest.mark.integration

SCRIPT = Path(__file__).with_name("worker_pool_crawl.py")


def crawl(kafka: str, redis_url: str, mongo_uri: str, crawl_id: str) -> tuple[dict[str, Any], str]:
    name = f"pool-{uuid.uuid4().hex[:8]}"
    return run_crawl(SCRIPT, [kafka, redis_url, mongo_uri, crawl_id, name], timeout=180)


def test_a_distributed_worker_holds_one_redis_pool_and_closes_it(
    kafka_bootstrap: str, redis_url: str, mongo_uri: str, crawl_id: str
) -> None:
    result, log = crawl(kafka_bootstrap, redis_url, mongo_uri, crawl_id)
    # the frontier and every other Redis user ran
    assert result["reason"] == "finished", log[-3000:]
    assert result["items"] == 6 and result["seeds_taken"] == 1, log[-3000:]
    assert result["filtered"] >= 1, log[-3000:]  # /page/0 again, through the dupefilter
    assert result["ratelimit_granted"] >= 6 and result["proxy_direct"] >= 6, log[-3000:]
    # the scheduler's client is the crawler's shared one, the only one ever built
    assert result["shared_client"] and all(result["shared_client"]), result
    assert result["redis_built"] == 1
    # the server saw one pool: never more connections than REDIS_MAX_CONNECTIONS
    most = result["max_connections"]
    assert result["during"] and all(1 <= n <= most for n in result["during"]), result["during"]
    # closing the crawler closed it: no connection left
    assert not result["open"] and result["redis_after"] == 0, result
    assert "Task exception was never retrieved" not in log
    assert "Background task" not in log, log[-3000:]
    assert not tracebacks_outside_kafka(log), log[-3000:]
