"""A worker's life beside its requests: heartbeat, operator control, lag, lease expiry, close.

:class:`WorkerLifecycle` runs the heartbeat loop (:class:`~crawler.frontier.completion.
Completion`). At each beat it re-queues leases stuck longer than ``KAFKA_LEASE_TIMEOUT``,
reports this worker's state (idle or not, partitions, lag, counters) and per-partition lag
as stats ``frontier/lag/<partition>``, and applies ``scrapy cluster pause|resume|stop``.
It closes the spider once, whether the crawl is drained, an operator stopped it, or
Redis refuses the crawl state or the dupefilter for good.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
from typing import Protocol

from scrapy import Request, Spider
from scrapy.crawler import Crawler

from crawler import _scrapy
from crawler.connections.tasks import Tasks
from crawler.frontier import requestfields
from crawler.frontier.accounting import Accounting
from crawler.frontier.buffer import RequestBuffer
from crawler.frontier.closewatch import CloseWatch
from crawler.frontier.completion import REDIS_ERROR, Completion, Heartbeats, Ledger, LocalState
from crawler.frontier.config import FrontierConfig
from crawler.frontier.leases import Lease, LeaseRegistry
from crawler.frontier.outbox import Outbox
from crawler.frontier.transport import Consumer, Producer
from crawler.ledger import balance, outcomes

logger = logging.getLogger(__name__)
LAG_STAT = "frontier/lag/"


class Frontier(Protocol):
    """What the lifecycle reads of the scheduler's work in progress."""

    spider: Spider
    buffer: RequestBuffer[Lease]
    leases: LeaseRegistry
    outbox: Outbox
    consumer: Consumer
    sender: Producer
    accounting: Accounting

    def unacked_work(self) -> int: ...
    def send_op(self, topic: str, request: Request) -> bool: ...


class WorkerLifecycle:
    """Heartbeat, control, lag, lease expiry and the one close of a worker."""

    def __init__(self, crawler: Crawler, config: FrontierConfig, worker: str) -> None:
        assert crawler.stats is not None
        self.crawler = crawler
        self.config = config
        self.worker = worker
        self.stats = crawler.stats
        self.started = time.time()
        self.closing = False
        self.completion: Completion | None = None
        self._paused_by_control = False
        self._closer: asyncio.Future[None] | None = None
        self._frontier: Frontier | None = None
        self.close_watch = CloseWatch(crawler)

    def start(self, frontier: Frontier, state: Heartbeats, *, ledger: Ledger | None,
              partitions: set[str], state_ttl: float, tasks: Tasks) -> None:
        """Begin the heartbeat loop of *frontier* (its channels connected), one of *tasks*."""
        self._frontier = frontier
        cfg = self.config
        self.completion = Completion(
            state, self.worker, partitions=partitions, idle_timeout=cfg.idle_timeout,
            interval=cfg.heartbeat_interval, local=self.local_state, close=self.close_finished,
            control=self.control, state_ttl=state_ttl, ledger=ledger)
        tasks.spawn(self.completion.run(), "heartbeats")
        self.close_watch.start()  # a close that takes long: what it waits on, logged

    @property
    def frontier(self) -> Frontier:
        if self._frontier is None:
            raise RuntimeError("the worker lifecycle has not started")
        return self._frontier

    # -- what a heartbeat reports ------------------------------------------
    def local_idle(self) -> bool:
        """Whether this worker holds no work: nothing buffered, leased, deduplicated, sent,
        in flight in the consumer, nor paused fetching."""
        f = self.frontier
        snap = f.consumer.snapshot
        return not (f.buffer or f.leases.busy or f.outbox.busy or f.sender.pending
                    or snap.get("in_flight") or snap.get("paused"))

    def local_state(self) -> LocalState:
        self.expire_stuck()
        f = self.frontier
        f.outbox.flush_stats()
        f.accounting.stats_growth(self.stats.get_stats())
        snap = f.consumer.snapshot
        stat = self.stats.get_value
        info = {"leases": f.leases.in_engine, "buffered": len(f.buffer),
                "delayed": f.buffer.delayed, "blocked": f.buffer.blocked,
                "acked": stat("frontier/acked", 0),
                "unacked": f.unacked_work(), "held": f.consumer.holding.held,
                "pid": os.getpid(), "host": socket.gethostname(), "spider": f.spider.name,
                "crawl_id": self.config.crawl_id, "started": self.started,
                "pages": stat("response_received_count", 0),
                "items": stat("item_scraped_count", 0), "metrics_port": stat("metrics/port"),
                "lag_by_partition": snap.get("lag_by_partition", {}),
                "ledger_balance": balance.of_stats(self.stats.get_stats())}
        self.publish_lag(info["lag_by_partition"])
        refused = f.sender.refused_since is not None or bool(snap.get("commit_refused"))
        self.stats.set_value("kafka/refused", int(refused))  # the alert kafka_refused
        self.stats.set_value("kafka/refusals", f.sender.refusals)
        self.stats.max_value("frontier/unacked_peak", f.consumer.unacked_peak)
        return LocalState(self.local_idle(), snap["assigned"], snap["lag"], info)

    def publish_lag(self, lag: dict[str, int | None]) -> None:
        """Per-partition lag of this worker's partitions as stats ``frontier/lag/<partition>``."""
        for key in [k for k in self.stats.get_stats() if k.startswith(LAG_STAT)]:
            if key[len(LAG_STAT):] not in lag:
                self.stats.set_value(key, None)  # a partition this worker lost
        for partition, value in lag.items():
            if value is not None:
                self.stats.set_value(f"{LAG_STAT}{partition}", value)

    def expire_stuck(self) -> None:
        """Re-produce requests in flight for longer than the lease timeout (trap 2)."""
        f, timeout = self.frontier, self.config.lease_timeout
        for lease in f.leases.stuck(timeout):
            logger.warning("Lease on %s expired after %.0fs: re-queued",
                           lease.request.url, timeout)
            self.stats.inc_value("frontier/lease_expired")
            copy = requestfields.requeued(lease.request)
            sent = f.send_op(self.config.topic_for(copy), copy)
            lease.outcome = outcomes.REQUEUED if sent else outcomes.DEAD  # dead-lettered
            f.leases.finish(lease)

    # -- control and close -------------------------------------------------
    def control(self, command: str | None) -> None:
        """Apply ``scrapy cluster pause|resume|stop`` (read at every heartbeat)."""
        crawler = self.crawler
        if command == "stop":
            self.close_finished("scrapy cluster stop", reason="stopped")
        elif command == "pause" and not _scrapy.engine_paused(crawler):
            logger.info("Paused by scrapy cluster pause")
            _scrapy.pause_engine(crawler)
        elif command is None and _scrapy.engine_paused(crawler) and self._paused_by_control:
            logger.info("Resumed by scrapy cluster resume")
            _scrapy.unpause_engine(crawler)
        self._paused_by_control = _scrapy.engine_paused(crawler) if command == "pause" else False

    def dupefilter_refused(self, error: str) -> None:
        """Redis refuses dupefilter calls for good: close; what is unacknowledged stays."""
        self.close_finished(f"Redis refuses the dupefilter: {error}", reason=REDIS_ERROR)

    def close_finished(self, why: str, reason: str = "finished") -> None:
        """Close the spider with *reason* (once; later calls do nothing)."""
        if self.closing:
            return
        logger.info("Closing: %s", why)
        self.closing = True
        if _scrapy.engine_paused(self.crawler):
            _scrapy.unpause_engine(self.crawler)
        self._closer = _scrapy.close_spider(self.crawler, reason)
