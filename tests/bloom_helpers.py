"""Helpers shared by the tests of the Redis Bloom filter."""

from __future__ import annotations

import math
import random
from collections.abc import Awaitable, Callable, Sequence

BATCH = 500


def fingerprints(count: int, seed: int) -> list[bytes]:
    """*count* random 20-byte fingerprints, the same for the same *seed*."""
    rng = random.Random(seed)
    return [rng.randbytes(20) for _ in range(count)]


def fp_bound(trials: int, rate: float) -> float:
    """Mean plus four standard deviations of the false positives among *trials*."""
    mean = trials * rate
    return mean + 4 * math.sqrt(mean * (1 - rate))


async def batched(call: Callable[[Sequence[bytes]], Awaitable[list[bool]]],
                  fps: Sequence[bytes], size: int = BATCH) -> list[bool]:
    """*call* over *fps* in batches of *size*, the answers joined."""
    out: list[bool] = []
    for start in range(0, len(fps), size):
        out += await call(fps[start:start + size])
    return out
