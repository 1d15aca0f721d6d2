"""An in-memory transport, dupefilter and crawl state: the frontier without a broker or Redis.

:class:`MemoryTransport` implements :mod:`crawler.frontier.transport` over a
:class:`MemoryLog` (topics of partitions, one consumer group's committed offsets). Nothing
runs in a thread: the caller plays the broker and the group coordinator, and decides when
records are fetched (:meth:`MemoryConsumer.poll`) and committed (:meth:`MemoryConsumer.tick`),
when sends are acknowledged (:meth:`MemoryProducer.acknowledge`) and when partitions move
(:meth:`MemoryConsumer.assign`, :meth:`MemoryConsumer.lose`). Commits follow the Kafka
consumer's rule: up to the first record still unfinished
(:class:`~crawler.frontier.leases.OffsetTracker`), and an acknowledgement of an older epoch
counts for nothing. Tests drive leases,
acknowledgements, rebalances and completion with it; the real-broker tests are the proof.
"""

from __future__ import annotations

import threading
import time
import zlib
from collections import defaultdict
from collections.abc import Callable, Sequence
from typing import Any, Self

from scrapy.crawler import Crawler

from crawler.connections.retry import RedisRetry
from crawler.frontier.config import FrontierConfig
from crawler.frontier.consumer import Record
from crawler.frontier.crawllife import Finished
from crawler.frontier.crawlstate import WorkerState
from crawler.frontier.holding import Holding
from crawler.frontier.leases import OffsetTracker, Partition
from crawler.frontier.partitioning import spread_partition
from crawler.frontier.transport import Channels, Deliver, Done, Headers, Rejected


class MemoryLog:
    """Topics of *partitions* partitions each, and the committed offsets of one group."""

    def __init__(self, partitions: int) -> None:
        self.partitions = partitions
        self.records: dict[Partition, list[bytes]] = defaultdict(list)
        self.headers: dict[tuple[str, int, int], Headers] = {}  # of the records that have some
        self.committed: dict[Partition, int] = {}

    def append(self, topic: str, key: bytes | None, value: bytes,
               headers: Headers | None = None) -> tuple[int, int]:
        spread = spread_partition(key, self.partitions) if key else None
        partition = spread if spread is not None else (zlib.crc32(key) % self.partitions
                                                       if key else 0)
        log = self.records[(topic, partition)]
        log.append(value)
        if headers:
            self.headers[(topic, partition, len(log) - 1)] = list(headers)
        return partition, len(log) - 1

    def high(self, tp: Partition) -> int:
        return len(self.records.get(tp, ()))


class MemoryProducer:
    """Sends wait until :meth:`acknowledge` (in order) or :meth:`reject` ends them."""

    def __init__(self, log: MemoryLog) -> None:
        self.log = log
        self.pending = 0
        self.refused_since: float | None = None  # an in-memory log refuses no one
        self.refusals = 0
        self.queued: list[tuple[str, bytes | None, bytes, Done, Rejected | None,
                                Headers | None]] = []
        self.started = self.closed = False

    def start(self) -> None:
        self.started = True

    def send(self, topic: str, key: bytes | None, value: bytes, done: Done,
             attempt: int = 0, rejected: Rejected | None = None,
             headers: Headers | None = None) -> None:
        self.pending += 1
        self.queued.append((topic, key, value, done, rejected, headers))

    def acknowledge(self, count: int | None = None) -> int:
        """The broker takes the next *count* sends (all by default); returns how many."""
        sends, self.queued = self.queued[:count], self.queued[len(self.queued[:count]):]
        for topic, key, value, done, _rejected, headers in sends:
            partition, offset = self.log.append(topic, key, value, headers)
            self.pending -= 1
            done(partition, offset)
        return len(sends)

    def reject(self, exc: BaseException) -> None:
        """The broker can never take the next send (too large, not allowed)."""
        _topic, _key, _value, done, rejected, _headers = self.queued.pop(0)
        self.pending -= 1
        if rejected is not None:
            rejected(exc)
        else:
            done(-1, -1)

    def close(self, timeout: float) -> None:
        self.closed = True


