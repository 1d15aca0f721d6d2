"""``HOST_PAGE_BUDGET`` against a real Redis: two workers share each host's count, a request
counts once whatever retries it takes, the one past the budget is dropped with its reason,
and Redis failing holds requests back instead of letting them through."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from scrapy import Request, Spider
from scrapy.utils.test import get_crawler

from crawler.frontier.delay import not_before
from crawler.ledger import outcomes
from crawler.middlewares.budget import COUNTED, HostBudgetMiddleware, OverBudget

pytestmark = pytest.mark.integration
KAFKA = "crawler.frontier.scheduler.KafkaScheduler"


class _Spider(Spider):
    name = "budget"


def _worker(redis_url: str, crawl_id: str, budget: int) -> HostBudgetMiddleware:
    crawler = get_crawler(_Spider, {"REDIS_URL": redis_url, "CRAWL_ID": crawl_id,
                                    "HOST_PAGE_BUDGET": budget, "SCHEDULER": KAFKA})
    return HostBudgetMiddleware.from_crawler(crawler)


async def _outcome(worker: HostBudgetMiddleware, request: Request) -> Any:
    try:
        return await worker.process_request(request)
    except OverBudget as exc:
        return outcomes.of_exception(exc)


def test_two_workers_share_a_hosts_budget_and_a_retry_counts_once(
        redis_url: str, crawl_id: str) -> None:
    async def main() -> list[Any]:
        first, second = workers = [_worker(redis_url, crawl_id, 3) for _ in range(2)]
        for w in workers:
            await w.spider_opened()
        try:
            got = [await _outcome(workers[i % 2], Request(f"http://a.test/{i}"))
                   for i in range(5)]
            retried = Request("http://b.test/0")
            got.append(await _outcome(first, retried))
            # its retries copy its meta, the mark with it: four more tries, none counted
            got += [await _outcome(second, retried.copy()) for _ in range(4)]
            got += [await _outcome(second, Request(f"http://b.test/{i}")) for i in (1, 2, 3)]
            return got
        finally:
            for w in workers:
                await w.spider_closed()

    got = asyncio.run(main())
    assert got[:5] == [None, None, None, "dropped/host_budget", "dropped/host_budget"]
    assert got[5:] == [None] * 7 + ["dropped/host_budget"]


def test_redis_failing_holds_the_request_back_uncounted(crawl_id: str) -> None:
    async def main() -> Any:
        worker = _worker("redis://127.0.0.1:9/0", crawl_id, 3)  # nothing listens on port 9
        await worker.spider_opened()
        try:
            return await worker.process_request(Request("http://a.test/"))
        finally:
            await worker.spider_closed()

    back = asyncio.run(main())
    assert isinstance(back, Request) and not_before(back) is not None
    assert COUNTED not in back.meta
