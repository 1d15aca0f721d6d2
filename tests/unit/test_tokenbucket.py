"""The token-bucket and adaptive-rate maths of crawler.politeness.tokenbucket: pure, no I/O."""

from __future__ import annotations

import math
import random
from itertools import pairwise

import pytest

from crawler.politeness.tokenbucket import (
    Adaptive,
    Bucket,
    Health,
    Limit,
    LocalBuckets,
    decrease,
    effective_rate,
    recover,
    refill,
    reserve,
    take,
    time_to_full,
)

RULE = Adaptive(factor=0.5, min_rate=0.25, recover_after=3, step=0.1)


def slots(limit: Limit, arrivals: list[float], max_wait: float = math.inf) -> list[float]:
    """The slot times *arrivals* get from one bucket (unreserved ones left out)."""
    bucket: Bucket | None = None
    out = []
    for now in arrivals:
        grant, bucket = reserve(bucket, limit, now, max_wait)
        if grant.reserved:
            out.append(now + grant.wait)
    return out


def most_in_window(times: list[float], width: float) -> int:
    times = sorted(times)
    return max(sum(1 for t in times[i:] if t < start + width) for i, start in enumerate(times))


def test_refill_adds_rate_per_second_up_to_burst() -> None:
    bucket = Bucket(tokens=0.0, at=100.0)
    assert refill(bucket, 2.0, 5.0, 100.0) == 0.0
    assert refill(bucket, 2.0, 5.0, 101.25) == pytest.approx(2.5)
    assert refill(bucket, 2.0, 5.0, 200.0) == 5.0
    assert refill(Bucket(-0.5, 100.0), 2.0, 5.0, 100.5) == pytest.approx(0.5)


def test_a_bucket_with_reservations_ahead_does_not_refill_before_them() -> None:
    ahead = Bucket(tokens=0.0, at=110.0)
    assert refill(ahead, 2.0, 5.0, 100.0) == 0.0
    assert time_to_full(ahead, 2.0, 5.0, 100.0) == pytest.approx(12.5)


def test_take_spends_the_burst_then_one_token_per_interval() -> None:
    limit = Limit(rate=2.0, burst=3.0)
    bucket: Bucket | None = None
    taken = []
    for _ in range(5):
        ok, bucket = take(bucket, limit, 0.0)
        taken.append(ok)
    assert taken == [True, True, True, False, False]
    assert take(bucket, limit, 0.4)[0] is False
    ok, bucket = take(bucket, limit, 0.5)
    assert ok and bucket.tokens == pytest.approx(0.0)
    assert take(Bucket(0.0, 10.0), limit, 9.0) == (False, Bucket(0.0, 10.0))


def test_reservations_queue_at_the_rate_after_the_burst() -> None:
    limit = Limit(rate=4.0, burst=2.0)
    bucket: Bucket | None = None
    waits = []
    for _ in range(6):
        grant, bucket = reserve(bucket, limit, 50.0)
        assert grant.reserved
        waits.append(grant.wait)
    assert waits == pytest.approx([0.0, 0.0, 0.25, 0.5, 0.75, 1.0])
    assert bucket == Bucket(0.0, 51.0)
    # a request 0.6 s later queues behind the reserved slots, not before them
    grant, bucket = reserve(bucket, limit, 50.6)
    assert grant.wait == pytest.approx(51.25 - 50.6)


def test_partial_tokens_shorten_the_wait() -> None:
    grant, bucket = reserve(Bucket(0.5, 0.0), Limit(rate=1.0, burst=1.0), 0.0)
    assert grant.wait == pytest.approx(0.5)
    assert bucket == Bucket(0.0, 0.5)


def test_a_slot_past_max_wait_is_not_reserved_and_changes_nothing() -> None:
    limit = Limit(rate=1.0, burst=1.0)
    bucket = Bucket(0.0, 30.0)
    grant, after = reserve(bucket, limit, 0.0, max_wait=10.0)
    assert (grant.reserved, after) == (False, bucket)
    assert grant.wait == pytest.approx(31.0)
    grant, after = reserve(bucket, limit, 0.0, max_wait=31.0)
    assert grant.reserved and after == Bucket(0.0, 31.0)