class MemoryConsumer:
    """One group member: fetches on :meth:`poll`, commits on :meth:`commit` and :meth:`stop`."""

    def __init__(self, log: MemoryLog, topics: list[str], deliver: Deliver, *,
                 buffer_size: int, max_unacked: int, unacked: Callable[[], int],
                 urgent: frozenset[str] = frozenset()) -> None:
        self.log, self.topics, self._deliver, self.urgent = log, topics, deliver, urgent
        self.max_unacked, self._unacked = max_unacked, unacked
        self.holding = Holding(buffer_size, urgent)
        self.unacked_peak = 0
        self.tracker = OffsetTracker()
        self.epochs: dict[Partition, int] = {}
        self.owned: set[Partition] = set()
        self.position: dict[Partition, int] = {}
        self.snapshot: dict[str, Any] = {"assigned": [], "lag": None, "in_flight": 0}
        self._stopped = threading.Event()
        self.started = False
        self.rebalanced: list[Callable[[], None]] = []

    @property
    def stopped(self) -> threading.Event:
        return self._stopped

    def start(self) -> None:
        self.started = True

    def ack(self, tp: Partition, offset: int, epoch: int) -> None:
        if self.epochs.get(tp) == epoch:  # an older epoch's record: it counts for nothing
            self.tracker.finish(tp, offset)

    def current(self, tp: Partition, epoch: int) -> bool:
        return self.epochs.get(tp) == epoch

    def committed(self, tp: Partition) -> int | None:
        return self.log.committed.get(tp)

    def stop(self) -> None:
        self.commit()
        self._stopped.set()

    # -- the group coordinator's side ----------------------------------------
    def assign(self, tps: Sequence[Partition]) -> None:
        """A rebalance gives this member *tps*: what it finished of the others is
        committed first; a partition it keeps keeps its position and epoch."""
        now = set(tps)
        self.commit(sorted(self.owned))  # before the rebalance, as the Kafka consumer does
        for tp in (self.owned - now) | (now - self.owned):
            self._new_epoch(tp)
        self.owned = now
        self.update_snapshot()
        for hook in self.rebalanced:
            hook()

    def lose(self, tps: Sequence[Partition]) -> None:
        """The group evicted this member (a session expiry): nothing is committed."""
        for tp in tps:
            self._new_epoch(tp)
        self.owned -= set(tps)
        self.update_snapshot()

    def _new_epoch(self, tp: Partition) -> None:
        self.epochs[tp] = self.epochs.get(tp, 0) + 1
        self.tracker.forget(tp)
        self.position[tp] = self.log.committed.get(tp, 0)  # fetched again from there

    def rooms(self) -> tuple[int, int]:
        unacked = self._unacked()
        self.unacked_peak = max(self.unacked_peak, unacked)
        return self.holding.rooms(self.max_unacked - unacked if self.max_unacked else None)

    def poll(self) -> int:
        """Fetch what there is room for, hand it to the scheduler; returns how many."""
        (room, urgent_room), records = self.rooms(), list[Record]()
        for tp in sorted(self.owned, key=lambda tp: (tp[0] not in self.urgent, tp)):
            limit = urgent_room if tp[0] in self.urgent else room
            while len(records) < limit and self.position[tp] < self.log.high(tp):
                offset = self.position[tp]
                self.position[tp] += 1
                if self.tracker.deliver(tp, offset):
                    value = self.log.records[tp][offset]
                    headers = tuple(self.log.headers.get((*tp, offset), ()))
                    records.append(Record(tp[0], tp[1], offset, value, self.epochs[tp],
                                          headers))
        if records:
            self.holding.fetched(r.topic for r in records)
            self._deliver(records)
        self.update_snapshot()
        return len(records)

    def commit(self, tps: Sequence[Partition] | None = None) -> None:
        for tp in self.tracker.partitions() if tps is None else tps:
            target = self.tracker.committable(tp)
            if target is not None:
                self.log.committed[tp] = target

    def tick(self) -> None:
        """What the Kafka consumer does every ``KAFKA_COMMIT_INTERVAL``: commit, then
        refresh the snapshot the heartbeat reads."""
        self.commit()
        self.update_snapshot()

    def update_snapshot(self) -> None:
        lag = {f"{t}:{p}": self.log.high((t, p)) - self.log.committed.get((t, p), 0)
               for t, p in sorted(self.owned)}
        self.snapshot = {"assigned": sorted(lag), "lag": sum(lag.values()),
                         "lag_by_partition": lag, "in_flight": self.tracker.in_flight(),
                         "paused": self.rooms()[0] <= 0}


