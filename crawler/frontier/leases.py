"""Pure bookkeeping of leases and offsets: no Kafka, no Scrapy, no I/O.

* :class:`OffsetTracker` knows, per partition, which delivered offsets are
  still unfinished and so how far the partition may be committed (the
  contiguous prefix of finished records, never past one still in flight).
* :class:`AckBarrier` holds a finished lease back until every operation
  (a follow-up request's dedup-and-produce, a dead-letter send) that began
  before it finished has completed, so a request is acknowledged only once
  everything it produced is durable.
"""

from __future__ import annotations

import heapq
import itertools
import time
from collections import deque
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any

Partition = tuple[str, int]


class _PartitionState:
    __slots__ = ("done", "in_flight", "next_offset")

    def __init__(self) -> None:
        self.in_flight: deque[int] = deque()
        self.done: set[int] = set()
        self.next_offset: int | None = None


class OffsetTracker:
    """In-flight offsets per partition and the offset that may be committed."""

    def __init__(self) -> None:
        self._parts: dict[Partition, _PartitionState] = {}

    def deliver(self, tp: Partition, offset: int) -> bool:
        """Track *offset* as in flight; False if it was delivered already (a re-fetch)."""
        state = self._parts.setdefault(tp, _PartitionState())
        if state.next_offset is not None and offset < state.next_offset:
            return False  # a re-fetch of a record already tracked
        state.in_flight.append(offset)
        state.next_offset = offset + 1
        return True

    def finish(self, tp: Partition, offset: int) -> None:
        state = self._parts.get(tp)
        if state is None or offset in state.done:
            return
        state.done.add(offset)
        while state.in_flight and state.in_flight[0] in state.done:
            state.done.discard(state.in_flight.popleft())

    def committable(self, tp: Partition) -> int | None:
        """The offset to commit for *tp*: the first unfinished one, or past the last."""
        state = self._parts.get(tp)
        if state is None or state.next_offset is None:
            return None
        return state.in_flight[0] if state.in_flight else state.next_offset

    def in_flight(self, tp: Partition | None = None) -> int:
        if tp is not None:
            state = self._parts.get(tp)
            return len(state.in_flight) if state else 0
        return sum(len(s.in_flight) for s in self._parts.values())

    def forget(self, tp: Partition) -> None:
        self._parts.pop(tp, None)

    def partitions(self) -> list[Partition]:
        return list(self._parts)


@dataclass(eq=False)
class Lease:
    """A frontier record being worked on by this worker."""

    topic: str
    partition: int
    offset: int
    epoch: int
    lease_id: int = 0
    started: float = field(default_factory=time.monotonic)
    active: int = 0  # request objects of this lease inside the engine
    parked: int = 0  # of those, waiting in the worker's buffer (a retry, a delay)
    scraping: bool = False  # its response reached the spider: new requests are children
    finished: bool = False
    acked: bool = False
    request: Any = None  # the request of a frontier record, for re-queueing
    outcome: str = ""  # what became of the record, for the ledger (crawler.ledger.outcomes)
    items: dict[str, int] | None = None  # the items its page gave, by what became of them
    details: dict[str, Any] | None = None  # its last try (status, attempts, proxy): the index

    @property
    def tp(self) -> Partition:
        return (self.topic, self.partition)


class AckBarrier:
    """Release finished leases only after the operations begun before them end."""

    def __init__(self, release: Callable[[Any], None]) -> None:
        self._release = release
        self._seq = itertools.count(1)
        self._last = 0
        self._pending: list[int] = []  # heap of unfinished operation numbers
        self._ended: set[int] = set()
        self._waiting: deque[tuple[int, Hashable]] = deque()

    def begin(self) -> int:
        """Start an operation; returns its number for :meth:`end`."""
        self._last = next(self._seq)
        heapq.heappush(self._pending, self._last)
        return self._last

    def end(self, op: int) -> None:
        self._ended.add(op)
        while self._pending and self._pending[0] in self._ended:
            self._ended.discard(heapq.heappop(self._pending))
        self._drain()

    def finish(self, item: Hashable) -> None:
        """*item* is done; release it once every operation begun so far has ended."""
        self._waiting.append((self._last, item))
        self._drain()

    def _drain(self) -> None:
        low = self._pending[0] if self._pending else self._last + 1
        while self._waiting and self._waiting[0][0] < low:
            self._release(self._waiting.popleft()[1])

    @property
    def pending_ops(self) -> int:
        return len(self._pending)

    @property
    def waiting(self) -> int:
        return len(self._waiting)