def test_a_rate_change_never_moves_a_slot_already_handed_out() -> None:
    bucket: Bucket | None = None
    handed = []
    for rate in (10.0, 10.0, 10.0, 1.0, 50.0, 0.5, 20.0):
        grant, bucket = reserve(bucket, Limit(rate, 1.0), 0.0)
        handed.append(grant.wait)
    assert handed == sorted(handed)
    gaps = [b - a for a, b in pairwise(handed)]
    assert gaps == pytest.approx([0.1, 0.1, 1.0, 0.02, 2.0, 0.05])


@pytest.mark.parametrize(("rate", "burst"), [(1.0, 1.0), (5.0, 3.0), (20.0, 10.0), (0.5, 4.0)])
def test_no_window_gets_more_than_burst_plus_rate_times_its_width(rate: float,
                                                                   burst: float) -> None:
    rng = random.Random(rate * 100 + burst)
    now, arrivals = 0.0, []
    for _ in range(2000):  # bursts, pauses and steady streams
        now += rng.choice([0.0, 0.0, rng.expovariate(rate * 3), rng.uniform(0, 3 / rate)])
        arrivals.append(now)
    times = slots(Limit(rate, burst), arrivals)
    assert len(times) == len(arrivals)
    for width in (0.5, 1.0, 3.0):
        assert most_in_window(times, width) <= burst + rate * width + 1e-9
    assert most_in_window(times, 1.0) >= min(burst + rate - 1, burst)  # the bound is reached


def test_many_arrivals_at_once_get_exactly_rate_per_second() -> None:
    times = slots(Limit(rate=10.0, burst=5.0), [0.0] * 105)
    assert times[:5] == [0.0] * 5
    assert times[-1] == pytest.approx(10.0)
    assert sum(1 for t in times if t < 0.99) == 5 + 9


def test_decrease_is_multiplicative_and_bounded_by_the_floor() -> None:
    health, rates = Health(), []
    for step in range(8):
        health, changed = decrease(health, 8.0, RULE, taken_at=step + 0.5, now=step + 1.0)
        rates.append(effective_rate(health, 8.0))
    assert rates == [4.0, 2.0, 1.0, 0.5, 0.25, 0.25, 0.25, 0.25]
    assert not changed
    # a configured rate below the floor is the floor
    health, changed = decrease(Health(), 0.1, RULE, taken_at=0.0, now=1.0)
    assert effective_rate(health, 0.1) == 0.1 and not changed


def test_signals_from_requests_taken_before_the_last_decrease_count_once() -> None:
    health, changed = decrease(Health(), 8.0, RULE, taken_at=10.0, now=12.0)
    assert changed and health.rate == 4.0
    health = Health(health.rate, 2, health.decreased_at)
    for taken in (10.0, 11.0, 11.9):  # a volley of 429s from requests sent at 8/s
        health, changed = decrease(health, 8.0, RULE, taken_at=taken, now=12.5)
        assert not changed and health.rate == 4.0 and health.successes == 0
    health, changed = decrease(health, 8.0, RULE, taken_at=12.1, now=13.0)
    assert changed and health.rate == 2.0


def test_recovery_is_additive_after_consecutive_successes_up_to_the_configured_rate() -> None:
    health = Health(rate=1.0)
    rates = []
    for _ in range(3 * 12):
        health, _ = recover(health, 2.0, RULE)
        rates.append(effective_rate(health, 2.0))
    assert rates[:3] == [1.0, 1.0, 1.2]
    assert rates[5] == pytest.approx(1.4)
    assert rates[-1] == 2.0 and health.rate is None
    assert max(rates) == 2.0


