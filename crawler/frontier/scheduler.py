"""The Kafka frontier scheduler: Scrapy's adapter to leases and acknowledgements.

A record of ``<CRAWL_ID>.requests`` becomes a *lease*. The lease ends when the
engine lets go of its request (callback done, items stored, or the request
failed, was ignored, or was replaced by a redirect), and is acknowledged only
after every follow-up request begun before that was durably produced
(:class:`~crawler.frontier.leases.AckBarrier`). Retries and redirects keep the lease.
Offsets are committed per partition up to the first record still unfinished.

Its collaborators are built by :meth:`KafkaScheduler.from_crawler`, from settings: the
transport (:mod:`~crawler.frontier.transport`, Kafka), the shared dupefilter
(``FRONTIER_DEDUP_CLASS``) and the worker lifecycle (:mod:`~crawler.frontier.lifecycle`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import redis.asyncio as aioredis
from scrapy import Request, Spider, signals
from scrapy.crawler import Crawler
from scrapy.exceptions import DontCloseSpider
from scrapy.http import Response
from twisted.internet.defer import Deferred

from crawler._scrapy import (
    BaseScheduler,
    EngineHook,
    as_deferred,
    on_download_failed,
    on_request_left,
)
from crawler.config.keys import CrawlKeys, worker_id
from crawler.config.readers import SettingError
from crawler.connections import clients as connection
from crawler.connections import shared
from crawler.connections.tasks import Tasks, every
from crawler.dedup.backend import DedupBackend, DedupFactory
from crawler.dedup.due import DueStore, MemoryDue, RedisDue
from crawler.dedup.local import LocalBloom
from crawler.dedup.recrawl import generation_of
from crawler.frontier import crawllife, crawlstate, startup
from crawler.frontier.accounting import Accounting, Tally
from crawler.frontier.buffer import RequestBuffer
from crawler.frontier.clients import KafkaTransport
from crawler.frontier.completion import REDIS_ERROR, Heartbeats, Ledger, RedisLedger
from crawler.frontier.config import FrontierConfig
from crawler.frontier.crawlstate import CrawlState
from crawler.frontier.delay import UNIT_FREED, Wakeup, not_before
from crawler.frontier.hostwait import HostWaits
from crawler.frontier.leases import Lease, LeaseRegistry
from crawler.frontier.lifecycle import WorkerLifecycle
from crawler.frontier.outbox import Outbox
from crawler.frontier.recent import RecentFingerprints
from crawler.frontier.records import LEASE_KEY, Records
from crawler.frontier.scope import REFRESH_INTERVAL, CrawlScope
from crawler.frontier.seeding import SeedClaims
from crawler.frontier.seedtrust import SeedSigner, crawl_seed_key
from crawler.frontier.transport import Channels, Transport
from crawler.ledger.balance import BalanceWatch
from crawler.ledger.recorder import LedgerRecorder
from crawler.ledger.sources import REPORT_TIMEOUT, log_report
from crawler.ledger.tally import MemoryTally
from crawler.politeness.hostlimit import (
    HostLimitConfig,
    MemorySlotStore,
    RedisSlotStore,
    SlotStore,
)
from crawler.recovery import StateGuard, watch_filter
from crawler.security.trusted import TRUSTED
from crawler.statusindex.worker import WorkerIndex, open_index

logger = logging.getLogger(__name__)
__all__ = ["LEASE_KEY", "KafkaScheduler"]


class KafkaScheduler(Records, BaseScheduler):
    """A ``BaseScheduler`` whose queue is a Kafka topic shared by all workers."""

    #: a request's ``crawler_not_before`` meta is honoured (:mod:`crawler.frontier.delay`)
    supports_delays = True

    def __init__(self, crawler: Crawler, config: FrontierConfig, *, transport: Transport,
                 dedup: DedupFactory, host_limit: HostLimitConfig | None = None) -> None:
        assert crawler.stats is not None
        self.crawler = crawler
        self.config = config
        self.stats = crawler.stats
        self.transport = transport
        self.dedup = dedup
        self.keys = CrawlKeys(config.crawl_id)
        self.worker = worker_id()
        self.leases = LeaseRegistry(self._ack, ended=self._lease_ended)
        self.barrier = self.leases.barrier
        self.buffer: RequestBuffer[Lease] = RequestBuffer(band_of=config.band_of,
                                                          min_share=config.min_share)
        self.recent = RecentFingerprints(config.recent_window)
        self.lifecycle = WorkerLifecycle(crawler, config, self.worker)
        self.startup = startup.StartupWatch(crawler)  # logs where the start-up went
        self.redis: aioredis.Redis | None = None
        self.recorder: LedgerRecorder | None = None  # the crawl ledger in Redis, once open
        self.index: WorkerIndex | None = None  # the status index in MongoDB, once open
        self.host_limit = host_limit if host_limit is not None and host_limit.enabled else None
        self.hosts: HostWaits | None = None  # cluster-wide per-host limits (HOSTLIMIT_*)
        self._tasks = Tasks("frontier")  # heartbeats and seed claims
        self._unacked = 0  # records consumed whose lease is neither acknowledged nor dropped
        self._holding = False  # next_request is holding back (KAFKA_MAX_UNACKED)
        self.guard: StateGuard | None = None  # Redis state lost: noticed and repaired

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> KafkaScheduler:
        assert crawler.spidercls is not None
        config = FrontierConfig.from_settings(crawler.settings, crawler.spidercls.name)
        return cls(crawler, config, transport=KafkaTransport(config),
                   dedup=DedupFactory.from_crawler(crawler),
                   host_limit=HostLimitConfig.from_settings(crawler.settings))

    # -- lifecycle ----------------------------------------------------------
    def open(self, spider: Spider) -> Deferred[None]:
        return as_deferred(self._open_or_explain(spider))

    async def _open_or_explain(self, spider: Spider) -> None:
        try:
            await self._open(spider)
        except (connection.ServiceUnavailable, SettingError) as exc:
            logger.error("Cannot start the crawl: %s", exc)
            raise

    async def _open(self, spider: Spider) -> None:
        startup.mark("setup")
        cfg = self.config
        state_ttl = crawllife.state_ttl(self.crawler.settings)  # validated before any I/O
        self.redis = shared.redis_for(self.crawler)  # the worker's one pool, given back on close
        await connection.check_redis(self.redis, cfg.redis.url)
        bloom = self._bloom()
        guard = self.guard = StateGuard.from_crawler(
            self.crawler, self.redis, cfg, worker=self.worker,
            recrawl=generation_of(bloom) is not None)
        await guard.ensure()  # Redis lost a crawl that exists: repaired before going on
        watch_filter(bloom, lambda: self._tasks.spawn(guard.watch(), "state repair"))
        await bloom.open()
        stale_after = crawlstate.stale_after(cfg.heartbeat_interval, cfg.session_timeout_ms)
        state = CrawlState(self.redis, cfg.crawl_id, stale_after=stale_after)
        seed_key = await crawl_seed_key(self.redis, cfg.crawl_id)
        guard.saved_seed_key(seed_key)
        startup.mark("connections")
        channels = await asyncio.to_thread(self.transport.connect, self.worker,
                                           self._on_records, self.unacked_work)
        startup.mark("topics")
        self.index = await open_index(self.crawler, cfg.crawl_id, self.barrier)
        self.recorder = LedgerRecorder(self.redis, cfg.crawl_id, self.barrier,
                                       committed=channels.consumer.committed,
                                       on_read=self._ledger_read)
        self.start(spider, bloom=bloom, state=state, ledger=RedisLedger(self.redis, cfg.crawl_id,
                                                              mirror=guard.mirror),
                   state_ttl=state_ttl, seed_key=seed_key, channels=channels,
                   slots=RedisSlotStore(self.redis, cfg.crawl_id),
                   due=RedisDue(self.redis, cfg.crawl_id), tally=self.recorder)
        self.recorder.start()
        guard.stop = lambda line: self.lifecycle.close_finished(line, reason=REDIS_ERROR)
        await self.scope.open()
        self._tasks.spawn(every(REFRESH_INTERVAL, self.scope.refresh), "crawl scope")
        self._tasks.spawn(every(REFRESH_INTERVAL, TRUSTED.write_back), "seeds' hosts")
        balance = BalanceWatch(self.redis, self.crawler.settings, cfg.crawl_id, self.stats)
        self._tasks.spawn(balance.run(), "ledger balance")

    def _bloom(self) -> DedupBackend:
        """The crawl's shared dupefilter (``FRONTIER_DEDUP_CLASS``) on this worker's Redis."""
        return self.dedup(self.redis, self.keys.bloom)

    def start(self, spider: Spider, *, bloom: DedupBackend, state: Any, ledger: Ledger | None,
              state_ttl: float, seed_key: bytes, channels: Channels | None = None,
              slots: SlotStore | None = None, due: DueStore | None = None,
              tally: Tally | None = None) -> None:
        """Wire the frontier to the crawl's shared state (*state*: seed claims and
        heartbeats; *seed_key*: the crawl's key that signs the seeds its workers publish;
        *slots*: the per-host shares and *due*, the ``recrawl_after`` times,
        in memory if not given; *tally*: the crawl ledger, in memory if not given) and its
        transport's *channels* (connected here if not given), then start them. :meth:`open`
        calls it once Redis and Kafka answered."""
        cfg = self.config
        if channels is None:
            channels = self.transport.connect(self.worker, self._on_records, self.unacked_work)
        self.spider, self.bloom, self.state = spider, bloom, state
        self.accounting = Accounting(self.crawler, self.leases, tally or MemoryTally())
        self.scope = CrawlScope(spider, self.redis, cfg.crawl_id, crawler=self.crawler)
        TRUSTED.bind(self.redis, cfg.crawl_id)  # seeds' hosts, open to private networks
        self.recent.recrawl = recrawl = generation_of(bloom)  # docs/recrawl.md
        self.sender, self.consumer = channels.producer, channels.consumer
        self._partitions, self.all_partitions = channels.partitions, channels.all_partitions
        self.outbox = Outbox(
            bloom=bloom, local=LocalBloom(capacity=cfg.local_capacity,
                                          error_rate=cfg.local_error_rate, recrawl=recrawl),
            send=self.sender.send, barrier=self.barrier, topic=cfg.requests_topic,
            dead_topic=cfg.dead_topic, key_for=cfg.partition_key, encode=self._encode,
            stats=self.stats, stop=self.lifecycle.dupefilter_refused, topic_for=cfg.topic_for,
            due=due or MemoryDue(), spider_name=spider.name)
        self.signer = SeedSigner(seed_key)
        self.seeds = SeedClaims(
            spider=spider, fingerprint=self.crawler.request_fingerprinter.fingerprint,
            state=state, submit=self.outbox.submit, stats=self.stats, finish=self._finish,
            dead=self._dead, limit=cfg.seed_claims, signer=self.signer, rule=cfg.seed_rule,
            scope=self.scope, canonical_rules=cfg.canonical)
        self._engine: EngineHook = on_request_left(self.crawler, self._left)
        on_download_failed(self.crawler, self.accounting.failed)  # process_response's too
        self._start_gate(slots or MemorySlotStore())
        self._wakeup = Wakeup(self.transport.call_later, self._engine.wake, self.buffer.next_due)
        self.crawler.signals.connect(self._response_received, signals.response_received)
        self.crawler.signals.connect(self._spider_idle, signals.spider_idle)
        self.crawler.signals.connect(self._unit_freed, UNIT_FREED)
        if self.index is not None:  # before the first record
            self.index.attach(worker=self.worker, accounting=self.accounting,
                              outbox=self.outbox)
        self.sender.start()
        self.consumer.start()
        heartbeats: Heartbeats = state
        self.lifecycle.start(self, heartbeats, ledger=ledger, partitions=self.all_partitions,
                             state_ttl=state_ttl, tasks=self._tasks)
        logger.info("Kafka frontier open: crawl %s, worker %s, topics %s (%d partitions)",
                    cfg.crawl_id, self.worker, cfg.requests_topic, self._partitions[0])

    def _ledger_read(self, counters: dict[str, int]) -> None:
        """The crawl-wide ledger as stats ``ledger/<name>`` (metrics, the final stats)."""
        for name, value in counters.items():
            self.stats.set_value(f"ledger/{name}", value)

    def _start_gate(self, slots: SlotStore) -> None:
        if self.host_limit is not None:
            self.hosts = HostWaits(
                self.host_limit, slots, self.worker, crawler=self.crawler, buffer=self.buffer,
                push=self._push, wake=self._engine.wake, tasks=self._tasks)
            self.consumer.rebalanced.append(self.hosts.gate.hurry)

    def _left(self, request: Request) -> None:
        if self.hosts is not None:
            self.hosts.left(request)
        self.leases.left(request)

    def unacked_work(self) -> int:
        """Leases not yet acknowledged plus follow-up sends not yet acknowledged (read by
        the consumer thread: consumption pauses above ``KAFKA_MAX_UNACKED``)."""
        return self._unacked + self.barrier.pending_ops

    def close(self, reason: str) -> Deferred[None]:
        return as_deferred(self._close(reason))

    async def _close(self, reason: str) -> None:
        self.lifecycle.closing = True
        await self._tasks.close()  # heartbeats and seed claims: cancelled, even mid-call
        if not hasattr(self, "consumer"):  # open failed before Kafka was reached
            await self._release_redis()
            return
        deadline = time.monotonic() + self.config.close_timeout
        while self._acks_to_wait_for() and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        self.outbox.flush_stats()
        self.accounting.stats_growth(self.stats.get_stats())
        await self._close_index(max(deadline - time.monotonic(), 1.0))
        if self.recorder is not None:
            await self.recorder.close(max(deadline - time.monotonic(), 1.0))
        self.consumer.stop()
        await asyncio.to_thread(self.consumer.stopped.wait, self.config.close_timeout)
        await asyncio.to_thread(self.sender.close, self.config.close_timeout)
        await self.outbox.close(grace=deadline - time.monotonic())
        try:
            await self.state.leave(self.worker)
        except Exception as exc:
            logger.warning("Could not remove this worker's heartbeat: %s", exc)
        if self.redis is not None and self.recorder is not None:
            await log_report(self.redis, self.crawler.settings, self.config.crawl_id,
                             timeout=REPORT_TIMEOUT)
        await self._release_redis()
        logger.info("Kafka frontier closed (%s): %d leases acknowledged this run",
                    reason, self.stats.get_value("frontier/acked", 0))

    async def _release_redis(self) -> None:
        """Give the worker's Redis pool back (the last of its users closes it), and the
        state guard's MongoDB client."""
        await self._close_index(1.0)  # an open that failed half-way
        guard, self.guard = self.guard, None
        if guard is not None:
            await guard.close()
        client, self.redis = self.redis, None
        if client is not None:
            await shared.release_redis(self.crawler, client)

    async def _close_index(self, timeout: float) -> None:
        index, self.index = self.index, None
        if index is not None:
            await index.close(timeout)

    def _acks_to_wait_for(self) -> bool:
        """Whether closing should wait: work may still be acknowledged (none can once
        every operation left is one the outbox gave up after Redis refused it)."""
        if self.outbox.abandoned:
            return self.barrier.pending_ops > self.outbox.abandoned
        return bool(self.barrier.waiting or self.barrier.pending_ops)

    # -- scheduler interface ------------------------------------------------
    def has_pending_requests(self) -> bool:
        return bool(self.buffer)

    def enqueue_request(self, request: Request) -> bool:
        lease = self.leases.live(request.meta.get(LEASE_KEY))
        if lease is not None:  # a retry or redirect of a leased request: it keeps the lease
            self.leases.park(request, lease)
            self._push(request, lease, not_before(request))
            self.stats.inc_value("frontier/continued")
            return True
        request.meta.pop(LEASE_KEY, None)
        if request.meta.get("is_start_request"):
            return self._publish_seed(request)
        fingerprint = self.crawler.request_fingerprinter.fingerprint(request)
        return self.outbox.submit(request, fingerprint, filtered=not request.dont_filter)

    def next_request(self) -> Request | None:
        if self._held_back():
            return None
        while (item := self.buffer.pop()) is not None:
            request, lease = item
            if not lease.active and not self.consumer.current(lease.tp, lease.epoch):
                self.consumer.holding.took(lease.topic)
                self.leases.drop(lease)
                self._unacked -= 1
                self.stats.inc_value("frontier/stale_dropped")
                continue
            if self.hosts is not None and not self.hosts.admitted(request, lease):
                continue
            if lease.active:  # a parked retry, redirect or delayed copy
                self.leases.unpark(lease)
            else:
                self.leases.start(request, lease)
            return request
        return None

    def _held_back(self) -> bool:
        """Whether unacknowledged work is at ``KAFKA_MAX_UNACKED``: the engine gets no new
        request (nor does the consumer fetch) until acknowledgements bring it down."""
        self._holding = self.unacked_work() >= self.config.max_unacked
        return self._holding

    # -- lease ends ---------------------------------------------------------
    def _response_received(self, response: Response, request: Request, spider: Spider) -> None:
        self.leases.scraping(request)
        self.accounting.response(request, response)

    def _finish(self, lease: Lease) -> None:
        self.leases.finish(lease)

    def _lease_ended(self, lease: Lease) -> None:
        self.consumer.holding.took(lease.topic)  # its record no longer takes room
        self.accounting.ended(lease)  # before its ack: the ack waits for the ledger
        if self.index is not None and self.index.hooks is not None:
            self.index.hooks.ended(lease)  # and for the status index

    def _ack(self, lease: Lease) -> None:
        self.consumer.ack(lease.tp, lease.offset, lease.epoch)
        self._unacked -= 1
        self.stats.inc_value("frontier/acked")
        if self._holding and not self._held_back():
            self._engine.wake()

    def _spider_idle(self, spider: Spider) -> None:
        if not self.lifecycle.closing:
            raise DontCloseSpider
