"""At the default settings a host has no rate; one that answers 429 or 503 gets one, for
every worker of the crawl (a real Redis, two middlewares standing for two workers)."""

from __future__ import annotations

import time
from typing import Any

import pytest
from scrapy import Request
from scrapy.http import Response
from support.ratelimit import HOST, opened, run

from crawler.frontier.delay import not_before

pytestmark = pytest.mark.integration
KAFKA = "crawler.frontier.scheduler.KafkaScheduler"


def _settings(redis_url: str, crawl_id: str) -> dict[str, Any]:
    """Distributed mode's: the middleware on, no rate set (every other setting a default)."""
    return {"REDIS_URL": redis_url, "CRAWL_ID": crawl_id, "RATELIMIT_ENABLED": True,
            "SCHEDULER": KAFKA}


@pytest.mark.parametrize("status", [429, 503])
def test_a_host_with_no_rate_gets_one_when_it_answers(status: int, redis_url: str,
                                                      crawl_id: str) -> None:
    async def body() -> None:
        settings = _settings(redis_url, crawl_id)
        async with opened(settings) as first, opened(settings) as second:
            burst = [await second.process_request(Request(f"https://{HOST}/{i}"))
                     for i in range(5)]
            assert burst == [None] * 5  # no rate: nothing waits, no Redis call
            request = Request(f"https://{HOST}/x")
            assert await first.process_request(request) is None
            await first.process_response(request, Response(request.url, status=status,
                                                           request=request))
            assert first.stats.get_value("ratelimit/adopted") == 1
            assert second.adapted is not None
            await second.adapted.refresh()  # what its reader does every 2 s
            outcomes = [await second.process_request(Request(f"https://{HOST}/{i}"))
                        for i in range(3)]
            waits = [not_before(o) - time.time() for o in outcomes if isinstance(o, Request)]
            # RATELIMIT_UNRATED_RATE 2/s halved: one request a second, a burst of one
            assert len(waits) >= 2 and max(waits) > 0.5, outcomes
            other = Request("https://other.example/")
            assert await second.process_request(other) is None  # other hosts: still none

    run(body)