def test_a_slowdown_resets_the_success_count() -> None:
    health, _ = recover(recover(Health(rate=1.0, decreased_at=5.0), 2.0, RULE)[0], 2.0, RULE)
    assert health.successes == 2
    health, _ = decrease(health, 2.0, RULE, taken_at=1.0, now=6.0)  # ignored, but resets
    assert health.successes == 0 and health.rate == 1.0


def test_recover_without_a_lowered_rate_changes_nothing() -> None:
    assert recover(Health(), 2.0, RULE) == (Health(), False)
    # the configured rate was lowered below the adaptive one: nothing left to recover
    assert recover(Health(rate=3.0, successes=1), 2.0, RULE) == (Health(), False)


def test_adaptive_rate_stays_between_floor_and_configured() -> None:
    rng = random.Random(7)
    health, now = Health(), 0.0
    for _ in range(5000):
        now += rng.random()
        if rng.random() < 0.1:
            health, _ = decrease(health, 3.0, RULE, taken_at=now - rng.random(), now=now)
        else:
            health, _ = recover(health, 3.0, RULE)
        assert 0.25 <= effective_rate(health, 3.0) <= 3.0


def test_local_buckets_keep_hosts_apart_and_honour_the_lowered_rate() -> None:
    buckets = LocalBuckets()
    limit = Limit(rate=2.0, burst=1.0)
    assert buckets.reserve("a.example", limit, 0.0, 60.0).wait == 0.0
    assert buckets.reserve("b.example", limit, 0.0, 60.0).wait == 0.0
    assert buckets.reserve("a.example", limit, 0.0, 60.0).wait == pytest.approx(0.5)
    assert buckets.decrease("a.example", 2.0, RULE, taken_at=0.0, now=0.0) == (1.0, True)
    assert buckets.reserve("a.example", limit, 0.0, 60.0).wait == pytest.approx(1.5)
    assert buckets.reserve("b.example", limit, 0.0, 60.0).wait == pytest.approx(0.5)


def test_local_buckets_forget_idle_hosts_but_not_lowered_ones() -> None:
    buckets = LocalBuckets(max_hosts=10)
    limit = Limit(rate=1.0, burst=1.0)
    buckets.reserve("slow.example", limit, 0.0, 60.0)
    buckets.decrease("slow.example", 1.0, RULE, taken_at=0.0, now=0.0)
    for i in range(9):  # 10 hosts: none forgotten yet
        buckets.reserve(f"h{i}.example", limit, 0.0, 60.0)
    assert len(buckets.buckets) == 10
    buckets.reserve("late.example", limit, 100.0, 60.0)
    assert set(buckets.buckets) == {"slow.example", "late.example"}
    assert buckets.rate("slow.example", 1.0) == 0.5


def test_a_held_host_grants_nothing_until_its_request_ends() -> None:
    """A gap's token holds its host: the next token is a gap after that request ended,
    however late it was sent; only the holder's end lets go, or the hold's own end."""
    buckets = LocalBuckets()
    limit = Limit(rate=2.0, burst=1.0)  # a 0.5 s gap
    first = buckets.reserve("h", limit, 0.0, 0.001, hold=35.0)
    assert first.reserved and first.wait == 0.0
    later = buckets.reserve("h", limit, 2.0, 0.001, hold=35.0)  # the first still in flight
    assert not later.reserved and later.wait == pytest.approx(33.5)
    assert buckets.ended("h", 2.5, 2.0, holder=1.0) == pytest.approx(33.0)  # not its holder
    assert buckets.ended("h", 3.0, 2.0, holder=0.0) == pytest.approx(0.5)  # ended at 3 s
    assert not buckets.reserve("h", limit, 3.4, 0.001, hold=35.0).reserved
    assert buckets.reserve("h", limit, 3.5, 0.001, hold=35.0).reserved
    assert not buckets.reserve("h", limit, 38.9, 0.001, hold=35.0).reserved  # never ended:
    assert buckets.reserve("h", limit, 39.0, 0.001, hold=35.0).reserved  # free after the hold
