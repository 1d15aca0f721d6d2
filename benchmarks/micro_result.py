"""What the microbenchmarks measure and report: sizes, measurements, targets."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Sizes:
    """How much each microbenchmark does; :data:`FULL` for the report, :data:`QUICK` for
    the smoke test."""

    repeats: int  # repetitions of each measurement (the median is reported)
    fp_capacity: int  # the false-positive check: fill this many, probe as many others
    dedup_fingerprints: int  # fingerprints checked and added per batch size and repetition
    dedup_capacities: tuple[int, ...]
    batch_sizes: tuple[int, ...]
    coroutines: int  # concurrent check+add loops of the one worker process
    frontier_requests: int  # requests produced and consumed per repetition
    codec_calls: int  # calls timed per repetition of encode or decode
    memory_capacities: tuple[int, ...] = (100_000_000, 10_000_000)  # Bloom memory per URL


FULL = Sizes(repeats=3, fp_capacity=200_000, dedup_fingerprints=200_000,
             dedup_capacities=(10_000_000, 100_000_000), batch_sizes=(11, 100, 500),
             coroutines=4, frontier_requests=100_000, codec_calls=20_000,
             memory_capacities=(1_000_000_000, 100_000_000, 10_000_000))  # 1e9: 1.9 GB
QUICK = Sizes(repeats=1, fp_capacity=20_000, dedup_fingerprints=5_000,
              dedup_capacities=(10_000_000, 100_000_000), batch_sizes=(11, 100, 500),
              coroutines=4, frontier_requests=2_000, codec_calls=500)


@dataclass(frozen=True)
class Target:
    """A bound a measurement must meet: ``value <= bound`` or ``value >= bound``."""

    op: str  # "<=" or ">="
    bound: float

    def met(self, value: float) -> bool:
        return value <= self.bound if self.op == "<=" else value >= self.bound

    def __str__(self) -> str:
        return f"{self.op} {self.bound:,g}"


def at_most(bound: float) -> Target:
    return Target("<=", bound)


def at_least(bound: float) -> Target:
    return Target(">=", bound)


@dataclass(frozen=True)
class Measurement:
    """One reported number: the median of its repetitions."""

    section: str
    name: str
    value: float
    unit: str
    target: Target | None = None
    detail: str = ""  # how it was measured, the spread of the repetitions

    @property
    def verdict(self) -> str:
        if self.target is None:
            return ""
        return "PASS" if self.target.met(self.value) else "MISS"


def fmt(value: float) -> str:
    """*value* for a table: thousands separated when large, four significant digits else."""
    return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.4g}"


def median_of(
    section: str, name: str, values: Sequence[float], unit: str,
    target: Target | None = None, detail: str = "",
) -> Measurement:
    """The median of *values* as a measurement; the detail notes the range of several."""
    spread = f"{len(values)} runs, {fmt(min(values))} to {fmt(max(values))}"
    note = "; ".join(x for x in (detail, spread if len(values) > 1 else "") if x)
    return Measurement(section, name, statistics.median(values), unit, target, note)
