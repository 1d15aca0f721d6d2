"""The ledger in memory: what :class:`~crawler.ledger.recorder.LedgerRecorder` keeps in
Redis, for one process (unit tests, a frontier started without Redis)."""

from __future__ import annotations

from collections import Counter

from crawler.ledger.outcomes import AGAIN

Partition = tuple[str, int]


class MemoryTally:
    """Counts each record's fields once per ``(topic, partition, offset)``, as Redis does."""

    def __init__(self) -> None:
        self.counters: Counter[str] = Counter()
        self._seen: set[tuple[str, int, int]] = set()

    def record(self, tp: Partition, offset: int, fields: dict[str, int]) -> None:
        key = (tp[0], tp[1], offset)
        prefix = AGAIN if key in self._seen else ""
        self._seen.add(key)
        for name, n in fields.items():
            self.counters[prefix + name] += n

    def count(self, name: str, n: int = 1) -> None:
        self.counters[name] += n
