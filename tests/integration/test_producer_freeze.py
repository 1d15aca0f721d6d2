"""A broker silent for longer than the producer's delivery timeout: once it answers again,
every send completes, the ones begun before the freeze, during it, and after the first
expiry, and each record is in the log.

kafka-python 3.0.12's idempotent producer never recovers from an expired batch that it had
already sent (its producer id is reset to -1 and never asked for again: no batch is sent or
expired after that), so a :class:`~crawler.frontier.producer.Sender` retrying on it waits for ever.
The broker is a real one, frozen with SIGSTOP: it holds its connections and answers nothing.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from helpers import wait_until
from kafka_log import read_topic

from crawler.connections import clients as connection
from crawler.frontier.producer import Sender
from crawler.localstack.stack import Stack

# The default KAFKA_DELIVERY_TIMEOUT (120 s) would keep the broker frozen for over two
# minutes; the expiry and its aftermath are the same at any value. 12 s: a little above the
# least the producer accepts with CONNECT_TIMEOUT 5 s (linger plus a 10 s request timeout).
DELIVERY_TIMEOUT = 12.0
BEFORE, DURING, AFTER_EXPIRY = 20, 20, 20  # sends begun at each stage


class _Loop:
    """A stand-in reactor: one thread runs the Sender's callbacks in order."""

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[tuple[Callable[..., Any], tuple[Any, ...]] | None] = (
            queue.SimpleQueue())
        self._thread = threading.Thread(target=self._run, name="test-reactor", daemon=True)
        self._thread.start()

    def call(self, func: Callable[..., Any], *args: Any) -> None:
        self._jobs.put((func, args))

    def later(self, delay: float, func: Callable[..., Any], *args: Any) -> None:
        timer = threading.Timer(delay, self.call, (func, *args))
        timer.daemon = True
        timer.start()

    def _run(self) -> None:
        while (job := self._jobs.get()) is not None:
            job[0](*job[1])

    def stop(self) -> None:
        self._jobs.put(None)
        self._thread.join(10)


@pytest.fixture
def loop() -> Iterator[_Loop]:
    running = _Loop()
    yield running
    running.stop()


def _send(sender: Sender, loop: _Loop, topic: str, values: list[str],
          acked: dict[str, tuple[int, int]]) -> None:
    def done_for(value: str) -> Callable[[int, int], None]:
        return lambda partition, offset: acked.setdefault(value, (partition, offset))

    for value in values:
        loop.call(sender.send, topic, value.encode(), value.encode(), done_for(value))


def test_sends_complete_after_a_freeze_longer_than_the_delivery_timeout(
        stack: Stack, kafka_bootstrap: str, crawl_id: str, loop: _Loop,
        caplog: pytest.LogCaptureFixture) -> None:
    topic = f"{crawl_id}.freeze"
    connection.ensure_topics(kafka_bootstrap, {topic: 2}, connect_timeout=5.0)
    producer = connection.kafka_producer(kafka_bootstrap, connect_timeout=5.0, linger_ms=5,
                                         client_id="freeze-test",
                                         delivery_timeout=DELIVERY_TIMEOUT)
    sender = Sender(producer, call_from_thread=loop.call, call_later=loop.later,
                    backoff=0.5, backoff_max=2.0)
    sender.start()
    caplog.set_level(logging.WARNING, logger="crawler.frontier.producer")
    acked: dict[str, tuple[int, int]] = {}
    values = [f"http://freeze.test/{n}" for n in range(BEFORE + DURING + AFTER_EXPIRY)]
    try:
        _send(sender, loop, topic, values[:BEFORE], acked)
        wait_until(lambda: len(acked) == BEFORE, 120, "the sends before the freeze to be acked")
        stack.freeze_service("kafka")
        try:
            _send(sender, loop, topic, values[BEFORE:BEFORE + DURING], acked)
            # the freeze outlasts the delivery timeout: a send expired and is being retried
            wait_until(lambda: "Expiring" in caplog.text, 300, "a send to expire")
            _send(sender, loop, topic, values[BEFORE + DURING:], acked)
        finally:
            stack.thaw_service("kafka")
        wait_until(lambda: len(acked) == len(values), 300,
                   f"every send to be acked after the thaw ({len(values) - len(acked)} "
                   f"of {len(values)} still waiting)")
    finally:
        sender.close(timeout=10)
    assert sender.failures > 0 and sender.rejected == 0
    in_log = {(e.partition, e.offset): e.url for e in read_topic(kafka_bootstrap, topic)}
    for value, place in acked.items():
        assert in_log.get(place) == value, f"{value} acked at {place}: {in_log.get(place)}"
    assert set(in_log.values()) == set(values)
