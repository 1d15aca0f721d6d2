"""The frontier records a worker holds, and the room it has to fetch more.

A record counts from when the consumer hands it to the scheduler until its lease ends (or
it is dropped as stale), wherever it waits meanwhile: the local buffer, the engine, or
parked in the buffer for a retry's back-off or a rate limiter's slot. Fetching pauses at
``KAFKA_BUFFER_SIZE`` records, so a slow host's backlog stays in the broker.

The urgent topics (the priority bands above the lowest, and the seeds) have a room of their
own: they are fetched while the buffer is full of the lowest band, up to
``KAFKA_BUFFER_SIZE`` urgent records. A worker deep in a backlog still takes a new
high-priority record within one poll; a backlog of seeds or of high-priority requests alone
holds at most one buffer's worth, and the two together at most two.

:class:`Holding` is written from two threads, each count by one of them: the consumer
thread counts what it hands out, the reactor what it takes back.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


@dataclass
class Holding:
    buffer_size: int
    urgent: frozenset[str] = frozenset()  # topics with a room of their own
    handed: int = 0  # records handed to the scheduler (by the consumer thread)
    taken: int = 0  # of those, records whose lease ended or was dropped (by the reactor)
    urgent_handed: int = 0
    urgent_taken: int = 0

    @property
    def held(self) -> int:
        return self.handed - self.taken

    @property
    def urgent_held(self) -> int:
        return self.urgent_handed - self.urgent_taken

    def fetched(self, topics: Iterable[str]) -> None:
        """Records of *topics* (one topic per record) were handed to the scheduler."""
        names = list(topics)
        self.handed += len(names)
        self.urgent_handed += sum(1 for name in names if name in self.urgent)

    def took(self, topic: str) -> None:
        """A record of *topic* no longer takes room: its lease ended, or it was dropped."""
        self.taken += 1
        if topic in self.urgent:
            self.urgent_taken += 1

    def rooms(self, cap: int | None = None) -> tuple[int, int]:
        """Records that may be fetched now: (of any topic, of the urgent topics), each at
        most *cap* (the room left under ``KAFKA_MAX_UNACKED``; None: no bound)."""
        room = self.buffer_size - self.held
        urgent = self.buffer_size - self.urgent_held if self.urgent else room
        if cap is not None:
            room, urgent = min(room, cap), min(urgent, cap)
        return room, urgent
