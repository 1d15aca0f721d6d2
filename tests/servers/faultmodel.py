"""The fault origin's model: what it does with each attempt at each page, as a pure function.

:func:`outcome` maps ``(faults, seed, host, path, attempt)`` to an :class:`Outcome`; the server
(:mod:`servers.faultorigin`) counts the attempts and serves the outcome.
"""

from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Faults:
    """Per-attempt fault probabilities; attempts after *max_failures* always succeed at once."""

    reset: float = 0.05
    too_many: float = 0.10  # 429 with Retry-After: 1 or 2
    unavailable: float = 0.10  # 503, half of them with Retry-After: 1
    slow: float = 0.10  # a 200 after slow_min .. slow_max seconds
    slow_min: float = 1.0
    slow_max: float = 3.0
    max_failures: int = 2
    doomed: float = 0.0  # share of pages (never a host's "/") that fault on every attempt

    @classmethod
    def parse(cls, spec: str) -> Faults:
        """``"none"`` or ``"reset=0.1,too_many=0.2,max_failures=3"`` (unnamed fields: defaults)."""
        if spec.strip() == "none":
            return cls(reset=0.0, too_many=0.0, unavailable=0.0, slow=0.0)
        types = {f.name: f.type for f in dataclasses.fields(cls)}
        values: dict[str, Any] = {}
        for item in filter(None, (part.strip() for part in spec.split(","))):
            name, _, value = item.partition("=")
            if name not in types:
                raise ValueError(f"unknown fault setting {name!r}; known: {sorted(types)}")
            values[name] = int(value) if types[name] == "int" else float(value)
        return cls(**values)

    def spec(self) -> str:
        return ",".join(f"{k}={v}" for k, v in dataclasses.asdict(self).items())


@dataclass(frozen=True)
class Outcome:
    """What the origin does with one request: *status* None means a connection reset."""

    status: int | None
    retry_after: int | None = None
    delay: float = 0.0

    @property
    def fault(self) -> str | None:
        if self.status is None:
            return "reset"
        if self.status in (429, 503):
            return str(self.status)
        return "slow" if self.delay else None


def is_doomed(faults: Faults, seed: int, host: str, path: str) -> bool:
    """Whether the page at *path* on *host* faults on every attempt (a host's ``/`` never)."""
    return path != "/" and random.Random(f"{seed}:{host}:{path}:doomed").random() < faults.doomed


def outcome(faults: Faults, seed: int, host: str, path: str, attempt: int) -> Outcome:
    """The deterministic outcome of *attempt* (1-based) at a page; the same inputs, the same."""
    doomed = is_doomed(faults, seed, host, path)
    if attempt > faults.max_failures and not doomed:
        return Outcome(200)
    rng = random.Random(f"{seed}:{host}:{path}:{attempt}")
    roll, extra, slow = rng.random(), rng.random(), rng.random()
    if doomed:  # one of the faults, in their proportions (a 503 when all are 0)
        roll *= faults.reset + faults.too_many + faults.unavailable
    delay = rng.uniform(faults.slow_min, faults.slow_max)
    for threshold, result in (
        (faults.reset, Outcome(None)),
        (faults.too_many, Outcome(429, 1 if extra < 0.5 else 2)),
        (faults.unavailable, Outcome(503, 1 if extra < 0.5 else None)),
    ):
        if roll < threshold:
            return result
        roll -= threshold
    if doomed:
        return Outcome(503)
    return Outcome(200, delay=delay if slow < faults.slow else 0.0)