class LeaseRegistry:
    """Which request objects in the engine belong to which lease, and when leases end.

    A lease ends when its last request object leaves the engine (a retry or a
    redirect adds one, so it keeps the lease); it is then released through the
    :class:`AckBarrier` to *ack*.
    """

    def __init__(self, ack: Callable[[Lease], None],
                 ended: Callable[[Lease], None] | None = None) -> None:
        self._ack = ack
        self._ended = ended or (lambda _lease: None)
        self.barrier = AckBarrier(self._release)
        self._leases: dict[int, Lease] = {}
        self._by_request: dict[Any, Lease] = {}
        self._ids = itertools.count(1)

    def register(self, lease: Lease, request: Any) -> int:
        """Track a frontier record's lease; returns the id its request carries."""
        lease.lease_id = next(self._ids)
        lease.request = request
        self._leases[lease.lease_id] = lease
        return lease.lease_id

    def live(self, lease_id: Any) -> Lease | None:
        """The lease *lease_id* if its request may still be continued."""
        lease = self._leases.get(lease_id) if isinstance(lease_id, int) else None
        if lease is None or lease.scraping or lease.finished:
            return None
        return lease

    def of(self, request: Any) -> Lease | None:
        """The lease *request* (in the engine) belongs to."""
        return self._by_request.get(request)

    def enter(self, request: Any, lease: Lease) -> None:
        """*request* of *lease* is (about to be) in the engine."""
        lease.active += 1
        self._by_request[request] = lease

    def start(self, request: Any, lease: Lease) -> None:
        lease.started = time.monotonic()
        self.enter(request, lease)

    def park(self, request: Any, lease: Lease) -> None:
        """*request* of *lease* (a retry, a redirect, a delayed copy) waits in the buffer."""
        lease.parked += 1
        lease.started = time.monotonic()  # progress: the lease timeout starts again
        self.enter(request, lease)

    def unpark(self, lease: Lease) -> None:
        """A parked request of *lease* left the buffer for the engine."""
        lease.parked -= 1
        lease.started = time.monotonic()

    def drop(self, lease: Lease) -> None:
        """Forget a lease whose record this worker no longer owns."""
        self._leases.pop(lease.lease_id, None)

    def scraping(self, request: Any) -> None:
        """*request*'s response reached the spider: new requests are now children."""
        lease = self._by_request.get(request)
        if lease is not None:
            lease.scraping = True

    def left(self, request: Any) -> None:
        """The engine let go of *request*."""
        lease = self._by_request.pop(request, None)
        if lease is None:
            return
        lease.active -= 1
        if lease.active == 0 and not lease.finished:
            self.finish(lease)

    def finish(self, lease: Lease) -> None:
        if lease.finished:
            return
        lease.finished = True
        self._ended(lease)
        self.barrier.finish(lease)

    def stuck(self, older_than: float) -> list[Lease]:
        """Unfinished leases without progress for more than *older_than* seconds: none
        of their requests waits in the buffer, and none left it since then."""
        limit = time.monotonic() - older_than
        return [x for x in self._leases.values()
                if x.active and not x.finished and not x.parked and x.started < limit]

    def _release(self, lease: Lease) -> None:
        lease.acked = True
        self._leases.pop(lease.lease_id, None)
        self._ack(lease)

    @property
    def in_engine(self) -> int:
        return len(self._by_request)

    @property
    def busy(self) -> bool:
        return bool(self._by_request or self.barrier.waiting or self.barrier.pending_ops)
