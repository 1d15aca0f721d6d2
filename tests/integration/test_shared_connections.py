"""One Redis pool and one MongoDB client per worker, shared by every component, closed
when the crawler stops (crawler.connections.shared), on the real services of the stack."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from support.connections import run_crawl

pytestmark = pytest.mark.integration

SCRIPT = Path(__file__).with_name("shared_crawl.py")


def crawl(redis_url: str, mongo_uri: str, crawl_id: str) -> tuple[dict[str, Any], str]:
    tag = uuid.uuid4().hex[:8]
    client_name, app = f"shared-{tag}", f"shared-{tag}"
    uri = mongo_uri + ("&" if "?" in mongo_uri else "?") + f"appName={app}"
    return run_crawl(SCRIPT, [redis_url, uri, crawl_id, client_name, app], timeout=120)


def test_every_component_shares_one_redis_pool_and_one_mongo_client(
    redis_url: str, mongo_uri: str, crawl_id: str
) -> None:
    result, log = crawl(redis_url, mongo_uri, crawl_id)
    # every component was on and used its service
    assert result["items"] == 6, log[-3000:]
    assert result["failures_stored"] == 1, log[-3000:]
    assert result["ratelimit_granted"] >= 7 and result["proxy_direct"] >= 7
    assert "Alert check failed" not in log and "Task exception was never retrieved" not in log
    # one client of each was ever built for the crawler
    assert (result["redis_built"], result["mongo_built"]) == (1, 1)
    # the server saw one pool: never more connections than REDIS_MAX_CONNECTIONS=2 (the rate
    # limiter, the proxy store and the alerts each held one in a pool of their own)
    assert result["during"] and all(1 <= n <= 2 for n in result["during"]), result["during"]
    assert result["mongo_during"] and min(result["mongo_during"]) >= 1
    # closing the crawler closed both
    assert not result["open"]
    assert (result["redis_after"], result["mongo_after"]) == (0, 0)
