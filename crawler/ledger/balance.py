"""The crawl's balance while it runs: every ``BALANCE_INTERVAL`` seconds a worker reads the
report (:func:`crawler.ledger.sources.read_report`: the ledger, Kafka's offsets, MongoDB's
estimated counts) and keeps ``pending``, ``unaccounted``, ``lag`` and ``redelivered`` as stats
``ledger_balance/<name>``: its metrics export them (``crawler_ledger_balance_records``), its
heartbeat carries them to the dashboard. The cost is one short-lived Kafka client per worker
and interval."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import redis.asyncio as aioredis
from scrapy.settings import BaseSettings

from crawler.connections.tasks import every
from crawler.ledger.sources import REPORT_TIMEOUT, read_report

logger = logging.getLogger(__name__)
BALANCE_INTERVAL = 30.0
BALANCE = "ledger_balance/"  # stats prefix
NAMES = ("pending", "unaccounted", "lag", "redelivered")


class BalanceWatch:
    def __init__(self, client: aioredis.Redis, settings: BaseSettings, crawl: str, stats: Any,
                 interval: float = BALANCE_INTERVAL) -> None:
        self.client, self.settings, self.crawl = client, settings, crawl
        self.stats, self.interval = stats, interval

    async def run(self) -> None:
        await every(self.interval, self.once)

    async def once(self) -> bool:
        try:
            report = await asyncio.wait_for(
                read_report(self.client, self.settings, self.crawl, exact=False),
                REPORT_TIMEOUT)
        except Exception as exc:  # an outage: the next interval tries again
            logger.debug("Ledger balance not read: %s", exc)
            return True
        for name in NAMES:
            self.stats.set_value(BALANCE + name, int(report[name]))
        return True


def of_stats(stats: dict[str, Any]) -> dict[str, int]:
    """The balance kept in *stats* (empty before the first read)."""
    return {k[len(BALANCE):]: v for k, v in stats.items() if k.startswith(BALANCE)}
