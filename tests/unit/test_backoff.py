"""Pure retry policy: Retry-After parsing, full jitter, decisions per outcome, overrides."""

from __future__ import annotations

import random
import statistics
from datetime import UTC, datetime
from email.utils import format_datetime

import pytest

from crawler.politeness.backoff import (
    NETWORK_ERRORS,
    Decision,
    RetryPolicy,
    default_action,
    full_jitter,
    parse_overrides,
    parse_retry_after,
    worst_case_delay,
)

NOW = 1_800_000_000.0  # 2027-01-15T08:00:00Z


def http_date(timestamp: float) -> str:
    return format_datetime(datetime.fromtimestamp(timestamp, UTC), usegmt=True)


@pytest.mark.parametrize(
    ("value", "expected"),
    [("120", 120.0), (b"5", 5.0), (" 7 ", 7.0), ("0", 0.0), ("1.5", 1.5), ("+3", 3.0),
     ("-3", 0.0), ("007", 7.0), ("86400000", 86400000.0)],
)
def test_retry_after_delta_seconds(value: str | bytes, expected: float) -> None:
    assert parse_retry_after(value, NOW) == expected


def test_retry_after_http_dates_in_all_three_formats() -> None:
    later = NOW + 90
    assert parse_retry_after(http_date(later), NOW) == pytest.approx(90)
    assert parse_retry_after(http_date(later).encode(), NOW) == pytest.approx(90)
    when = datetime.fromtimestamp(later, UTC)
    rfc850 = when.strftime("%A, %d-%b-%y %H:%M:%S GMT")
    asctime = f"{when:%a %b} {when.day:2d} {when:%H:%M:%S %Y}"
    assert parse_retry_after(rfc850, NOW) == pytest.approx(90)
    assert parse_retry_after(asctime, NOW) == pytest.approx(90)  # no zone: GMT
    assert parse_retry_after("Fri, 15 Jan 2027 09:00:00 +0100", NOW) == pytest.approx(0)


def test_a_past_date_means_now() -> None:
    assert parse_retry_after(http_date(NOW - 3600), NOW) == 0.0
    assert parse_retry_after("Sun, 06 Nov 1994 08:49:37 GMT", NOW) == 0.0


@pytest.mark.parametrize(
    "value",
    [None, "", "   ", "soon", "1e3", "inf", "nan", "12s", "1,5", "--1", "Fri, 32 Foo 2027",
     "Sun, 06 Nov 1994 25:99:99 GMT", b"\xff\xfe", "9" * 400],
)
def test_garbage_retry_after_is_none(value: str | bytes | None) -> None:
    assert parse_retry_after(value, NOW) is None


def test_full_jitter_stays_within_the_doubling_capped_ceiling() -> None:
    rng = random.Random(1)
    for attempt in range(12):
        ceiling = min(20.0, 0.5 * 2**attempt)
        samples = [full_jitter(attempt, 0.5, 20.0, rng) for _ in range(500)]
        assert all(0.0 <= s <= ceiling for s in samples)
        assert max(samples) > 0.9 * ceiling  # the whole range is used, up to the ceiling
    assert full_jitter(10**9, 0.5, 20.0, rng) <= 20.0  # no overflow on absurd attempts
    assert full_jitter(-5, 0.5, 20.0, rng) <= 0.5


def test_full_jitter_is_uniform() -> None:
    rng = random.Random(42)
    samples = [full_jitter(3, 1.0, 100.0, rng) for _ in range(20_000)]  # uniform on [0, 8]
    assert statistics.fmean(samples) == pytest.approx(4.0, abs=0.1)
    assert statistics.pstdev(samples) == pytest.approx(8 / 12**0.5, abs=0.1)
    deciles = [sum(1 for s in samples if k <= s < k + 0.8) for k in (0.8 * i for i in range(10))]
    assert all(abs(count - 2000) < 200 for count in deciles), deciles


@pytest.mark.parametrize(
    ("outcome", "action"),
    [(429, "retry_after"), (503, "retry_after"), (500, "backoff"), (502, "backoff"),
     (504, "backoff"), (522, "backoff"), (524, "backoff"), (599, "backoff"),
     (408, "backoff"), (400, "none"), (401, "none"), (403, "none"), (404, "none"),
     (410, "none"), (200, "none"), (301, "none"), ("timeout", "backoff"), ("dns", "backoff"),
     ("connection_refused", "backoff"), ("connection_lost", "backoff"),
     ("connect_error", "backoff"), ("io_error", "backoff"), ("unknown", "none")],
)
def test_default_actions(outcome: int | str, action: str) -> None:
    assert default_action(outcome) == action
    assert RetryPolicy(base=1, cap=10, retry_after_max=60).action(outcome) == action


