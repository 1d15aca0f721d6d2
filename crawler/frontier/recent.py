"""The fingerprints of the records a worker consumed lately: a window with no false
positives, to drop a second copy of a request that two workers produced at once.

Two workers that discover the same URL within the same few milliseconds both find it
absent from the Bloom filter and both produce it (the dedup order is check, produce,
add: see :mod:`crawler.frontier.outbox`). Keyed by URL, both copies land in the same partition,
so the worker that consumes the second copy has just consumed the first. Dropping the
second copy loses nothing: the first has a lower offset in the same partition, so no
commit passes it until it is finished, and if its worker dies both copies come back.

A copy is dropped only if the first copy came from the same partition in the same
assignment epoch: after a rebalance the partition is read again from its committed
offset, the first copy is delivered again and the window learns its new epoch. Requests
with ``dont_filter`` (a re-queued expired lease among them) are never dropped.

With ``RECRAWL_AFTER > 0`` a copy is dropped only if the first copy was consumed in the same
recrawl generation (as this worker estimates it, *recrawl*): a URL produced again because
it is due must reach the engine, however long the worker has been running.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable


class RecentFingerprints:
    """Two generations of at most *size* fingerprints each (``size = 0``: remember none),
    each with the source (partition and epoch) it was consumed from."""

    def __init__(self, size: int, *, recrawl: Callable[[], int] | None = None) -> None:
        if size < 0:
            raise ValueError(f"size must be >= 0, got {size}")
        self.size = size
        self.recrawl = recrawl  # the recrawl generation it is now (RECRAWL_AFTER > 0)
        self._current: dict[bytes, Hashable] = {}
        self._previous: dict[bytes, Hashable] = {}

    def seen(self, fingerprint: bytes, source: Hashable) -> bool:
        """Whether *fingerprint* was consumed from *source* within the window; if not,
        remember that it now was."""
        if self.recrawl is not None:
            source = (source, self.recrawl())
        known = self._current.get(fingerprint)
        if known is None:
            known = self._previous.get(fingerprint)
        if known is not None and known == source:
            return True
        if self.size:
            if len(self._current) >= self.size:
                self._previous, self._current = self._current, {}
            self._current[fingerprint] = source
        return False

    def __len__(self) -> int:
        return len(self._current) + len(self._previous)
