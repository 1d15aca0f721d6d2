"""Kafka I/O of the frontier, kept off the reactor thread.

:class:`ConsumerLoop` owns a ``KafkaConsumer`` in its own thread: it fills the
scheduler's bounded buffer, pauses fetching while the buffer is full, applies
acknowledgements and commits, per partition, only the finished prefix.
:class:`Sender` (:mod:`crawler.frontier.producer`) owns the producer side: every send is retried
until the broker acknowledges it (``acks=all``); an outage stalls, it never drops.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kafka import KafkaConsumer, OffsetAndMetadata, TopicPartition
from kafka.consumer.subscription_state import ConsumerRebalanceListener

from crawler.frontier import startup
from crawler.frontier.holding import Holding
from crawler.frontier.kafkafix import before_poll
from crawler.frontier.leases import OffsetTracker, Partition
from crawler.frontier.producer import CallFromThread, RefusalStall, refused

__all__ = ["ConsumerLoop", "Record"]

logger = logging.getLogger(__name__)
# While the buffer is full, the consumer thread looks for room for up to ROOM_WAIT seconds,
# after ROOM_CHECK, then twice as long each time up to ROOM_CHECK_MAX, before it pauses
# fetching and polls: a paused poll waits its whole timeout, so a buffer the reactor empties
# in a few milliseconds would otherwise wait for it (and for a fetch after resuming).
ROOM_WAIT = 0.2
ROOM_CHECK = 0.001
ROOM_CHECK_MAX = 0.025


@dataclass(frozen=True, slots=True)
class Record:
    topic: str
    partition: int
    offset: int
    value: bytes
    epoch: int
    headers: tuple[tuple[str, bytes], ...] = ()  # the record's Kafka headers


class _Listener(ConsumerRebalanceListener):  # type: ignore[misc]
    def __init__(self, loop: ConsumerLoop) -> None:
        self.loop = loop

    def on_partitions_revoked(self, revoked: Any) -> None:
        self.loop.revoked([(tp.topic, tp.partition) for tp in revoked])

    def on_partitions_assigned(self, assigned: Any) -> None:
        self.loop.assigned([(tp.topic, tp.partition) for tp in assigned])

    def on_partitions_lost(self, lost: Any) -> None:
        self.loop.lost([(tp.topic, tp.partition) for tp in lost])


class ConsumerLoop:
    """The consumer thread: fetch into the buffer, apply acks, commit."""

    def __init__(
        self, consumer: KafkaConsumer, topics: list[str], *, buffer_size: int,
        commit_interval: float, deliver: Callable[[list[Record]], None],
        call_from_thread: CallFromThread, max_unacked: int = 0,
        unacked: Callable[[], int] | None = None, urgent: frozenset[str] = frozenset(),
    ) -> None:
        self.consumer = consumer
        self.topics = topics
        self.urgent = urgent  # fetched into a room of their own while the buffer is full
        self.holding = Holding(buffer_size, urgent)  # records held, and the room left
        self.commit_interval = commit_interval
        self._deliver = deliver
        self._call = call_from_thread
        self.tracker = OffsetTracker()
        self.epochs: dict[Partition, int] = {}  # read by the reactor thread
        self.max_unacked = max_unacked  # 0: no bound
        self._unacked = unacked or (lambda: 0)  # read here, kept by the reactor
        self.unacked_peak = 0  # the most unacknowledged work seen (sampled at each poll)
        self._over = False
        self.refetched = 0  # records fetched again in the same epoch, not handed out again
        self._acks: queue.SimpleQueue[tuple[Partition, int, int]] = queue.SimpleQueue()
        self._committed: dict[Partition, int] = {}
        self.commit_refusal = RefusalStall()  # the ACLs refuse commits
        self._dirty = False
        self._paused: tuple[bool, bool] | None = (False, False)  # (the others, urgent)
        self._owned: set[Partition] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="kafka-consumer", daemon=True)
        self.snapshot: dict[str, Any] = {"assigned": [], "lag": None, "in_flight": 0}
        self.stopped = threading.Event()
        self.rebalanced: list[Callable[[], None]] = []  # run on the reactor after each one

    # -- reactor side -------------------------------------------------------
    def start(self) -> None:
        self.consumer.subscribe(self.topics, listener=_Listener(self))
        self._thread.start()

    def ack(self, tp: Partition, offset: int, epoch: int) -> None:
        self._acks.put((tp, offset, epoch))

    def current(self, tp: Partition, epoch: int) -> bool:
        """Whether a record of *tp* fetched at *epoch* still belongs to this worker."""
        return self.epochs.get(tp) == epoch

    def committed(self, tp: Partition) -> int | None:
        """The offset last committed for *tp* by this worker (records below it are never
        delivered again)."""
        return self._committed.get(tp)

    def stop(self) -> None:
        self._stop.set()

    # -- consumer thread ----------------------------------------------------
    def revoked(self, tps: list[Partition]) -> None:
        """Before a rebalance: commit what is finished of the partitions we may lose.

        kafka-python 3 calls this on its network thread, where a blocking commit is
        refused, so the commit is queued (it goes out before the JoinGroup request).
        If it fails, the finished records are delivered again: processed twice,
        stored once.
        """
        self._apply_acks()
        offsets = self._offsets(tps)
        if offsets:
            self.consumer.commit_async(offsets, callback=self._committed_async)
        logger.info("Partitions revoked: %s", _names(tps))

    def _committed_async(self, offsets: dict[TopicPartition, Any], result: Any) -> None:
        if isinstance(result, BaseException):
            logger.info("Pre-rebalance commit failed (records will be redelivered): %s", result)
            return
        for tp, meta in offsets.items():
            self._committed[(tp.topic, tp.partition)] = meta.offset

    def lost(self, tps: list[Partition]) -> None:
        """The group evicted this worker (a session expiry): nothing can be committed.

        kafka-python then drops the assignment without calling :meth:`assigned` and,
        once this worker has joined again, may give it the same partitions back, fetched
        again from the committed offset. Every record of *tps* handed out so far belongs
        to an old epoch from now on: its acknowledgement no longer counts and its second
        delivery is a new record, not a copy of one in flight.
        """
        for tp in tps:
            self._new_epoch(tp)
        self._owned -= set(tps)
        self._paused = None
        logger.warning("Group membership lost (session expired?); partitions %s will be "
                       "fetched again from their committed offsets", _names(tps))

    def _new_epoch(self, tp: Partition) -> None:
        self.epochs[tp] = self.epochs.get(tp, 0) + 1  # buffered records become stale
        self.tracker.forget(tp)
        self._committed.pop(tp, None)

    def assigned(self, tps: list[Partition]) -> None:
        """After a rebalance: forget lost partitions; kept ones keep their position."""
        now = set(tps)
        for tp in (self._owned - now) | (now - self._owned):
            self._new_epoch(tp)
        self._owned = now
        self._paused = None  # the pause state of the new assignment is unknown
        logger.info("Partitions assigned: %s", _names(tps))
        if tps:
            startup.mark("join")
        for hook in self.rebalanced:
            self._call(hook)

    def _run(self) -> None:
        last_commit = time.monotonic()
        try:
            while not self._stop.is_set():
                self._apply_acks()
                if time.monotonic() - last_commit >= self.commit_interval:
                    self._commit(None)
                    self._update_snapshot()
                    last_commit = time.monotonic()
                self._poll_once()
        except Exception:
            logger.exception("The Kafka consumer thread failed")
        finally:
            self._shutdown()

    def _rooms(self) -> tuple[int, int]:
        """Records that may be fetched, of any topic and of the urgent ones
        (:class:`~crawler.frontier.holding.Holding`), with the unacknowledged work kept
        within its bound."""
        cap = None
        if self.max_unacked:
            unacked = self._unacked()
            self.unacked_peak = max(self.unacked_peak, unacked)
            self._note_pressure(unacked >= self.max_unacked, unacked)
            cap = self.max_unacked - unacked
        return self.holding.rooms(cap)

    def _note_pressure(self, over: bool, unacked: int) -> None:
        if over != self._over:
            self._over = over
            if over:
                logger.warning("Fetching paused: %d requests and sends unacknowledged "
                               "(KAFKA_MAX_UNACKED=%d)", unacked, self.max_unacked)
            else:
                logger.info("Fetching resumed: %d unacknowledged", unacked)

    def _wait_for_room(self) -> tuple[int, int]:
        """Room in the buffer; while it is full, wait up to :data:`ROOM_WAIT` for some
        (the reactor often takes the records within milliseconds) before pausing."""
        rooms, pause = self._rooms(), ROOM_CHECK
        deadline = time.monotonic() + ROOM_WAIT
        while rooms[0] <= 0 and time.monotonic() < deadline and not self._stop.is_set():
            self._stop.wait(pause)
            rooms, pause = self._rooms(), min(pause * 2, ROOM_CHECK_MAX)
        return rooms

    def _poll_once(self) -> None:
        room, urgent_room = self._wait_for_room()
        self._set_paused((room <= 0, urgent_room <= 0))
        # else a resumed partition is never fetched again, or a rejoin may never end
        before_poll(self.consumer)
        try:
            batches = self.consumer.poll(timeout_ms=200,
                                         max_records=max(room if room > 0 else urgent_room, 1))
        except Exception as exc:  # broker unreachable: kafka-python reconnects
            logger.warning("Kafka poll failed (will retry): %s", exc)
            time.sleep(1.0)
            return
        records = []
        for tp, items in batches.items():
            key = (tp.topic, tp.partition)
            epoch = self.epochs.get(key, 0)
            for rec in items:
                if not self.tracker.deliver(key, rec.offset):
                    self.refetched += 1  # already handed out in this epoch: never twice
                    continue
                records.append(Record(tp.topic, tp.partition, rec.offset, rec.value, epoch,
                                      tuple(rec.headers) if rec.headers else ()))
        if records:
            self.holding.fetched(r.topic for r in records)
            self._call(self._deliver, records)

    def _set_paused(self, pause: tuple[bool, bool]) -> None:
        """Pause or resume the non-urgent partitions (``pause[0]``) and the urgent ones
        (the higher priority bands and the seeds, ``pause[1]``)."""
        if pause == self._paused:
            return
        parts = list(self.consumer.assignment())
        for urgent, paused in ((False, pause[0]), (True, pause[1])):
            group = [tp for tp in parts if (tp.topic in self.urgent) == urgent]
            if group:
                (self.consumer.pause if paused else self.consumer.resume)(*group)
        self._paused = pause

    def _apply_acks(self) -> None:
        while True:
            try:
                tp, offset, epoch = self._acks.get_nowait()
            except queue.Empty:
                return
            if self.epochs.get(tp) == epoch:
                self.tracker.finish(tp, offset)
                self._dirty = True

    def _offsets(self, tps: list[Partition]) -> dict[TopicPartition, OffsetAndMetadata]:
        offsets = {}
        for tp in tps:
            target = self.tracker.committable(tp)
            if target is not None and target != self._committed.get(tp):
                offsets[TopicPartition(*tp)] = OffsetAndMetadata(target, "", -1)
        return offsets

    def _commit(self, only: list[Partition] | None) -> None:
        offsets = self._offsets(only if only is not None else self.tracker.partitions())
        if not offsets:
            return
        try:
            self.consumer.commit(offsets)
        except Exception as exc:  # a rebalance or an outage: the records come back
            if refused(exc):
                self._commit_refused(exc)
            else:
                logger.warning("Offset commit failed (records will be redelivered): %s", exc)
            return
        if (took := self.commit_refusal.ended()) is not None:
            logger.info("Offset commits succeed again after %.1f s refused", took)
        for tp, meta in offsets.items():
            self._committed[(tp.topic, tp.partition)] = meta.offset

    def _commit_refused(self, exc: BaseException) -> None:
        """The group's or a topic's ACL refuses the commit: retried at every interval, an
        ERROR when it starts and once a minute (nothing is lost: the offsets wait)."""
        if (lasted := self.commit_refusal.refused()) is not None:
            logger.error("The broker refuses this worker's offset commits for %.0f s (%s): "
                         "retrying every %.0f s until its ACLs allow them again", lasted,
                         type(exc).__name__, self.commit_interval)

    def _partition_lag(self, tp: Partition) -> int | None:
        """Records of *tp* not yet committed: fetch high-water mark minus committed offset."""
        high = self.consumer.highwater(TopicPartition(*tp))
        done = self._committed.get(tp)
        if done is None and self.tracker.in_flight(tp) == 0:
            done = self.tracker.committable(tp)
            if done is None:
                done = self.consumer.position(TopicPartition(*tp))
        return None if high is None or done is None else max(high - done, 0)

    def _update_snapshot(self) -> None:
        assigned = sorted((tp.topic, tp.partition) for tp in self.consumer.assignment())
        by_partition = {f"{t}:{p}": self._partition_lag((t, p)) for t, p in assigned}
        known = [v for v in by_partition.values() if v is not None]
        self.snapshot = {
            "assigned": [f"{t}:{p}" for t, p in assigned],
            "lag": sum(known) if len(known) == len(by_partition) else None,
            "lag_by_partition": by_partition,
            "in_flight": self.tracker.in_flight(),
            "paused": bool(self._paused and self._paused[0]),
            "commit_refused": self.commit_refusal.since is not None,
        }

    def _shutdown(self) -> None:
        try:
            self._apply_acks()
            self._commit(None)
            self.consumer.close(autocommit=False)
        except Exception as exc:
            logger.warning("Closing the Kafka consumer: %s", exc)
        self.stopped.set()


def _names(tps: list[Partition]) -> str:
    return ", ".join(f"{t}[{p}]" for t, p in sorted(tps)) or "none"
