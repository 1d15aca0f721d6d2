"""The consumer loop against a real Kafka-protocol broker: commits and rebalances."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from kafka import KafkaProducer, TopicPartition

from crawler.connections import clients as connection
from crawler.frontier.consumer import ConsumerLoop, Record


def _consumer_loop(
    bootstrap: str, group: str, topic: str, name: str, fetch_max_bytes: int | None = None
) -> tuple[ConsumerLoop, list[Record]]:
    got: list[Record] = []

    def deliver(records: list[Record]) -> None:
        got.extend(records)  # list.extend is atomic under the GIL

    consumer = connection.kafka_consumer(
        bootstrap, group_id=group, connect_timeout=5, client_id=name,
        session_timeout_ms=6000, heartbeat_interval_ms=1000, max_poll_interval_ms=60000,
        fetch_max_bytes=fetch_max_bytes)
    loop = ConsumerLoop(consumer, [topic], buffer_size=1000, commit_interval=0.2,
                        deliver=deliver, call_from_thread=lambda f, *a: f(*a))
    return loop, got


def _produce(bootstrap: str, topic: str, partitions: int, per_partition: int) -> None:
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all")
    for p in range(partitions):
        for i in range(per_partition):
            producer.send(topic, value=f"{p}-{i}".encode(), partition=p)
    producer.flush()
    producer.close()


def _committed(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int | None]:
    consumer = connection.kafka_consumer(
        bootstrap, group_id=group, connect_timeout=5, client_id="probe",
        session_timeout_ms=6000, heartbeat_interval_ms=1000, max_poll_interval_ms=60000)
    try:
        return {p: consumer.committed(TopicPartition(topic, p)) for p in range(partitions)}
    finally:
        consumer.close(autocommit=False)


def _wait(predicate: Callable[[], bool], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    raise AssertionError("condition not reached in time")


def _commit_round_after_acks(loop: ConsumerLoop) -> None:
    """Wait until the consumer thread has taken every ack given so far and then run a commit
    round: it applies acks, commits, then replaces its snapshot, one after the other, so a new
    snapshot seen after the ack queue was empty follows a commit that had them all."""
    _wait(lambda: loop._acks.empty())
    seen = loop.snapshot
    _wait(lambda: loop.snapshot is not seen)


@pytest.fixture
def topic(kafka_bootstrap: str, crawl_id: str) -> str:
    name = f"{crawl_id}.requests"
    connection.ensure_topics(kafka_bootstrap, {name: 2}, connect_timeout=5)
    return name


def test_commits_stop_at_the_first_unfinished_record(kafka_bootstrap, crawl_id, topic):
    group = f"{crawl_id}.g"
    _produce(kafka_bootstrap, topic, 1, 10)
    loop, got = _consumer_loop(kafka_bootstrap, group, topic, "a")
    loop.start()
    try:
        _wait(lambda: len(got) == 10)
        for rec in got:
            if rec.offset != 3:
                loop.ack((rec.topic, rec.partition), rec.offset, rec.epoch)
        _commit_round_after_acks(loop)
        assert _committed(kafka_bootstrap, group, topic, 1)[0] == 3
        rec3 = next(r for r in got if r.offset == 3)
        loop.ack((rec3.topic, rec3.partition), 3, rec3.epoch)
        _wait(lambda: _committed(kafka_bootstrap, group, topic, 1)[0] == 10)
    finally:
        loop.stop()
        loop.stopped.wait(15)


def test_rebalance_redelivers_unfinished_records_and_ignores_stale_acks(
    kafka_bootstrap, crawl_id, topic
):
    group = f"{crawl_id}.g"
    _produce(kafka_bootstrap, topic, 2, 20)
    loop_a, got_a = _consumer_loop(kafka_bootstrap, group, topic, "a")
    loop_a.start()
    try:
        _wait(lambda: len(got_a) == 40)
        # A finishes the first 5 records of each partition, the rest stay in flight.
        held = []
        for rec in list(got_a):
            if rec.offset < 5:
                loop_a.ack((rec.topic, rec.partition), rec.offset, rec.epoch)
            else:
                held.append(rec)
        _wait(lambda: _committed(kafka_bootstrap, group, topic, 2) == {0: 5, 1: 5})
        loop_b, got_b = _consumer_loop(kafka_bootstrap, group, topic, "b")
        loop_b.start()
        try:
            _wait(lambda: len(loop_b.consumer.assignment()) == 1, timeout=40)
            moved = next(iter(loop_b.consumer.assignment())).partition
            # records of the moved partition are redelivered to B, from the committed offset
            _wait(lambda: {r.offset for r in got_b} == set(range(5, 20)))
            # A's late acks: those of the partition it lost are stale and commit nothing;
            # those of the partition it kept (its position was kept) still count.
            for rec in held:
                loop_a.ack((rec.topic, rec.partition), rec.offset, rec.epoch)
            kept = 1 - moved
            _wait(lambda: _committed(kafka_bootstrap, group, topic, 2)[kept] == 20)
            assert _committed(kafka_bootstrap, group, topic, 2)[moved] == 5, (
                "a stale ack of a revoked partition was committed")
            assert all(r.partition == kept for r in got_a[40:]), "A got a lost partition back"
            for rec in list(got_b):
                loop_b.ack((rec.topic, rec.partition), rec.offset, rec.epoch)
            _wait(lambda: _committed(kafka_bootstrap, group, topic, 2) == {0: 20, 1: 20})
        finally:
            loop_b.stop()
            loop_b.stopped.wait(15)
    finally:
        loop_a.stop()
        loop_a.stopped.wait(15)


def test_a_full_buffer_pauses_fetching(kafka_bootstrap, crawl_id, topic):
    group = f"{crawl_id}.g"
    _produce(kafka_bootstrap, topic, 1, 30)
    loop, got = _consumer_loop(kafka_bootstrap, group, topic, "a")
    loop.holding.buffer_size = 8
    loop.start()
    try:
        _wait(lambda: len(got) >= 8)
        # A snapshot saying "paused" is taken after the round that paused and then polled.
        _wait(lambda: loop.snapshot.get("paused") is True)  # none before the first round
        assert len(got) == 8, "fetched past the buffer bound"
        loop.holding.taken += 8
        _wait(lambda: len(got) >= 16)
    finally:
        loop.stop()
        loop.stopped.wait(15)


def test_a_record_larger_than_a_fetch_still_comes(kafka_bootstrap, crawl_id, topic):
    """``KAFKA_FETCH_MAX_BYTES`` (1 MiB) bounds a fetch, not a record: the producer sends
    records up to 1 MiB (``MAX_REQUEST_SIZE``), and one larger than the bound must come
    alone rather than stall its partition (Kafka's fetch v3, KIP-74)."""
    sizes = [100, 900_000, 200, 300_000, 50]
    producer = connection.kafka_producer(kafka_bootstrap, connect_timeout=5, linger_ms=0,
                                         client_id="big")
    for n, size in enumerate(sizes):
        producer.send(topic, value=bytes([65 + n]) * size, partition=0).get(timeout=10)
    producer.close()
    loop, got = _consumer_loop(kafka_bootstrap, f"{crawl_id}-big", topic, "a",
                               fetch_max_bytes=64 * 1024)
    loop.start()
    try:
        _wait(lambda: len(got) == len(sizes))
        assert [len(record.value) for record in got] == sizes
    finally:
        loop.stop()
        loop.stopped.wait(10)
