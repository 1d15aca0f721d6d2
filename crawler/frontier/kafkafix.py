"""Work-arounds for two bugs of kafka-python 3.0.12, applied before each poll
(:func:`before_poll`).

:func:`free_used_records`, for its fetcher: records it fetched for a partition that was
paused (KAFKA-7548, "retain fetched data for paused partitions") are parked and, once the
partition is resumed, put back only while the fetcher's slot for the records in line is
``None``. The slot keeps its last records object after they are used up (an empty but
not-``None`` object), so parked records are never put back, and the fetcher sends no new
fetch for a partition that has parked records: a paused and resumed partition is never
fetched again. The consumer loop pauses the lower-priority partitions while its buffer is
full and still fetches the urgent ones, which is when this happens (the crawl stalled with
records left in the resumed partitions). It empties the slot when its records are used
up, as the fetcher itself would have.

:func:`finish_pending_join`, for its group coordinator: a rejoin still in flight when a
poll returned could be left unfinished for good (its docstring).
"""

from __future__ import annotations

from typing import Any


def free_used_records(consumer: Any) -> None:
    """Let *consumer*'s fetcher put parked records back (see the module docstring)."""
    fetcher = getattr(consumer, "_fetcher", None)
    current = getattr(fetcher, "_next_partition_records", None)
    if current is not None and not current:  # used up (PartitionRecords.__bool__)
        fetcher._next_partition_records = None  # type: ignore[union-attr]


def finish_pending_join(consumer: Any) -> None:
    """Have *consumer*'s next poll collect a JoinGroup/SyncGroup round trip still in flight.

    kafka-python 3.0.12's poll joins only while ``need_rejoin()`` holds, and waits for the
    round trip no longer than its own timeout, leaving it in flight for the next poll. A
    leader rejoining because its topic metadata changed (a new topic, added partitions)
    needs the rejoin only while that metadata differs from what it assigned with; its
    assignment inside the round trip records the new metadata, so once a poll returned
    before the round trip ended no later poll looked at it: its result (the partitions)
    was never applied, heartbeats stayed off, the broker dropped the member, and the worker
    fetched nothing for ever. Java's consumer counts a pending join as a rejoin needed
    (``rejoinNeededOrPending``; KAFKA-9815 also requests the rejoin on a metadata change),
    and so does this: it asks for the rejoin while a round trip is in flight.
    """
    coordinator = getattr(consumer, "_coordinator", None)
    if getattr(coordinator, "_join_task", None) is not None:
        coordinator.request_rejoin()  # type: ignore[union-attr]


def before_poll(consumer: Any) -> None:
    """Both work-arounds, as the consumer loop applies them before each poll of *consumer*."""
    free_used_records(consumer)
    finish_pending_join(consumer)
