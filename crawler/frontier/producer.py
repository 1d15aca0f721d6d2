"""The producer side of the frontier, kept off the reactor thread: :class:`Sender`.

A failed send is retried with a doubling back-off, for as long as it takes, unless the
error can never succeed on a retry (:data:`PERMANENT`): the record is too large for the
producer or the broker, or the broker calls it invalid. Those go to the send's *rejected*
callback once, and the send ends. Every other kafka-python error (``KafkaTimeoutError``,
``KafkaConnectionError``, ``NotLeaderForPartitionError``, ``UnknownTopicOrPartitionError``,
...) is transient: a broker outage, a leader election, a topic being created.

A refusal by the broker's ACLs or its login (:data:`REFUSED`) is retried the same way: an
operator revoked a right and will restore it, and nothing may be dead-lettered or
acknowledged meanwhile. It stalls the sends, their parents stay unacknowledged, and
:attr:`Sender.refused_since` is set (the stat ``kafka/refused``, the alert
``kafka_refused``) until a send succeeds again.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from typing import Any

from kafka import KafkaProducer
from kafka import errors as kafka_errors

from crawler.connections.retry import backoff

logger = logging.getLogger(__name__)
CallFromThread = Callable[..., Any]
Rejected = Callable[[BaseException], None]
REFUSAL_EVERY = 60.0  # seconds between the lines of one refusal stall

#: kafka-python errors that a retry of the same record cannot fix
PERMANENT: tuple[type[BaseException], ...] = (
    kafka_errors.MessageSizeTooLargeError,  # larger than max_request_size or the broker's limit
    kafka_errors.RecordListTooLargeError,
    kafka_errors.InvalidRecordError,
    kafka_errors.InvalidTopicError,
)

#: the broker's ACLs or its login refuse this client: an operator's change, retried
REFUSED: tuple[type[BaseException], ...] = (
    kafka_errors.TopicAuthorizationFailedError,
    kafka_errors.ClusterAuthorizationFailedError,
    kafka_errors.TransactionalIdAuthorizationFailedError,
    kafka_errors.GroupAuthorizationFailedError,
    kafka_errors.SaslAuthenticationFailedError,
)


class RefusalStall:
    """Calls of one kind the broker refuses (its ACLs, its login): when the stall began, how
    many stalls there were, and whether its line is due (when it starts, then once a
    minute: every call in flight fails alike, so not a line each)."""

    def __init__(self) -> None:
        self.since: float | None = None  # monotonic
        self.count = 0
        self._said = 0.0

    def refused(self) -> float | None:
        """Note a refusal; the seconds refused so far when a line is due, else None."""
        now = time.monotonic()
        if self.since is None:
            self.since, self._said = now, now - REFUSAL_EVERY
            self.count += 1
        if now - self._said < REFUSAL_EVERY:
            return None
        self._said = now
        return now - self.since

    def ended(self) -> float | None:
        """A call went through: how long the stall lasted, None if there was none."""
        if self.since is None:
            return None
        took, self.since = time.monotonic() - self.since, None
        return took


def permanent(exc: BaseException) -> bool:
    """Whether a send that failed with *exc* would fail again however often it is tried."""
    return isinstance(exc, PERMANENT)


def refused(exc: BaseException) -> bool:
    """Whether *exc* is the broker refusing this client's rights or login (retried)."""
    return isinstance(exc, REFUSED)


