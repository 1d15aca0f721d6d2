"""A consumer evicted from its group (session expiry) that gets the same partitions back.

kafka-python 3 reacts to an eviction (the broker answers a heartbeat with
``UnknownMemberIdError`` after the session timeout) by resetting the member's
generation; the next poll calls the listener's ``on_partitions_lost``, drops the
assignment without ``on_partitions_assigned([])``, joins again and gets the same
partitions back, fetched again from the committed offset. The records this worker
still had in flight come back: they must be taken as a new epoch, not as raced copies
of themselves, or acknowledging the copies would commit past the originals.
"""

from __future__ import annotations

import pytest
from kafka import KafkaProducer, TopicPartition

from crawler.config import defaults
from crawler.connections import clients as connection
from crawler.frontier.consumer import ConsumerLoop, Record
from crawler.frontier.recent import RecentFingerprints
from tests.helpers import wait_until

RECORDS = 5


def _produce(bootstrap: str, topic: str) -> None:
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all")
    for i in range(RECORDS):
        producer.send(topic, value=f"https://example.com/{i}".encode(), partition=0)
    producer.flush()
    producer.close()


def _consumer(bootstrap: str, group: str, name: str) -> object:
    return connection.kafka_consumer(
        bootstrap, group_id=group, connect_timeout=5, client_id=name,
        session_timeout_ms=defaults.KAFKA_SESSION_TIMEOUT_MS,
        heartbeat_interval_ms=defaults.KAFKA_HEARTBEAT_INTERVAL_MS,
        max_poll_interval_ms=defaults.KAFKA_MAX_POLL_INTERVAL_MS)


def _committed(bootstrap: str, group: str, topic: str) -> int | None:
    probe = _consumer(bootstrap, group, "probe")
    try:
        return probe.committed(TopicPartition(topic, 0))  # type: ignore[attr-defined,no-any-return]
    finally:
        probe.close(autocommit=False)  # type: ignore[attr-defined]


class _Worker:
    """The scheduler's handling of records, reduced to what decides acknowledgements:
    a record whose URL this worker consumed from the same partition in the same epoch
    is a raced copy, dropped and acknowledged (``KafkaScheduler._raced_copy``); any
    other record stays in flight (a slow page)."""

    def __init__(self) -> None:
        self.loop: ConsumerLoop | None = None
        self.recent = RecentFingerprints(defaults.KAFKA_RECENT_WINDOW)
        self.got: list[Record] = []
        self.copies_acked = 0

    def deliver(self, records: list[Record]) -> None:
        assert self.loop is not None
        for rec in records:
            self.got.append(rec)
            if self.recent.seen(rec.value, (rec.topic, rec.partition, rec.epoch)):
                self.copies_acked += 1
                self.loop.ack((rec.topic, rec.partition), rec.offset, rec.epoch)


@pytest.fixture
def topic(kafka_bootstrap: str, crawl_id: str) -> str:
    name = f"{crawl_id}.requests"
    connection.ensure_topics(kafka_bootstrap, {name: 1}, connect_timeout=5)
    return name


def _evict_by_the_broker(bootstrap: str, group: str, consumer: object) -> None:
    """Remove *consumer* from *group* on the broker's side (a LeaveGroup on its behalf):
    the broker forgets it as when its session expires, and answers its next heartbeat
    with ``UnknownMemberIdError``."""
    from kafka import KafkaAdminClient
    from kafka.admin import MemberToRemove

    member = consumer.group_metadata().member_id  # type: ignore[attr-defined]
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        result = admin.remove_group_members(group, [MemberToRemove(member_id=member)])
        assert all(error.errno == 0 for error in result.values()), result
    finally:
        admin.close()


def _evict_in_the_client(consumer: object) -> None:
    """What kafka-python does when a heartbeat is answered with UnknownMemberIdError (the
    broker expired the session): the member falls out of its generation."""
    consumer._coordinator.reset_generation()  # type: ignore[attr-defined]


@pytest.mark.parametrize("evict", ["broker", "client"])
def test_lost_membership_never_commits_past_records_in_flight(
        kafka_bootstrap, crawl_id, topic, evict):
    group = f"{crawl_id}.workers"
    _produce(kafka_bootstrap, topic)
    worker = _Worker()
    consumer = _consumer(kafka_bootstrap, group, "evicted")
    loop = ConsumerLoop(consumer, [topic], buffer_size=defaults.KAFKA_BUFFER_SIZE,  # type: ignore[arg-type]
                        commit_interval=defaults.KAFKA_COMMIT_INTERVAL,
                        deliver=worker.deliver, call_from_thread=lambda f, *a: f(*a))
    worker.loop = loop
    loop.start()
    try:
        wait_until(lambda: len(worker.got) == RECORDS, 60, "the records delivered")
        originals = list(worker.got)
        if evict == "broker":
            _evict_by_the_broker(kafka_bootstrap, group, consumer)
        else:
            _evict_in_the_client(consumer)
        wait_until(lambda: len(worker.got) >= 2 * RECORDS, 90,
                   "the same records fetched again after the rejoin")
    finally:
        loop.stop()
        assert loop.stopped.wait(30)
    again = worker.got[RECORDS:]
    assert sorted(r.offset for r in again) == list(range(RECORDS))
    # the second delivery is a new epoch: the originals' acknowledgements no longer count
    assert all(not loop.current((r.topic, r.partition), r.epoch) for r in originals)
    assert worker.copies_acked == 0, "records in flight were dropped as copies of themselves"
    # nothing was finished, so nothing may be committed (the loop commits when it stops)
    assert _committed(kafka_bootstrap, group, topic) in (None, 0)
