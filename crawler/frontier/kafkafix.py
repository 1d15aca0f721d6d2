"""A work-around for kafka-python 3.0's fetcher: records it fetched for a partition that was
paused (KAFKA-7548, "retain fetched data for paused partitions") are parked and, once the
partition is resumed, put back only while the fetcher's slot for the records in line is
``None``. The slot keeps its last records object after they are used up (an empty but
not-``None`` object), so parked records are never put back, and the fetcher sends no new
fetch for a partition that has parked records: a paused and resumed partition is never
fetched again. The consumer loop pauses the lower-priority partitions while its buffer is
full and still fetches the urgent ones, which is when this happens (the crawl stalled with
records left in the resumed partitions).

:func:`free_used_records` empties the slot when its records are used up, as the fetcher
itself would have, before each poll.
"""

from __future__ import annotations

from typing import Any


def free_used_records(consumer: Any) -> None:
    """Let *consumer*'s fetcher put parked records back (see the module docstring)."""
    fetcher = getattr(consumer, "_fetcher", None)
    current = getattr(fetcher, "_next_partition_records", None)
    if current is not None and not current:  # used up (PartitionRecords.__bool__)
        fetcher._next_partition_records = None  # type: ignore[union-attr]
