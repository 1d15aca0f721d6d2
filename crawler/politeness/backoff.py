"""When and after how long a failed download is tried again: pure logic.

No I/O here, so every decision is trivially testable (:class:`RetryConfig` reads the
``RETRY_*`` settings once, with their bounds). An
*outcome* is an HTTP status (``int``) or a network error category (``str``,
one of :data:`NETWORK_ERRORS`; the middleware classifies exception types).
Each outcome maps to an :data:`Action`:

- ``"retry_after"``: wait what the response's ``Retry-After`` header says
  (capped); without a usable header, back off like ``"backoff"``;
- ``"backoff"``: exponential backoff with AWS's "full jitter";
- ``"none"``: do not retry.

Each outcome also has a *class* with its own budget (:class:`Budgets`): ``"later"``, the
site's "come back later" (429, 502, 503, 504, or any answer with ``Retry-After``);
``"network"``, the origin's network errors; ``"other"``, every other retried outcome
(Scrapy's ``RETRY_TIMES``). ``RETRY_MAX_TIME`` bounds the time a request spends on retries
of every class. A failure that was the *proxy's* uses none of these: the proxy pool
re-issues it through another proxy on its own budget.
"""

from __future__ import annotations

import math
import random
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC
from email.utils import parsedate_to_datetime
from typing import TYPE_CHECKING, Any, Literal, NamedTuple, cast

from crawler.config import readers as config
from crawler.config.readers import SettingError

if TYPE_CHECKING:
    from scrapy.settings import BaseSettings

Action = Literal["backoff", "retry_after", "none"]
Outcome = int | str

ACTIONS: tuple[Action, ...] = ("backoff", "retry_after", "none")
#: network error categories; each is retried with backoff unless overridden
NETWORK_ERRORS = (
    "timeout", "dns", "connection_refused", "connection_lost", "connect_error", "io_error",
)
RETRY_AFTER_STATUSES = frozenset({429, 503})
LATER_STATUSES = frozenset({429, 502, 503, 504})  # RETRY_LATER_STATUSES' default
RETRY_CLASSES = ("later", "network", "other")
BACKOFF_STATUSES = frozenset({408, 522, 524})  # besides every other 5xx

_DELTA_SECONDS = re.compile(r"[+-]?\d+(?:\.\d+)?")
_MAX_EXPONENT = 64  # 2**64 times any sane base is past any cap


class Decision(NamedTuple):
    """Retry after *delay* seconds; *source* says how it was computed."""

    delay: float
    source: Literal["retry_after", "backoff"]


def parse_retry_after(value: str | bytes | None, now: float) -> float | None:
    """Seconds to wait from a ``Retry-After`` value: delta-seconds or an HTTP-date.

    Args:
        value: the header value; ``None`` when the header is absent.
        now: the current time (``time.time()``), for HTTP-dates.

    Returns:
        The seconds to wait (a negative delta or a past date gives 0), or
        ``None`` when *value* is absent or not a valid delta or date.
    """
    if value is None:
        return None
    if isinstance(value, bytes):
        value = value.decode("latin-1")
    text = value.strip()
    if _DELTA_SECONDS.fullmatch(text):
        seconds = float(text)
        return max(seconds, 0.0) if math.isfinite(seconds) else None
    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if when.tzinfo is None:  # asctime dates carry no zone; HTTP-dates are always GMT
        when = when.replace(tzinfo=UTC)
    return max(when.timestamp() - now, 0.0)


def full_jitter(attempt: int, base: float, cap: float, rng: random.Random) -> float:
    """AWS "full jitter": uniform in ``[0, min(cap, base * 2**attempt)]``.

    *attempt* counts the retries already made (0 before the first retry).
    """
    ceiling = min(cap, base * 2 ** min(max(attempt, 0), _MAX_EXPONENT))
    return rng.uniform(0.0, ceiling)


def default_action(outcome: Outcome) -> Action:
    """The action for *outcome* when no override applies."""
    if isinstance(outcome, str):
        return "backoff" if outcome in NETWORK_ERRORS else "none"
    if outcome in RETRY_AFTER_STATUSES:
        return "retry_after"
    if 500 <= outcome <= 599 or outcome in BACKOFF_STATUSES:
        return "backoff"
    return "none"