class Sender:
    """Produce records with ``acks=all``, retrying each until the broker has it.

    The broker's acknowledgements arrive on the producer's I/O thread; they are handed to
    the reactor in batches, one cross-thread call for all those that arrived since the
    last, each *done* in the order the acknowledgements came.
    """

    def __init__(
        self, producer: KafkaProducer, *, call_from_thread: CallFromThread,
        call_later: Callable[..., Any], backoff: float, backoff_max: float,
    ) -> None:
        self.producer = producer
        self._call = call_from_thread
        self._later = call_later
        self.backoff = backoff
        self.backoff_max = backoff_max
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="kafka-sender", daemon=True)
        self._lock = threading.Lock()
        self._acks: list[tuple[Callable[[int, int], None], int, int]] = []
        self.pending = 0
        self.failures = 0
        self.rejected = 0
        self.refusal = RefusalStall()  # the broker refuses this worker's rights

    def start(self) -> None:
        self._thread.start()

    def send(
        self, topic: str, key: bytes | None, value: bytes,
        done: Callable[[int, int], None], attempt: int = 0, rejected: Rejected | None = None,
        headers: list[tuple[str, bytes]] | None = None,
    ) -> None:
        """Send from the reactor thread; *done(partition, offset)* runs there once acked,
        or *rejected(error)* if the error is :func:`permanent` (without one, *done(-1, -1)*
        after an error log: the send is over either way)."""
        if attempt == 0:
            self.pending += 1
        self._queue.put((topic, key, value, done, attempt, rejected, headers))

    def _run(self) -> None:
        while True:
            job = self._queue.get()
            if job is None:
                return
            topic, key, value, done = job[:4]
            extra = {"headers": job[6]} if job[6] else {}  # signed seeds only
            try:
                future = self.producer.send(topic, key=key, value=value, **extra)
            except Exception as exc:
                self._call(self._failed, job, exc)
                continue
            future.add_callback(self._on_ack, done)
            future.add_errback(lambda exc, j=job: self._call(self._failed, j, exc))

    def _on_ack(self, done: Callable[[int, int], None], metadata: Any) -> None:
        """On the producer's I/O thread: queue the ack; wake the reactor if it is the first."""
        with self._lock:
            self._acks.append((done, metadata.partition, metadata.offset))
            first = len(self._acks) == 1
        if first:
            self._call(self._acked)

    def _acked(self) -> None:
        with self._lock:
            acks, self._acks = self._acks, []
        self.pending -= len(acks)
        if (took := self.refusal.ended()) is not None:
            logger.info("The broker takes this worker's sends again after %.1f s refused", took)
        for done, partition, offset in acks:
            done(partition, offset)

    def _failed(self, job: tuple[Any, ...], exc: BaseException) -> None:
        topic, key, value, done, attempt, rejected, headers = job
        self.failures += 1
        if permanent(exc):
            self._reject(topic, len(value), done, rejected, exc)
            return
        delay = backoff(attempt, self.backoff, self.backoff_max)
        if refused(exc):
            self._refused(topic, attempt, delay, exc)
        else:
            logger.warning("Send to %s failed (attempt %d, retrying in %.1fs): %s",
                           topic, attempt + 1, delay, exc)
        self._later(delay, self.send, topic, key, value, done, attempt + 1, rejected, headers)

    def _refused(self, topic: str, attempt: int, delay: float, exc: BaseException) -> None:
        """The broker refused this client's rights: an ERROR when the stall starts and once
        a minute while it lasts."""
        if (lasted := self.refusal.refused()) is None:
            return
        logger.error("The broker refuses this worker's sends to %s for %.0f s (%s): retrying "
                     "until its ACLs or login allow them again, next in %.1f s; the sends wait "
                     "and their requests are not acknowledged", topic, lasted,
                     type(exc).__name__, delay)

    @property
    def refused_since(self) -> float | None:
        return self.refusal.since

    @property
    def refusals(self) -> int:
        return self.refusal.count

    def _reject(self, topic: str, size: int, done: Callable[[int, int], None],
                rejected: Rejected | None, exc: BaseException) -> None:
        self.pending -= 1
        self.rejected += 1
        if rejected is not None:
            rejected(exc)
            return
        logger.error("Send of %d bytes to %s failed for good (not retried): %s", size, topic, exc)
        done(-1, -1)

    def close(self, timeout: float) -> None:
        self._queue.put(None)
        self._thread.join(timeout)
        try:
            self.producer.flush(timeout=timeout)
            self.producer.close(timeout=timeout)
        except Exception as exc:
            logger.warning("Closing the Kafka producer: %s", exc)
