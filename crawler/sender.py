"""The producer side of the frontier, kept off the reactor thread: :class:`Sender`."""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from typing import Any

from kafka import KafkaProducer

logger = logging.getLogger(__name__)
CallFromThread = Callable[..., Any]


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

    def start(self) -> None:
        self._thread.start()

    def send(
        self, topic: str, key: bytes | None, value: bytes,
        done: Callable[[int, int], None], attempt: int = 0,
    ) -> None:
        """Send from the reactor thread; *done(partition, offset)* runs there once acked."""
        if attempt == 0:
            self.pending += 1
        self._queue.put((topic, key, value, done, attempt))

    def _run(self) -> None:
        while True:
            job = self._queue.get()
            if job is None:
                return
            topic, key, value, done, _attempt = job
            try:
                future = self.producer.send(topic, key=key, value=value)
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
        for done, partition, offset in acks:
            done(partition, offset)

    def _failed(self, job: tuple[Any, ...], exc: BaseException) -> None:
        topic, key, value, done, attempt = job
        self.failures += 1
        delay = min(self.backoff * 2**attempt, self.backoff_max)
        logger.warning("Send to %s failed (attempt %d, retrying in %.1fs): %s",
                       topic, attempt + 1, delay, exc)
        self._later(delay, self.send, topic, key, value, done, attempt + 1)

    def close(self, timeout: float) -> None:
        self._queue.put(None)
        self._thread.join(timeout)
        try:
            self.producer.flush(timeout=timeout)
            self.producer.close(timeout=timeout)
        except Exception as exc:
            logger.warning("Closing the Kafka producer: %s", exc)
