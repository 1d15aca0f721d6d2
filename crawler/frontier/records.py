"""Records in and out of the frontier: the half of :class:`~crawler.frontier.scheduler.
KafkaScheduler` that turns consumed records into leased requests, and produces seeds and
re-queued requests as operations leases wait for.

A record of the seeds topic is claimed first (:mod:`crawler.frontier.seeding`); what this
worker sends there is signed (:mod:`crawler.frontier.seedtrust`). A record
that cannot be decoded goes to the dead-letter topic; a second copy of a request this
worker consumed from the same partition in the same epoch is dropped
(:mod:`crawler.frontier.recent`). Every other record becomes a lease in the buffer.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from scrapy import Request, Spider
from scrapy.crawler import Crawler
from scrapy.statscollectors import StatsCollector

from crawler.dedup.due import RECRAWL_META
from crawler.frontier import codec
from crawler.frontier.consumer import Record
from crawler.frontier.delay import WAITS_FOR_KEY
from crawler.frontier.leases import AckBarrier, Lease, LeaseRegistry
from crawler.ledger import outcomes

if TYPE_CHECKING:
    from crawler._scrapy import EngineHook
    from crawler.connections.tasks import Tasks
    from crawler.frontier.buffer import RequestBuffer
    from crawler.frontier.config import FrontierConfig
    from crawler.frontier.delay import Wakeup
    from crawler.frontier.outbox import Outbox
    from crawler.frontier.recent import RecentFingerprints
    from crawler.frontier.seeding import SeedClaims
    from crawler.frontier.seedtrust import SeedSigner
    from crawler.frontier.transport import Producer

LEASE_KEY = "crawler_lease"  # meta key: the id of the lease a request belongs to


class Records:
    """Consumed records to leased requests; requests to records (mixed into the scheduler)."""

    crawler: Crawler
    config: FrontierConfig
    stats: StatsCollector
    spider: Spider
    leases: LeaseRegistry
    barrier: AckBarrier
    buffer: RequestBuffer[Lease]
    recent: RecentFingerprints
    outbox: Outbox
    seeds: SeedClaims
    signer: SeedSigner
    sender: Producer
    _engine: EngineHook
    _wakeup: Wakeup
    _tasks: Tasks
    _unacked: int

    def _on_records(self, records: list[Record]) -> None:
        self._unacked += len(records)
        for record in records:
            self.stats.inc_value("frontier/consumed")
            lease = Lease(record.topic, record.partition, record.offset, record.epoch)
            if record.topic == self.config.seeds_topic:
                if (claim := self.seeds.take(record, lease)) is not None:
                    self._tasks.spawn(claim, "seed claim")
                continue
            try:
                request = codec.decode_request(record.value, self.spider)
            except codec.CodecError as exc:
                self._dead(record, lease, str(exc))
                continue
            if self._raced_copy(request, record):
                lease.outcome = outcomes.RACED_COPY
                self.leases.finish(lease)
                continue
            request.meta[LEASE_KEY] = self.leases.register(lease, request)
            self._push(request, lease)
        if self.buffer.ready:
            self._engine.wake()

    def _raced_copy(self, request: Request, record: Record) -> bool:
        """Whether *record* is a second copy of a request this worker consumed from the
        same partition in this epoch (see :mod:`crawler.frontier.recent`)."""
        if request.dont_filter or RECRAWL_META in request.meta:  # due again: a new copy
            return False
        fingerprint = self.crawler.request_fingerprinter.fingerprint(request)
        if self.recent.seen(fingerprint, (record.topic, record.partition, record.epoch)):
            self.stats.inc_value("frontier/raced_copies_dropped")
            return True
        return False

    def _dead(self, record: Record, lease: Lease, reason: str) -> None:
        source = {"topic": record.topic, "partition": record.partition, "offset": record.offset}
        self.outbox.dead_letter(reason, record.value, source)
        seed = record.topic == self.config.seeds_topic
        lease.outcome = outcomes.SEED_INVALID if seed else outcomes.DEAD
        self.leases.finish(lease)

    def _publish_seed(self, request: Request) -> bool:
        if not self.send_op(self.config.seeds_topic, request.replace(dont_filter=False)):
            return False
        self.stats.inc_value("frontier/seeds_published")
        return True

    def send_op(self, topic: str, request: Request) -> bool:
        """Produce *request* unfiltered, as an operation leases wait for (signed if it is
        a seed: the workers take it with every field); False if it can never travel, which
        the outbox has reported and dead-lettered (:meth:`Outbox.encoded`)."""
        value = self.outbox.encoded(request)
        if value is None:
            return False
        headers = self.signer.headers(value) if topic == self.config.seeds_topic else None
        op = self.barrier.begin()

        def sent(_partition: int, _offset: int) -> None:
            self.barrier.end(op)

        def refused(exc: BaseException) -> None:
            self.outbox.refused(request, len(value), exc)
            self.barrier.end(op)

        self.sender.send(topic, self.config.partition_key(request), value, sent,
                         rejected=refused, headers=headers)
        return True

    def _encode(self, request: Request) -> bytes:
        return codec.encode_request(request, self.spider)

    def _push(self, request: Request, lease: Lease, not_before: float | None = None) -> None:
        self.buffer.push(request, lease, not_before)
        if not_before is not None and not_before > time.time():
            # wake the engine when this request is due, not when something else happens
            self._wakeup.at(not_before)

    def _unit_freed(self, unit: str, delay: float) -> None:
        """*unit*'s next turn is in *delay* s (:data:`~crawler.frontier.delay.UNIT_FREED`):
        its first waiting request goes then, not at its next poll."""
        due = time.time() + max(delay, 0.0)
        if self.buffer.hurry(lambda request: request.meta.get(WAITS_FOR_KEY) == unit, due):
            self._wakeup.at(due)