def parse_overrides(raw: Mapping[Any, object]) -> dict[Outcome, Action]:
    """Validate per-outcome overrides such as ``{"404": "backoff", "dns": "none"}``.

    Keys are HTTP statuses (100-599, as int or str) or network error categories;
    values are actions. Raises ``ValueError`` naming the first bad entry.
    """
    overrides: dict[Outcome, Action] = {}
    for key, value in raw.items():
        outcome = _outcome_key(key)
        action = str(value).strip().lower() if isinstance(value, str) else value
        if action not in ACTIONS:
            raise ValueError(f"{key!r}: expected one of {', '.join(ACTIONS)}, got {value!r}")
        if action == "retry_after" and isinstance(outcome, str):
            raise ValueError(f"{key!r}: retry_after applies to HTTP statuses only "
                             "(a network error has no Retry-After header)")
        overrides[outcome] = cast(Action, action)
    return overrides


def _outcome_key(key: object) -> Outcome:
    text = str(key).strip().lower() if isinstance(key, (str, int)) else ""
    if isinstance(key, bool) or not text:
        raise ValueError(f"{key!r} is not an HTTP status or a network error category")
    if text.isdigit():
        if not 100 <= int(text) <= 599:
            raise ValueError(f"{key!r}: expected an HTTP status from 100 to 599")
        return int(text)
    if text not in NETWORK_ERRORS:
        raise ValueError(f"{key!r} is neither an HTTP status nor one of the network error "
                         f"categories {', '.join(NETWORK_ERRORS)}")
    return text


def worst_case_delay(retries: int, base: float, cap: float, retry_after_max: float) -> float:
    """The longest total wait *retries* retries of one request can add up to."""
    return sum(max(min(cap, base * 2 ** min(n, _MAX_EXPONENT)), retry_after_max)
               for n in range(max(retries, 0)))


@dataclass(frozen=True)
class RetryPolicy:
    """Decides, per outcome, whether to retry and after how long.

    Args:
        base: seconds of the first backoff ceiling; it doubles with each retry.
        cap: the largest backoff ceiling, in seconds.
        retry_after_max: the longest ``Retry-After`` honoured, in seconds.
        overrides: actions replacing the default of some outcomes (see
            :func:`parse_overrides`).
        rng: the source of jitter.
    """

    base: float
    cap: float
    retry_after_max: float
    overrides: Mapping[Outcome, Action] = field(default_factory=dict)
    rng: random.Random = field(default_factory=random.Random, compare=False, repr=False)

    def __post_init__(self) -> None:
        if not self.base > 0:
            raise ValueError(f"base must be > 0, got {self.base}")
        if not self.cap >= self.base:
            raise ValueError(f"cap must be >= base ({self.base}), got {self.cap}")
        if not self.retry_after_max >= 0:
            raise ValueError(f"retry_after_max must be >= 0, got {self.retry_after_max}")

    def action(self, outcome: Outcome) -> Action:
        return self.overrides.get(outcome) or default_action(outcome)

    def decide(self, outcome: Outcome, attempt: int, *,
               retry_after: str | bytes | None = None,
               now: float | None = None) -> Decision | None:
        """How long to wait before retrying *outcome*, or ``None``: do not retry.

        *attempt* counts the retries already made; *retry_after* is the
        response's ``Retry-After`` header, if any.
        """
        action = self.action(outcome)
        if action == "none":
            return None
        if action == "retry_after":
            wait = parse_retry_after(retry_after, time.time() if now is None else now)
            if wait is not None:
                return Decision(min(wait, self.retry_after_max), "retry_after")
        return Decision(full_jitter(attempt, self.base, self.cap, self.rng), "backoff")


def retry_class(outcome: Outcome, *, retry_after: bool,
                later: frozenset[int] = LATER_STATUSES) -> str:
    """The budget class of *outcome* (one of :data:`RETRY_CLASSES`)."""
    if isinstance(outcome, str):
        return "network"
    return "later" if outcome in later or retry_after else "other"


