"""Sender and ConsumerLoop without a broker: batched acks, pausing a full buffer."""

from __future__ import annotations

import queue
import threading
import time
from typing import Any

from kafka import TopicPartition
from kafka.future import Future

from crawler.frontier.consumer import ConsumerLoop
from crawler.frontier.producer import Sender


class FakeProducer:
    """Hands out kafka-python futures; the test resolves them from its own thread."""

    def __init__(self) -> None:
        self.futures: queue.SimpleQueue[Future] = queue.SimpleQueue()

    def send(self, topic: str, key: bytes | None, value: bytes) -> Future:
        future = Future()
        self.futures.put(future)
        return future

    def flush(self, timeout: float) -> None:
        pass

    def close(self, timeout: float) -> None:
        pass


class Metadata:
    def __init__(self, offset: int) -> None:
        self.partition, self.offset = 0, offset


class Reactor:
    """call_from_thread: queue the call; run() runs the queued calls on this thread."""

    def __init__(self) -> None:
        self.calls: queue.SimpleQueue[tuple[Any, tuple[Any, ...]]] = queue.SimpleQueue()
        self.count = 0

    def call(self, func: Any, *args: Any) -> None:
        self.count += 1
        self.calls.put((func, args))

    def run(self) -> None:
        while not self.calls.empty():
            func, args = self.calls.get()
            func(*args)

    def run_until(self, condition: Any) -> None:
        """Run calls until *condition()* (the sender thread may still attach callbacks)."""
        deadline = time.monotonic() + 30  # a generous ceiling: the machine may be busy
        while not condition() and time.monotonic() < deadline:
            self.run()
            time.sleep(0.005)
        assert condition()


def test_acks_arrive_in_batches_in_order_and_each_once() -> None:
    producer, reactor, done = FakeProducer(), Reactor(), []
    sender = Sender(producer, call_from_thread=reactor.call,  # type: ignore[arg-type]
                    call_later=lambda *a: None, backoff=1, backoff_max=1)
    sender.start()
    for i in range(200):
        sender.send("t", None, b"v", lambda p, o, i=i: done.append((i, o)))
    assert sender.pending == 200
    futures = [producer.futures.get(timeout=5) for _ in range(200)]

    def broker() -> None:  # the producer's I/O thread
        for offset, future in enumerate(futures):
            future.success(Metadata(offset))

    thread = threading.Thread(target=broker)
    thread.start()
    thread.join()
    reactor.run_until(lambda: len(done) == 200)
    assert done == [(i, i) for i in range(200)]
    assert sender.pending == 0
    assert reactor.count < 200  # one cross-thread call for many acks
    sender.close(1)


def test_a_failed_send_is_retried_and_acked_once() -> None:
    producer, reactor, done = FakeProducer(), Reactor(), []
    later: list[tuple[Any, ...]] = []
    sender = Sender(producer, call_from_thread=reactor.call,  # type: ignore[arg-type]
                    call_later=lambda delay, *a: later.append(a), backoff=1, backoff_max=1)
    sender.start()
    sender.send("t", b"k", b"v", lambda p, o: done.append(o))
    producer.futures.get(timeout=5).failure(RuntimeError("broker down"))
    reactor.run_until(lambda: sender.failures == 1)
    assert sender.failures == 1 and done == [] and len(later) == 1
    func, *args = later.pop()
    func(*args)  # the retry
    producer.futures.get(timeout=5).success(Metadata(7))
    reactor.run_until(lambda: done)
    assert done == [7] and sender.pending == 0
    sender.close(1)


class FakeConsumer:
    def __init__(self, topics: tuple[str, ...] = ("t",)) -> None:
        self.paused: list[bool] = []
        self.by_topic: dict[str, bool] = {}
        self.polls: list[int] = []
        self.topics = topics

    def assignment(self) -> set[TopicPartition]:
        return {TopicPartition(t, 0) for t in self.topics}

    def pause(self, *parts: Any) -> None:
        self.paused.append(True)
        self.by_topic.update((tp.topic, True) for tp in parts)

    def resume(self, *parts: Any) -> None:
        self.paused.append(False)
        self.by_topic.update((tp.topic, False) for tp in parts)

    def poll(self, timeout_ms: int, max_records: int) -> dict[Any, Any]:
        self.polls.append(max_records)
        return {}


def _full_loop() -> tuple[ConsumerLoop, FakeConsumer]:
    consumer = FakeConsumer()
    loop = ConsumerLoop(consumer, ["t"], buffer_size=8,  # type: ignore[arg-type]
                        commit_interval=1.0, deliver=lambda records: None,
                        call_from_thread=lambda f, *a: f(*a))
    loop.holding.fetched(["t"] * 8)  # the buffer is full
    return loop, consumer


def _banded_loop() -> tuple[ConsumerLoop, FakeConsumer]:
    consumer = FakeConsumer(("t", "t.1", "seeds"))
    loop = ConsumerLoop(consumer, ["t", "t.1", "seeds"], buffer_size=8,  # type: ignore[arg-type]
                        commit_interval=1.0, deliver=lambda records: None,
                        call_from_thread=lambda f, *a: f(*a), urgent=frozenset({"t.1", "seeds"}))
    return loop, consumer


def test_a_full_buffer_still_fetches_the_urgent_topics_into_a_room_of_their_own() -> None:
    loop, consumer = _banded_loop()
    loop.holding.fetched(["t"] * 8 + ["t.1"] * 2)  # the buffer is full, 2 urgent records over
    loop._poll_once()
    assert consumer.by_topic == {"t": True, "t.1": False, "seeds": False}
    assert consumer.polls == [6]
    loop.holding.fetched(["seeds"] * 6)  # both rooms are full
    loop._poll_once()
    assert consumer.by_topic == {"t": True, "t.1": True, "seeds": True}


def test_a_backlog_of_urgent_records_alone_holds_one_buffer() -> None:
    """Seeds filling the buffer get no second room: that room is for overtaking the
    lowest band (CI: 487 seed records held with a buffer of 256)."""
    loop, consumer = _banded_loop()
    loop.holding.fetched(["seeds"] * 5 + ["t.1"] * 3)
    loop._poll_once()
    assert consumer.by_topic == {"t": True, "t.1": True, "seeds": True}
    loop.holding.took("seeds")
    loop.holding.took("t.1")
    loop._poll_once()
    assert consumer.by_topic == {"t": False, "t.1": False, "seeds": False}
    assert consumer.polls[-1] == 2


def test_a_full_buffer_that_empties_soon_is_not_paused() -> None:
    loop, consumer = _full_loop()
    timer = threading.Timer(0.02, lambda: setattr(loop.holding, "taken", 5))  # reactor takes 5
    timer.start()
    loop._poll_once()
    timer.join()
    assert consumer.paused == [] and consumer.polls == [5]


def test_a_buffer_that_stays_full_pauses_fetching() -> None:
    loop, consumer = _full_loop()
    loop._poll_once()
    assert consumer.paused == [True] and consumer.polls == [1]
    loop.holding.taken = 8
    loop._poll_once()
    assert consumer.paused == [True, False] and consumer.polls == [1, 8]