class MemoryTransport:
    """:class:`~crawler.frontier.transport.Transport` over a :class:`MemoryLog`; timers run
    when the caller says (:meth:`run_timers`)."""

    def __init__(self, config: FrontierConfig, log: MemoryLog | None = None) -> None:
        self.config = config
        self.log = log or MemoryLog(config.partitions)
        self.timers: list[tuple[float, _Timer, Callable[..., Any], tuple[Any, ...]]] = []
        self.channels: Channels | None = None

    def connect(self, worker: str, deliver: Deliver, unacked: Callable[[], int]) -> Channels:
        cfg = self.config
        topics = [*cfg.band_topics, cfg.seeds_topic]
        consumer = MemoryConsumer(self.log, topics, deliver, buffer_size=cfg.buffer_size,
                                  max_unacked=cfg.max_unacked, unacked=unacked,
                                  urgent=cfg.urgent_topics)
        self.channels = Channels(MemoryProducer(self.log), consumer,
                                 (self.log.partitions, self.log.partitions),
                                 {f"{t}:{p}" for t in topics for p in range(self.log.partitions)})
        return self.channels

    def call_later(self, delay: float, func: Callable[..., Any], *args: Any) -> _Timer:
        timer = _Timer()
        self.timers.append((time.time() + delay, timer, func, args))
        return timer

    def run_timers(self) -> int:
        """Run the timers that are due and not cancelled; returns how many ran."""
        now = time.time()
        due = [t for t in self.timers if t[0] <= now and t[1].active()]
        self.timers = [t for t in self.timers if t[0] > now and t[1].active()]
        for _when, timer, func, args in due:
            timer.fired = True
            func(*args)
        return len(due)


class _Timer:
    def __init__(self) -> None:
        self._active = True
        self.fired = False

    def active(self) -> bool:
        return self._active and not self.fired

    def cancel(self) -> None:
        self._active = False


class MemoryBloom:
    """``FRONTIER_DEDUP_CLASS`` in memory: a set of fingerprints, of this process only."""

    def __init__(self, key: str) -> None:
        self.key = key
        self.seen: set[bytes] = set()
        self.opened = False

    @classmethod
    def from_crawler(cls, crawler: Crawler, client: Any, *, key: str) -> Self:
        return cls(key)

    async def open(self) -> None:
        self.opened = True

    async def check(self, fingerprints: Sequence[bytes]) -> list[bool]:
        return [fp in self.seen for fp in fingerprints]

    async def add(self, fingerprints: Sequence[bytes]) -> list[bool]:
        new = []
        for fp in fingerprints:
            new.append(fp not in self.seen)
            self.seen.add(fp)
        return new


class MemoryCrawlState:
    """Heartbeats, seed claims, operator control and the finished record of one crawl."""

    def __init__(self, crawl_id: str) -> None:
        self.crawl_id = crawl_id
        self.retry = RedisRetry("crawl state")
        self.beats: dict[str, WorkerState] = {}
        self.claims: dict[str, str] = {}
        self.command: str | None = None
        self.finished: Finished | None = None
        self.run_started: float | None = None
        self.expires_in: float | None = None

    async def beat(self, worker: str, *, idle: bool, assigned: list[str], lag: int | None,
                   info: dict[str, Any]) -> float:
        now = time.time()
        self.beats[worker] = WorkerState(worker, idle, list(assigned), lag, now, dict(info))
        return now

    async def workers(self) -> list[WorkerState]:
        return list(self.beats.values())

    async def control(self) -> str | None:
        return self.command

    async def leave(self, worker: str) -> None:
        self.beats.pop(worker, None)

    async def claim_seed(self, fingerprint: str, record: str, ttl: float = 86400.0) -> bool:
        return self.claims.setdefault(fingerprint, record) == record

    async def read_finished(self) -> Finished | None:
        return self.finished

    async def mark_finished(self, record: Finished) -> None:
        self.finished = record

    async def mark_started(self, now: float, closed: float) -> float:
        if self.run_started is None or self.run_started <= closed:
            self.run_started = now
        return self.run_started

    async def read_started(self) -> float | None:
        return self.run_started

    async def keep_state(self) -> None:
        self.expires_in = None

    async def expire_state(self, ttl: float) -> None:
        self.expires_in = ttl
