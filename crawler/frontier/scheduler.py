"""The Kafka frontier scheduler: leases, acknowledgements and crawl completion.

A record of ``<CRAWL_ID>.requests`` becomes a *lease*. The lease ends when the
engine lets go of its request (callback done, items stored, or the request
failed, was ignored, or was replaced by a redirect), and is acknowledged only
after every follow-up request begun before that was durably produced
(:class:`~crawler.frontier.leases.AckBarrier`). Retries and redirects keep the lease.
Offsets are committed per partition up to the first record still unfinished.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
import uuid
from typing import Any

from scrapy import Request, Spider, signals
from scrapy.core.scheduler import BaseScheduler
from scrapy.crawler import Crawler
from scrapy.exceptions import DontCloseSpider
from scrapy.http import Response
from scrapy.utils.defer import deferred_from_coro
from twisted.internet.defer import Deferred

from crawler._scrapy import on_request_left
from crawler.config.readers import SettingError
from crawler.connections import clients as connection
from crawler.dedup.dupefilter import LocalBloom, RedisBloom
from crawler.frontier import clients as frontier_clients
from crawler.frontier import codec, crawllife
from crawler.frontier.buffer import RequestBuffer
from crawler.frontier.completion import REDIS_ERROR, Completion, LocalState
from crawler.frontier.config import FrontierConfig
from crawler.frontier.consumer import Record
from crawler.frontier.crawlstate import CrawlState
from crawler.frontier.delay import Wakeup, not_before
from crawler.frontier.leases import Lease, LeaseRegistry
from crawler.frontier.outbox import Outbox
from crawler.frontier.recent import RecentFingerprints
from crawler.frontier.seeding import SeedClaims

logger = logging.getLogger(__name__)
LEASE_KEY = "crawler_lease"


class KafkaScheduler(BaseScheduler):
    """A ``BaseScheduler`` whose queue is a Kafka topic shared by all workers."""

    def __init__(self, crawler: Crawler, config: FrontierConfig) -> None:
        self.crawler = crawler
        self.config = config
        self.stats = crawler.stats
        self.worker = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
        self.leases = LeaseRegistry(self._ack, ended=self._lease_ended)
        self.barrier = self.leases.barrier
        self.buffer: RequestBuffer[Lease] = RequestBuffer()
        self.recent = RecentFingerprints(config.recent_window)
        self._closing = False
        self._started = time.time()
        self._paused_by_control = False
        self._tasks: set[asyncio.Task[Any]] = set()
        self._unacked = 0  # records consumed whose lease is neither acknowledged nor dropped
        self._holding = False  # next_request is holding back (KAFKA_MAX_UNACKED)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> KafkaScheduler:
        assert crawler.spidercls is not None
        return cls(crawler, FrontierConfig.from_settings(crawler.settings, crawler.spidercls.name))

    # -- lifecycle ----------------------------------------------------------
    def open(self, spider: Spider) -> Deferred[None]:
        return deferred_from_coro(self._open_or_explain(spider))

    async def _open_or_explain(self, spider: Spider) -> None:
        try:
            await self._open(spider)
        except (connection.ServiceUnavailable, SettingError) as exc:
            logger.error("Cannot start the crawl: %s", exc)
            raise

    async def _open(self, spider: Spider) -> None:
        cfg = self.config
        self.spider = spider
        state_ttl = crawllife.state_ttl(self.crawler.settings)  # validated before any I/O
        self.redis = connection.redis_client(cfg.redis_url, cfg.redis_params,
                                             connect_timeout=cfg.connect_timeout,
                                             max_connections=cfg.redis_max_connections)
        await connection.check_redis(self.redis, cfg.redis_url)
        self.bloom = self._bloom()
        await self.bloom.open()
        self.state = CrawlState(self.redis, cfg.crawl_id, stale_after=cfg.stale_after)
        await asyncio.to_thread(self._connect_kafka)
        self.outbox = Outbox(
            bloom=self.bloom,
            local=LocalBloom(capacity=cfg.local_capacity, error_rate=cfg.local_error_rate),
            send=self.sender.send, barrier=self.barrier, topic=cfg.requests_topic,
            dead_topic=cfg.dead_topic, key_for=cfg.partition_key, encode=self._encode,
            stats=self.stats, stop=self._dupefilter_refused,
        )
        self.seeds = SeedClaims(
            spider=spider, fingerprint=self.crawler.request_fingerprinter.fingerprint,
            state=self.state, submit=self.outbox.submit, stats=self.stats, finish=self._finish,
            dead=self._dead, limit=cfg.seed_claims)
        self._engine_slot = on_request_left(self.crawler, self.leases.left)
        self._wakeup = Wakeup(frontier_clients.call_later, self._engine_slot.nextcall.schedule,
                              self.buffer.next_due)
        self.crawler.signals.connect(self._response_received, signals.response_received)
        self.crawler.signals.connect(self._spider_idle, signals.spider_idle)
        self.sender.start()
        self.consumer.start()
        self.completion = Completion(
            self.state, self.worker, partitions=self.all_partitions,
            idle_timeout=cfg.idle_timeout, interval=cfg.heartbeat_interval,
            local=self._local_state, close=self._close_finished, control=self._control,
            state_ttl=state_ttl)
        self._spawn(self.completion.run())
        logger.info("Kafka frontier open: crawl %s, worker %s, topics %s (%d partitions)",
                    cfg.crawl_id, self.worker, cfg.requests_topic, self._partitions[0])

    def _bloom(self) -> RedisBloom:
        cfg = self.config
        return RedisBloom(self.redis, f"{{{cfg.crawl_id}}}:bloom", capacity=cfg.bloom_capacity,
                          error_rate=cfg.bloom_error_rate, growth=cfg.bloom_growth,
                          on_grow=lambda _i: self.stats.inc_value("bloom/slices_added"),
                          on_missing=cfg.bloom_on_missing,
                          missing_seen=lambda: self.stats.inc_value("bloom/missing"))

    def _connect_kafka(self) -> None:
        clients = frontier_clients.connect(self.config, self.worker, self._on_records,
                                           self.unacked_work)
        self.sender, self.consumer = clients.sender, clients.consumer
        self._partitions, self.all_partitions = clients.partitions, clients.all_partitions

    def unacked_work(self) -> int:
        """Leases not yet acknowledged plus follow-up sends not yet acknowledged (read by
        the consumer thread: consumption pauses above ``KAFKA_MAX_UNACKED``)."""
        return self._unacked + self.barrier.pending_ops

    def close(self, reason: str) -> Deferred[None]:
        return deferred_from_coro(self._close(reason))

    async def _close(self, reason: str) -> None:
        self._closing = True
        for task in list(self._tasks):
            task.cancel()
        if not hasattr(self, "consumer"):  # open failed before Kafka was reached
            if hasattr(self, "redis"):
                await self.redis.aclose()
            return
        deadline = time.monotonic() + self.config.close_timeout
        while self._acks_to_wait_for() and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        self.outbox.flush_stats()
        self.consumer.stop()
        await asyncio.to_thread(self.consumer.stopped.wait, self.config.close_timeout)
        await asyncio.to_thread(self.sender.close, self.config.close_timeout)
        try:
            await self.state.leave(self.worker)
        except Exception as exc:
            logger.warning("Could not remove this worker's heartbeat: %s", exc)
        await self.redis.aclose()
        logger.info("Kafka frontier closed (%s): %d leases acknowledged this run",
                    reason, self.stats.get_value("frontier/acked", 0))

    def _acks_to_wait_for(self) -> bool:
        """Whether closing should wait: work may still be acknowledged (none can once
        every operation left is one the outbox gave up after Redis refused it)."""
        if self.outbox.abandoned:
            return self.barrier.pending_ops > self.outbox.abandoned
        return bool(self.barrier.waiting or self.barrier.pending_ops)

    def _dupefilter_refused(self, error: str) -> None:
        """Redis refuses dupefilter calls for good: close; what is unacknowledged stays."""
        self._close_finished(f"Redis refuses the dupefilter: {error}", reason=REDIS_ERROR)

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
            if lease.active:  # a parked retry, redirect or delayed copy
                self.leases.unpark(lease)
                return request
            if not self.consumer.current(lease.tp, lease.epoch):
                self.consumer.taken += 1
                self.leases.drop(lease)
                self._unacked -= 1
                self.stats.inc_value("frontier/stale_dropped")
                continue
            self.leases.start(request, lease)
            return request
        return None

    def _held_back(self) -> bool:
        """Whether unacknowledged work is at ``KAFKA_MAX_UNACKED``: the engine gets no new
        request (nor does the consumer fetch) until acknowledgements bring it down."""
        self._holding = self.unacked_work() >= self.config.max_unacked
        return self._holding

    def _push(self, request: Request, lease: Lease, not_before: float | None = None) -> None:
        self.buffer.push(request, lease, not_before)
        if not_before is not None and not_before > time.time():
            # wake the engine when this request is due, not when something else happens
            self._wakeup.at(not_before)

    # -- records in ---------------------------------------------------------
    def _on_records(self, records: list[Record]) -> None:
        self._unacked += len(records)
        for record in records:
            self.stats.inc_value("frontier/consumed")
            lease = Lease(record.topic, record.partition, record.offset, record.epoch)
            if record.topic == self.config.seeds_topic:
                if (claim := self.seeds.take(record, lease)) is not None:
                    self._spawn(claim)
                continue
            try:
                request = codec.decode_request(record.value, self.spider)
            except codec.CodecError as exc:
                self._dead(record, lease, str(exc))
                continue
            if self._raced_copy(request, record):
                self._finish(lease)
                continue
            request.meta[LEASE_KEY] = self.leases.register(lease, request)
            self._push(request, lease)
        if self.buffer.ready:
            self._engine_slot.nextcall.schedule()

    def _raced_copy(self, request: Request, record: Record) -> bool:
        """Whether *record* is a second copy of a request this worker consumed from the
        same partition in this epoch (see :mod:`crawler.frontier.recent`)."""
        if request.dont_filter:
            return False
        fingerprint = self.crawler.request_fingerprinter.fingerprint(request)
        if self.recent.seen(fingerprint, (record.topic, record.partition, record.epoch)):
            self.stats.inc_value("frontier/raced_copies_dropped")
            return True
        return False

    def _dead(self, record: Record, lease: Lease, reason: str) -> None:
        source = {"topic": record.topic, "partition": record.partition, "offset": record.offset}
        self.outbox.dead_letter(reason, record.value, source)
        self._finish(lease)

    def _publish_seed(self, request: Request) -> bool:
        self._send_op(self.config.seeds_topic, request.replace(dont_filter=False))
        self.stats.inc_value("frontier/seeds_published")
        return True

    def _send_op(self, topic: str, request: Request) -> None:
        """Produce *request* unfiltered, as an operation leases wait for."""
        value = self._encode(request)
        op = self.barrier.begin()

        def sent(_partition: int, _offset: int) -> None:
            self.barrier.end(op)

        def refused(exc: BaseException) -> None:
            self.outbox.refused(request, len(value), exc)
            self.barrier.end(op)

        self.sender.send(topic, self.config.partition_key(request), value, sent,
                         rejected=refused)

    def _encode(self, request: Request) -> bytes:
        return codec.encode_request(request, self.spider)

    # -- lease ends ---------------------------------------------------------
    def _response_received(self, response: Response, request: Request, spider: Spider) -> None:
        self.leases.scraping(request)

    def _finish(self, lease: Lease) -> None:
        self.leases.finish(lease)

    def _lease_ended(self, _lease: Lease) -> None:
        self.consumer.taken += 1  # its record no longer takes room in the buffer

    def _ack(self, lease: Lease) -> None:
        self.consumer.ack(lease.tp, lease.offset, lease.epoch)
        self._unacked -= 1
        self.stats.inc_value("frontier/acked")
        if self._holding and not self._held_back():
            self._engine_slot.nextcall.schedule()

    # -- crawl completion ---------------------------------------------------
    def _spider_idle(self, spider: Spider) -> None:
        if not self._closing:
            raise DontCloseSpider

    def _spawn(self, coro: Any) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def local_idle(self) -> bool:
        snap = self.consumer.snapshot
        return not (self.buffer or self.leases.busy or self.outbox.busy or self.sender.pending
                    or snap.get("in_flight") or snap.get("paused"))

    def _local_state(self) -> LocalState:
        self._expire_stuck()
        self.outbox.flush_stats()
        snap = self.consumer.snapshot
        stat = self.stats.get_value
        info = {"leases": self.leases.in_engine, "buffered": len(self.buffer),
                "delayed": self.buffer.delayed, "acked": stat("frontier/acked", 0),
                "unacked": self.unacked_work(),
                "held": self.consumer.handed - self.consumer.taken,
                "pid": os.getpid(), "host": socket.gethostname(), "spider": self.spider.name,
                "crawl_id": self.config.crawl_id, "started": self._started,
                "pages": stat("response_received_count", 0),
                "items": stat("item_scraped_count", 0), "metrics_port": stat("metrics/port"),
                "lag_by_partition": snap.get("lag_by_partition", {})}
        self._publish_lag(info["lag_by_partition"])
        self.stats.max_value("frontier/unacked_peak", self.consumer.unacked_peak)
        return LocalState(self.local_idle(), snap["assigned"], snap["lag"], info)

    def _publish_lag(self, lag: dict[str, int | None]) -> None:
        """Per-partition lag of this worker's partitions as stats ``frontier/lag/<partition>``."""
        for key in [k for k in self.stats.get_stats() if k.startswith("frontier/lag/")]:
            if key[len("frontier/lag/"):] not in lag:
                self.stats.set_value(key, None)  # a partition this worker lost
        for partition, value in lag.items():
            if value is not None:
                self.stats.set_value(f"frontier/lag/{partition}", value)

    def _expire_stuck(self) -> None:
        """Re-produce requests in flight for longer than the lease timeout (trap 2)."""
        for lease in self.leases.stuck(self.config.lease_timeout):
            logger.warning("Lease on %s expired after %.0fs: re-queued",
                           lease.request.url, self.config.lease_timeout)
            self.stats.inc_value("frontier/lease_expired")
            # dont_filter: the consumer must not take the new copy for a raced one
            self._send_op(self.config.requests_topic, lease.request.replace(dont_filter=True))
            self.leases.finish(lease)

    def _control(self, command: str | None) -> None:
        """Apply ``scrapy cluster pause|resume|stop`` (read at every heartbeat)."""
        engine = self.crawler.engine
        assert engine is not None
        if command == "stop":
            self._close_finished("scrapy cluster stop", reason="stopped")
        elif command == "pause" and not engine.paused:
            logger.info("Paused by scrapy cluster pause")
            engine.pause()
        elif command is None and engine.paused and self._paused_by_control:
            logger.info("Resumed by scrapy cluster resume")
            engine.unpause()
        self._paused_by_control = engine.paused if command == "pause" else False

    def _close_finished(self, why: str, reason: str = "finished") -> None:
        if self._closing:
            return
        logger.info("Closing: %s", why)
        self._closing = True
        assert self.crawler.engine is not None
        if self.crawler.engine.paused:
            self.crawler.engine.unpause()
        self._closer = asyncio.ensure_future(
            self.crawler.engine.close_spider_async(reason=reason))
