"""A per-host gap that follows the server's latency (Heritrix's "delay factor"): pure logic.

With ``HOSTLIMIT_DELAY_FACTOR`` *f* > 0, a host's next request waits at least *f* times its
recent download latency (an exponential average of Scrapy's ``download_latency`` over its
answers at this worker, weight :data:`WEIGHT` to the newest), capped at
``HOSTLIMIT_DELAY_MAX``: a server that slows down under the crawl is given more room at once,
one that answers fast costs nothing. The gap joins the host's others (robots.txt
``Crawl-delay``, ``DOWNLOAD_DELAY``) in the rate limiter's cluster-wide bucket: the largest
wins.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from scrapy.settings import BaseSettings

from crawler.config import readers as config

WEIGHT = 0.3  # of the newest latency in the average
MAX_HOSTS = 100_000  # hosts remembered at once (the oldest go first)


@dataclass(slots=True)
class LatencyDelays:
    factor: float  # 0: off
    cap: float
    _latency: dict[str, float] = field(default_factory=dict)

    @classmethod
    def from_settings(cls, s: BaseSettings) -> LatencyDelays:
        return cls(factor=config.get_float(s, "HOSTLIMIT_DELAY_FACTOR", minimum=0),
                   cap=config.get_float(s, "HOSTLIMIT_DELAY_MAX", minimum=0))

    def observe(self, host: str, seconds: object) -> None:
        """One answer of *host* took *seconds* (``download_latency``; ignored if not a number)."""
        if self.factor <= 0 or not isinstance(seconds, (int, float)) or seconds < 0:
            return
        old = self._latency.pop(host, None)  # re-inserted: the newest last
        self._latency[host] = seconds if old is None else old + WEIGHT * (seconds - old)
        if len(self._latency) > MAX_HOSTS:
            del self._latency[next(iter(self._latency))]

    def gap(self, host: str) -> float:
        latency = self._latency.get(host)
        return 0.0 if latency is None else min(self.cap, self.factor * latency)