def policy(**overrides: str) -> RetryPolicy:
    return RetryPolicy(base=2.0, cap=30.0, retry_after_max=60.0,
                       overrides=parse_overrides(overrides), rng=random.Random(7))


def test_retry_after_is_honoured_and_capped() -> None:
    p = policy()
    assert p.decide(503, 0, retry_after="30", now=NOW) == Decision(30.0, "retry_after")
    assert p.decide(429, 0, retry_after=b"600", now=NOW) == Decision(60.0, "retry_after")
    assert p.decide(429, 0, retry_after=http_date(NOW + 45), now=NOW) == pytest.approx(
        Decision(45.0, "retry_after"))
    assert p.decide(503, 0, retry_after="0", now=NOW) == Decision(0.0, "retry_after")


def test_without_a_usable_retry_after_429_and_503_back_off() -> None:
    p = policy()
    for header in (None, "garbage", ""):
        for attempt in range(6):
            decision = p.decide(503, attempt, retry_after=header, now=NOW)
            assert decision is not None and decision.source == "backoff"
            assert 0 <= decision.delay <= min(30.0, 2.0 * 2**attempt)


def test_other_retryable_statuses_ignore_retry_after() -> None:
    decision = policy().decide(500, 0, retry_after="50", now=NOW)
    assert decision is not None and decision.source == "backoff" and decision.delay <= 2.0


def test_client_errors_are_not_retried() -> None:
    p = policy()
    assert [p.decide(status, 0, now=NOW) for status in (400, 403, 404, 410, 451)] == [None] * 5


def test_network_errors_back_off() -> None:
    p = policy()
    for category in NETWORK_ERRORS:
        decision = p.decide(category, 2, now=NOW)
        assert decision is not None and decision.source == "backoff" and decision.delay <= 8.0


def test_overrides_replace_the_defaults() -> None:
    p = RetryPolicy(base=1, cap=10, retry_after_max=60, overrides=parse_overrides(
        {"404": "backoff", "503": "none", 500: "Retry_After", "dns": "none", "429": "backoff"}))
    assert p.action(404) == "backoff" and p.decide(404, 0, now=NOW) is not None
    assert p.decide(503, 0, retry_after="5", now=NOW) is None
    assert p.decide(500, 0, retry_after="7", now=NOW) == Decision(7.0, "retry_after")
    assert p.decide("dns", 0, now=NOW) is None
    decision = p.decide(429, 0, retry_after="50", now=NOW)
    assert decision is not None and decision.source == "backoff"
    assert p.action(502) == "backoff" and p.action(403) == "none"  # untouched


def test_parse_overrides_normalises_keys_and_values() -> None:
    assert parse_overrides({" 404 ": " NONE ", 500: "backoff", "Timeout": "none"}) == {
        404: "none", 500: "backoff", "timeout": "none"}
    assert parse_overrides({}) == {}


@pytest.mark.parametrize(
    ("overrides", "message"),
    [({"4044": "backoff"}, "100 to 599"), ({"99": "backoff"}, "100 to 599"),
     ({"abc": "none"}, "neither an HTTP status"), ({"404": "sometimes"}, "one of backoff"),
     ({"404": None}, "one of backoff"), ({"timeout": "retry_after"}, "HTTP statuses only"),
     ({True: "none"}, "not an HTTP status"), ({"": "none"}, "not an HTTP status"),
     ({4.5: "none"}, "not an HTTP status")],
)
def test_bad_overrides_name_the_entry(overrides: dict[object, object], message: str) -> None:
    with pytest.raises(ValueError, match=message) as error:
        parse_overrides(overrides)
    assert repr(next(iter(overrides))) in str(error.value)


@pytest.mark.parametrize(
    ("arguments", "message"),
    [({"base": 0, "cap": 1, "retry_after_max": 1}, "base"),
     ({"base": 2, "cap": 1, "retry_after_max": 1}, "cap"),
     ({"base": 1, "cap": 1, "retry_after_max": -1}, "retry_after_max"),
     ({"base": float("nan"), "cap": 1, "retry_after_max": 1}, "base")],
)
def test_a_bad_policy_is_refused(arguments: dict[str, float], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        RetryPolicy(**arguments)


def test_worst_case_delay() -> None:
    assert worst_case_delay(2, 1.0, 60.0, 120.0) == 240.0
    assert worst_case_delay(4, 1.0, 5.0, 0.0) == 1 + 2 + 4 + 5
    assert worst_case_delay(0, 1.0, 60.0, 120.0) == 0
