"""What the scheduler needs of a log of records: a consumer, a producer, and how to get them.

The scheduler talks to these Protocols only. :class:`~crawler.frontier.clients.KafkaTransport`
is the real one (a :class:`~crawler.frontier.consumer.ConsumerLoop` and a
:class:`~crawler.frontier.producer.Sender` in their own threads);
:class:`~crawler.frontier.memory.MemoryTransport` keeps the records in memory, for tests
that drive leases, acknowledgements and rebalances without a broker.

Every call below is made on the reactor thread, and every callback given to them runs there.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from crawler.frontier.consumer import Record
from crawler.frontier.holding import Holding
from crawler.frontier.leases import Partition

Deliver = Callable[[list[Record]], None]  # records fetched, handed to the scheduler
Done = Callable[[int, int], None]  # (partition, offset) of a record the broker acknowledged
Rejected = Callable[[BaseException], None]  # the broker can never take the record
Headers = list[tuple[str, bytes]]  # a record's Kafka headers


class Waitable(Protocol):
    def wait(self, timeout: float | None = None) -> bool: ...


class Consumer(Protocol):
    """Fetches records of this worker's partitions and commits the finished prefix."""

    holding: Holding  # records handed to the scheduler, and those taken back
    unacked_peak: int  # the most unacknowledged work seen
    snapshot: dict[str, Any]  # assigned, lag, lag_by_partition, in_flight, paused
    rebalanced: list[Callable[[], None]]  # called (on the reactor) after each rebalance

    @property
    def stopped(self) -> Waitable:
        """Set once the consumer has committed and closed."""
        ...

    def start(self) -> None: ...
    def ack(self, tp: Partition, offset: int, epoch: int) -> None: ...
    def current(self, tp: Partition, epoch: int) -> bool: ...
    def committed(self, tp: Partition) -> int | None: ...
    def stop(self) -> None: ...


class Producer(Protocol):
    """Produces records, each retried until the broker has it (or can never take it)."""

    pending: int  # sends not yet acknowledged

    @property
    def refused_since(self) -> float | None:
        """Since when the broker refuses this worker's rights (ACLs, login); None: it does not."""

    @property
    def refusals(self) -> int:
        """Stalls by such a refusal."""

    def start(self) -> None: ...

    def send(self, topic: str, key: bytes | None, value: bytes, done: Done,
             attempt: int = 0, rejected: Rejected | None = None,
             headers: Headers | None = None) -> None: ...

    def close(self, timeout: float) -> None: ...


@dataclass(frozen=True)
class Channels:
    """The connected consumer and producer of one worker, and the crawl's partitions."""

    producer: Producer
    consumer: Consumer
    partitions: tuple[int, int]  # of the requests topic and of the seeds topic
    all_partitions: set[str]  # "<topic>:<partition>" of both


class Transport(Protocol):
    def connect(self, worker: str, deliver: Deliver, unacked: Callable[[], int]) -> Channels:
        """Create the crawl's topics if needed, then the producer and the consumer
        (not started). *unacked()* is the worker's unacknowledged work (read by the
        consumer to pause fetching). May block: the scheduler calls it in a thread."""
        ...

    def call_later(self, delay: float, func: Callable[..., Any], *args: Any) -> Any:
        """Run *func* on the reactor thread after *delay* seconds; returns a call with
        ``active()`` and ``cancel()``."""
        ...
