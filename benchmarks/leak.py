"""A leak on purpose, to show that the soak's bounds catch one (``benchmarks.soak
--leak-bytes``): the extension keeps ``LEAK_BYTES_PER_PAGE`` bytes for every response, for
ever. It is never part of a real soak."""

from __future__ import annotations

import os
from typing import Any, Self

from scrapy import signals
from scrapy.exceptions import NotConfigured


class Leak:
    def __init__(self, size: int) -> None:
        self.size = size
        self.kept: list[bytes] = []

    @classmethod
    def from_crawler(cls, crawler: Any) -> Self:
        size = crawler.settings.getint("LEAK_BYTES_PER_PAGE")
        if size <= 0:
            raise NotConfigured
        leak = cls(size)
        crawler.signals.connect(leak.response_received, signals.response_received)
        return leak

    def response_received(self, **_: Any) -> None:
        self.kept.append(os.urandom(self.size))  # random: every byte is a touched page
