"""The fault origin's model: what it does with each attempt at each page, as a pure function.

:func:`outcome` maps ``(faults, seed, host, path, attempt)`` to an :class:`Outcome`; the server
(:mod:`servers.faultorigin`) counts the attempts and serves the outcome. Two profiles:

- ``random`` (the default): every attempt up to ``max_failures`` rolls its own fault with the
  probabilities of :class:`Faults`; a *doomed* page (:func:`is_doomed`) faults on every attempt.
- ``hostile`` (``Faults.parse("hostile")``, ``--faults hostile``): one seeded roll per page picks
  its :func:`scenario` from :data:`HOSTILE`, e.g. ``"503x3"``: a 503 on attempts 1, 2 and 3,
  then a 200. About 47.5% of the pages fail their first attempt; every page succeeds in the
  end. The other fields of :class:`Faults` do not apply.
"""

from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass
from typing import Any, NamedTuple

PROFILES = ("random", "hostile")
HOSTILE_SLOW = 2.0  # seconds before the 200 of a "slow" page's first attempt


@dataclass(frozen=True)
class Faults:
    """Per-attempt fault probabilities; attempts after *max_failures* always succeed at once.

    With ``profile="hostile"`` none of the other fields apply (see :data:`HOSTILE`).
    """

    reset: float = 0.05
    too_many: float = 0.10  # 429 with Retry-After: 1 or 2
    unavailable: float = 0.10  # 503, half of them with Retry-After: 1
    slow: float = 0.10  # a 200 after slow_min .. slow_max seconds
    slow_min: float = 1.0
    slow_max: float = 3.0
    max_failures: int = 2
    doomed: float = 0.0  # share of pages (never a host's "/") that fault on every attempt
    profile: str = "random"  # or "hostile": a fixed scenario per page

    def __post_init__(self) -> None:
        if self.profile not in PROFILES:
            raise ValueError(f"unknown fault profile {self.profile!r}; known: {list(PROFILES)}")

    @classmethod
    def parse(cls, spec: str) -> Faults:
        """``"none"``, ``"hostile"`` or ``"reset=0.1,too_many=0.2,max_failures=3"`` (unnamed
        fields: defaults; ``profile=hostile`` names the profile)."""
        text = spec.strip()
        if text == "none":
            return cls(reset=0.0, too_many=0.0, unavailable=0.0, slow=0.0)
        if text in PROFILES:
            return cls(profile=text)
        types = {f.name: f.type for f in dataclasses.fields(cls)}
        values: dict[str, Any] = {}
        for item in filter(None, (part.strip() for part in text.split(","))):
            name, _, value = item.partition("=")
            if name not in types:
                raise ValueError(f"unknown fault setting {name!r}; known: {sorted(types)}")
            kind = types[name]
            values[name] = int(value) if kind == "int" else value if kind == "str" else float(value)
        return cls(**values)

    def spec(self) -> str:
        """What :meth:`parse` reads back: ``"hostile"`` for the plain hostile profile, else
        ``name=value,...`` (``profile`` only when not ``random``, so old specs are unchanged)."""
        if self == Faults(profile="hostile"):
            return "hostile"
        items = dataclasses.asdict(self)
        if self.profile == "random":
            del items["profile"]
        return ",".join(f"{k}={v}" for k, v in items.items())


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


class Scenario(NamedTuple):
    """A hostile page's story: its first *failures* attempts get *failing*, then a 200."""

    name: str
    share: float  # of the pages
    failures: int
    failing: Outcome


# The hostile profile, in the order of the roll; the pages left over (about 45.8%) are served
# at once on every attempt. A "slow" page's first attempt is a 200, only late.
HOSTILE: tuple[Scenario, ...] = (
    Scenario("503x1", 1 / 6, 1, Outcome(503)),
    Scenario("429x2", 1 / 8, 2, Outcome(429, retry_after=1)),
    Scenario("reset", 1 / 10, 1, Outcome(None)),
    Scenario("503x3", 1 / 12, 3, Outcome(503)),
    Scenario("slow", 1 / 15, 1, Outcome(200, delay=HOSTILE_SLOW)),
)


def _hostile(seed: int, host: str, path: str) -> Scenario | None:
    roll = random.Random(f"{seed}:{host}:{path}:hostile").random()
    for entry in HOSTILE:
        if roll < entry.share:
            return entry
        roll -= entry.share
    return None


def scenario(faults: Faults, seed: int, host: str, path: str) -> str | None:
    """The hostile profile's scenario of a page (a name in :data:`HOSTILE`), or None for a page
    served at once; a host's ``/`` has one too. The random profile has none: ValueError."""
    if faults.profile != "hostile":
        raise ValueError(f"the {faults.profile!r} profile has no per-page scenarios")
    entry = _hostile(seed, host, path)
    return entry.name if entry else None


def is_doomed(faults: Faults, seed: int, host: str, path: str) -> bool:
    """Whether the page at *path* on *host* faults on every attempt (a host's ``/`` never; no
    page of the hostile profile)."""
    if faults.profile != "random":
        return False
    return path != "/" and random.Random(f"{seed}:{host}:{path}:doomed").random() < faults.doomed


def outcome(faults: Faults, seed: int, host: str, path: str, attempt: int) -> Outcome:
    """The deterministic outcome of *attempt* (1-based) at a page; the same inputs, the same."""
    if faults.profile == "hostile":
        entry = _hostile(seed, host, path)
        return entry.failing if entry and attempt <= entry.failures else Outcome(200)
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