@dataclass(frozen=True, slots=True)
class Budgets:
    """Retries allowed per class, and the time all retries of one request may take."""

    later: int  # RETRY_LATER_TIMES
    network: int  # RETRY_NETWORK_TIMES
    other: int  # RETRY_TIMES
    max_time: float  # RETRY_MAX_TIME, seconds from the first failure

    def limit(self, kind: str) -> int:
        return int(getattr(self, kind))

    def spent(self, kind: str, used: Mapping[str, int], elapsed: float,
              cap: int | None = None, total: int = 0) -> str | None:
        """Why no retry of class *kind* is left, or None: *used* counts the retries made per
        class, *elapsed* the seconds since the first failure plus the next wait, *cap* is
        ``meta["max_retry_times"]`` (a cap on the *total* made so far)."""
        if elapsed > self.max_time:
            return f"RETRY_MAX_TIME ({self.max_time:g}s) spent"
        if cap is not None and total >= cap:
            return f"max_retry_times ({cap}) reached"
        if int(used.get(kind, 0)) >= self.limit(kind):
            return f"{kind} budget ({self.limit(kind)}) spent"
        return None


@dataclass(frozen=True, slots=True)
class RetryConfig:
    """The ``RETRY_*`` settings of the backoff retry middleware, read and checked once."""

    base: float  # RETRY_BACKOFF_BASE
    cap: float  # RETRY_BACKOFF_MAX
    retry_after_max: float  # RETRY_AFTER_MAX
    overrides: Mapping[Outcome, Action]  # RETRY_STATUS_OVERRIDES
    max_retry_times: int  # RETRY_TIMES (Scrapy's): the "other" class
    priority_adjust: int  # RETRY_PRIORITY_ADJUST (Scrapy's)
    budgets: Budgets
    later_statuses: frozenset[int]  # RETRY_LATER_STATUSES

    @classmethod
    def from_settings(cls, settings: BaseSettings) -> RetryConfig:
        """:class:`~crawler.config.readers.SettingError` names a bad setting."""
        base = config.get_float(settings, "RETRY_BACKOFF_BASE", minimum=0, exclusive_min=True)
        times = config.get_int(settings, "RETRY_TIMES", minimum=0)
        return cls(
            base=base, cap=config.get_float(settings, "RETRY_BACKOFF_MAX", minimum=base),
            retry_after_max=config.get_float(settings, "RETRY_AFTER_MAX", minimum=0),
            overrides=_overrides_setting(settings),
            max_retry_times=times,
            priority_adjust=config.get_int(settings, "RETRY_PRIORITY_ADJUST"),
            budgets=Budgets(
                later=config.get_int(settings, "RETRY_LATER_TIMES", minimum=0),
                network=config.get_int(settings, "RETRY_NETWORK_TIMES", minimum=0),
                other=times,
                max_time=config.get_float(settings, "RETRY_MAX_TIME", minimum=0,
                                          exclusive_min=True)),
            later_statuses=_statuses(settings, "RETRY_LATER_STATUSES"),
        )


def _statuses(settings: BaseSettings, name: str) -> frozenset[int]:
    value = config.raw(settings, name)
    items = value.split(",") if isinstance(value, str) else value
    if not isinstance(items, (list, tuple, set, frozenset)):
        raise SettingError(name, f"expected a list of HTTP statuses, got {value!r}")
    statuses = set()
    for item in items:
        text = str(item).strip()
        if isinstance(item, bool) or not text.isdigit() or not 100 <= int(text) <= 599:
            raise SettingError(name, f"expected HTTP statuses from 100 to 599, got {item!r}")
        statuses.add(int(text))
    return frozenset(statuses)


def _overrides_setting(settings: BaseSettings) -> dict[Outcome, Action]:
    try:
        return parse_overrides(config.get_dict(settings, "RETRY_STATUS_OVERRIDES"))
    except ValueError as exc:
        if isinstance(exc, SettingError):
            raise
        raise SettingError("RETRY_STATUS_OVERRIDES", str(exc)) from None
