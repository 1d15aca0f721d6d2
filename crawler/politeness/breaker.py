"""A per-host circuit breaker: pure logic, no I/O.

A host whose requests fail ``HOSTBREAKER_FAILURES`` times in a row without an HTTP answer
(refused, reset, timed out, DNS: the network error categories of the retry middleware) is
*open*: its requests wait ``HOSTBREAKER_PAUSE`` seconds. Then one request goes as a probe
(*half-open*) while the others keep waiting. Any HTTP answer, whatever its status, closes
the breaker (the host is up; what its statuses deserve is the retry middleware's and the rate
limiter's business). A probe that fails opens it again for twice the pause, up to
``HOSTBREAKER_PAUSE_MAX``. A probe never answered (dropped on the way) is replaced by another
after one pause. A host open for ``HOSTBREAKER_GIVE_UP`` seconds is taken for gone: its
requests are dropped (the ledger's ``dropped/host_down``) rather than held for ever, so the
crawl can end. Each worker keeps its own breakers: a dead host gets at most one probe per
worker per pause.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from scrapy.settings import BaseSettings

from crawler.config import readers as config


@dataclass(frozen=True, slots=True)
class BreakerConfig:
    """The ``HOSTBREAKER_*`` settings, checked once."""

    failures: int  # network failures in a row that open a host's breaker; 0: no breaker
    pause: float  # seconds an open breaker waits before its first probe
    pause_max: float  # cap of the pause, which doubles at each failed probe
    give_up: float  # seconds open after which a host's requests are dropped; 0: never

    @classmethod
    def from_settings(cls, s: BaseSettings) -> BreakerConfig:
        pause = config.get_float(s, "HOSTBREAKER_PAUSE", minimum=0, exclusive_min=True)
        return cls(failures=config.get_int(s, "HOSTBREAKER_FAILURES", minimum=0),
                   pause=pause,
                   pause_max=max(pause, config.get_float(s, "HOSTBREAKER_PAUSE_MAX", minimum=0)),
                   give_up=config.get_float(s, "HOSTBREAKER_GIVE_UP", minimum=0))


@dataclass(slots=True)
class _Host:
    failures: int = 0
    pause: float = 0.0
    until: float = 0.0  # while open: when its next probe may go
    probe: float | None = None  # when the probe in flight went
    opened: float = 0.0  # when it opened


@dataclass(slots=True)
class Breakers:
    """The breakers of one worker's hosts; a host with no failure costs one dict lookup."""

    cfg: BreakerConfig
    clock: Callable[[], float] = time.monotonic
    _hosts: dict[str, _Host] = field(default_factory=dict)

    def _open(self, host: str) -> _Host | None:
        """*host*'s state while its breaker is open, else None."""
        state = self._hosts.get(host)
        return state if state is not None and state.failures >= self.cfg.failures else None

    def wait(self, host: str) -> float:
        """Seconds *host*'s next request must wait; 0: it goes (a probe, if the host is open)."""
        state = self._open(host)
        if state is None:
            return 0.0
        now = self.clock()
        if state.probe is not None and now - state.probe < state.pause:
            return state.pause - (now - state.probe)  # one probe at a time
        if now < state.until:
            return state.until - now
        state.probe = now
        return 0.0

    def is_open(self, host: str) -> bool:
        return self._open(host) is not None

    def failed(self, host: str) -> bool:
        """A request to *host* failed without an answer; True when that opened its breaker
        (or a probe's failure opened it again, for a longer pause)."""
        if self.cfg.failures <= 0:
            return False
        state = self._hosts.setdefault(host, _Host())
        state.failures += 1
        if state.failures < self.cfg.failures:
            return False
        probed = state.probe is not None
        if state.failures > self.cfg.failures and not probed:
            return False  # a request sent before the breaker opened
        now = self.clock()
        state.pause = min(self.cfg.pause_max, state.pause * 2 if probed else self.cfg.pause)
        state.until, state.probe = now + state.pause, None
        if not probed:
            state.opened = now
        return True

    def gone(self, host: str) -> bool:
        """Whether *host* has been open for ``HOSTBREAKER_GIVE_UP`` seconds."""
        state = self._open(host)
        return (self.cfg.give_up > 0 and state is not None
                and self.clock() - state.opened >= self.cfg.give_up)

    def answered(self, host: str) -> bool:
        """*host* answered; True when that closed an open breaker."""
        opened = self.is_open(host)
        self._hosts.pop(host, None)
        return opened
