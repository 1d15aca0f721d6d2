"""The proxy pool's pure logic: scores, weighted choice, probes and probation timing."""

from __future__ import annotations

import math
import random
from collections import Counter
from dataclasses import replace

import pytest

from crawler.politeness.proxypool import (
    Health,
    Outcome,
    PoolPolicy,
    ProxyPool,
    State,
    apply,
    parse_proxy,
    score,
)

POLICY = PoolPolicy(alpha=0.5, latency_ref=1.0, min_success=0.1, backoff_base=10,
                    backoff_max=35, probation_successes=2, reset_after=3)


class Clock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def revive(pool: ProxyPool, clock: Clock, proxy_id: str = "a:1") -> None:
    """Wait out the pause of dead *proxy_id*, which is then due, and probe it through."""
    clock.now = pool.get(proxy_id).until
    assert proxy_id in {p.id for p in pool.due()}
    pool.observe(proxy_id, Outcome.PROBE_OK)


def pool_of(*addresses: str, clock: Clock | None = None, seed: int = 1) -> ProxyPool:
    pool = ProxyPool(POLICY, clock=clock or Clock(), rng=random.Random(seed))
    pool.set_proxies(parse_proxy(a) for a in addresses)
    return pool


# -- addresses ----------------------------------------------------------------
def test_ids_are_host_and_port_without_credentials() -> None:
    assert parse_proxy("10.0.0.1:3128").id == "10.0.0.1:3128"
    assert parse_proxy("10.0.0.1:3128").url == "http://10.0.0.1:3128"
    assert parse_proxy("http://proxy.example").id == "proxy.example:80"
    assert parse_proxy("https://proxy.example").id == "proxy.example:443"
    assert parse_proxy("http://[::1]:8080").id == "[::1]:8080"
    with_user = parse_proxy("http://alice:s3cret@gate.example:7000")
    assert with_user.url == "http://alice:s3cret@gate.example:7000"
    assert with_user.id.startswith("gate.example:7000~") and len(with_user.id) == 26
    assert "alice" not in with_user.id and "s3cret" not in with_user.id
    assert "s3cret" not in repr(with_user)
    # the same gateway with another user name (another exit) is another proxy
    assert parse_proxy("http://bob:s3cret@gate.example:7000").id != with_user.id


@pytest.mark.parametrize("address", ["ftp://u:s3cret@h:1", "http://u:s3cret@h:notaport",
                                     "http://u:s3cret@:8080", "socks5://u:s3cret@h:1080"])
def test_bad_addresses_are_refused_without_repeating_them(address: str) -> None:
    with pytest.raises(ValueError) as info:
        parse_proxy(address)
    assert "s3cret" not in str(info.value)


# -- scores -------------------------------------------------------------------
def test_success_and_latency_are_moving_averages() -> None:
    h = Health()
    assert score(h, POLICY) == 1.0  # unmeasured: optimistic, so new proxies get tried
    h = apply(h, Outcome.SUCCESS, 1.0, 0, POLICY)
    assert (h.success, h.latency) == (1.0, 1.0)
    h = apply(h, Outcome.SUCCESS, 3.0, 0, POLICY)
    assert h.latency == pytest.approx(2.0)  # 1 + 0.5 * (3 - 1)
    h = apply(h, Outcome.FAILURE, None, 0, POLICY)
    assert h.success == pytest.approx(0.5) and h.latency == pytest.approx(2.0)
    assert h.state is State.ALIVE and h.streak == 0
    assert score(h, POLICY) == pytest.approx(0.5 * 1 / (1 + 2.0))
    assert h.samples == 3


def test_repeated_failures_kill_a_proxy_below_the_success_floor() -> None:
    h = Health()
    states = []
    for _ in range(5):
        h = apply(h, Outcome.FAILURE, None, 0, POLICY)
        states.append(h.state)
    # 0.5, 0.25, 0.125, 0.0625 < 0.1: the fourth failure kills it
    assert states[:3] == [State.ALIVE] * 3 and states[3] is State.DEAD
    assert h.state is State.DEAD and score(h, POLICY) == 0


def test_a_ban_kills_at_once() -> None:
    h = apply(Health(), Outcome.BAN, None, 100.0, POLICY)
    assert h.state is State.DEAD and h.until == 110.0 and h.deaths == 1


def test_json_round_trip() -> None:
    h = apply(apply(Health(), Outcome.SUCCESS, 0.25, 5, POLICY), Outcome.BAN, None, 6, POLICY)
    assert Health.from_json(h.to_json()) == h
    assert Health.from_json(Health().to_json()) == Health()


# -- weighted choice ------------------------------------------------------------
def test_choice_is_proportional_to_score() -> None:
    pool = pool_of("a:1", "b:1", "c:1", "d:1", seed=7)
    pool.load({"a:1": Health(success=1.0, latency=0.0), "b:1": Health(success=0.5, latency=0.0),
               "c:1": Health(success=1.0, latency=3.0),  # 1 * 1/(1+3) = 0.25
               "d:1": Health(state=State.DEAD, until=10**12)})
    draws = 40_000
    counts = Counter(p.id for p in (pool.pick() for _ in range(draws)) if p)
    weights = {"a:1": 1.0, "b:1": 0.5, "c:1": 0.25}
    total = sum(weights.values())
    for proxy_id, weight in weights.items():
        p = weight / total
        sigma = math.sqrt(draws * p * (1 - p))
        assert abs(counts[proxy_id] - draws * p) < 5 * sigma, (proxy_id, counts)
    assert counts["d:1"] == 0


def test_avoided_proxies_are_a_last_resort() -> None:
    pool = pool_of("a:1", "b:1")
    assert {pool.pick(avoid={"a:1"}).id for _ in range(200)} == {"b:1"}  # type: ignore[union-attr]
    pool.observe("b:1", Outcome.BAN)
    assert pool.pick(avoid={"a:1"}).id == "a:1"  # type: ignore[union-attr]
    pool.observe("a:1", Outcome.BAN)
    assert pool.pick() is None


# -- probes and probation ---------------------------------------------------------
def test_a_dead_proxy_is_probed_after_a_doubling_capped_pause_and_returns_on_probation() -> None:
    clock = Clock(0.0)
    pool = pool_of("a:1", clock=clock)
    pauses = []
    for _ in range(4):
        died = clock.now
        pool.observe("a:1", Outcome.BAN)
        health = pool.get("a:1")
        assert health.state is State.DEAD and pool.pick() is None
        pauses.append(health.until - died)
        assert pool.next_revival() == health.until
        clock.now = health.until - 0.001
        assert pool.due() == []
        clock.now = health.until + 100  # time alone brings nothing back: only a probe
        assert pool.get("a:1").state is State.DEAD and pool.pick() is None
        revive(pool, clock)
        back = pool.get("a:1")
        assert back.state is State.PROBATION and pool.pick() is not None
        assert (back.success, back.latency) == (1.0, None)  # re-scored from fresh evidence
        pool.observe("a:1", Outcome.FAILURE)  # a failure on probation only lowers the score
        assert pool.get("a:1").state is State.PROBATION
    assert pauses == [10, 20, 35, 35]  # each ban on probation doubles the pause


def test_a_failed_probe_doubles_the_wait_for_the_next_one() -> None:
    clock = Clock(0.0)
    pool = pool_of("a:1", clock=clock)
    pool.observe("a:1", Outcome.BAN)
    waits = []
    for _ in range(3):
        clock.now = pool.get("a:1").until
        pool.observe("a:1", Outcome.PROBE_FAILED)
        waits.append(pool.get("a:1").until - clock.now)
        assert pool.get("a:1").state is State.DEAD
    assert waits == [20, 35, 35]
    revive(pool, clock)
    assert pool.get("a:1").probes == 0 and pool.get("a:1").state is State.PROBATION


def test_probes_of_a_live_proxy_change_nothing() -> None:
    pool = pool_of("a:1")
    for outcome in (Outcome.PROBE_OK, Outcome.PROBE_FAILED):
        pool.observe("a:1", outcome)
        assert pool.get("a:1").state is State.ALIVE and pool.get("a:1").success == 1.0


def test_origin_failures_are_counted_and_never_scored() -> None:
    h = Health()
    for _ in range(50):
        h = apply(h, Outcome.ORIGIN, None, 0, POLICY)
    assert (h.state, h.success, h.origin_faults, h.proxy_faults) == (State.ALIVE, 1.0, 50, 0)
    h = apply(h, Outcome.FAILURE, None, 0, POLICY)
    assert (h.proxy_faults, h.origin_faults) == (1, 50)
    h = apply(h, Outcome.BAN, None, 0, POLICY)
    h = apply(h, Outcome.PROBE_OK, None, 10, POLICY)
    assert (h.state, h.proxy_faults, h.origin_faults) == (State.PROBATION, 2, 50)


def test_a_proxy_on_probation_is_picked_half_as_often() -> None:
    clock = Clock(0.0)
    pool = pool_of("a:1", "b:1", clock=clock, seed=3)
    pool.observe("a:1", Outcome.BAN)
    revive(pool, clock)
    assert pool.get("a:1").state is State.PROBATION
    counts = Counter(p.id for p in (pool.pick() for _ in range(30_000)) if p)
    assert counts["a:1"] / counts["b:1"] == pytest.approx(0.5, rel=0.05)


def test_successes_revive_and_a_sustained_run_resets_the_pause() -> None:
    clock = Clock(0.0)
    pool = pool_of("a:1", clock=clock)
    for _ in range(2):
        pool.observe("a:1", Outcome.BAN)
        revive(pool, clock)
    assert pool.get("a:1").deaths == 2
    pool.observe("a:1", Outcome.SUCCESS, 0.1)
    assert pool.get("a:1").state is State.PROBATION
    pool.observe("a:1", Outcome.SUCCESS, 0.1)
    assert pool.get("a:1").state is State.ALIVE and pool.get("a:1").deaths == 2
    pool.observe("a:1", Outcome.SUCCESS, 0.1)  # the third in a row: reset_after=3
    assert pool.get("a:1").deaths == 0
    pool.observe("a:1", Outcome.BAN)
    assert pool.get("a:1").until - clock.now == 10  # back to the base pause


def test_late_news_of_requests_in_flight_does_not_extend_the_pause() -> None:
    clock = Clock(0.0)
    pool = pool_of("a:1", clock=clock)
    pool.observe("a:1", Outcome.BAN)
    until = pool.get("a:1").until
    clock.now = 1.0
    for outcome in (Outcome.BAN, Outcome.FAILURE, Outcome.SUCCESS):
        pool.observe("a:1", outcome)
    assert pool.get("a:1").until == until and pool.get("a:1").deaths == 1


def test_transitions_report_deaths_and_revivals_once() -> None:
    clock = Clock(0.0)
    pool = pool_of("a:1", "b:1", clock=clock)
    assert pool.transitions() == []
    pool.observe("a:1", Outcome.BAN)
    assert pool.transitions() == [("a:1", State.ALIVE, State.DEAD)]
    assert pool.transitions() == []
    revive(pool, clock)
    assert pool.transitions() == [("a:1", State.DEAD, State.PROBATION)]
    assert pool.counts() == {State.ALIVE: 1, State.DEAD: 0, State.PROBATION: 1}


def test_members_can_change() -> None:
    pool = pool_of("a:1", "b:1")
    added, removed = pool.set_proxies([parse_proxy("b:1"), parse_proxy("c:1")])
    assert (added, removed) == (["c:1"], ["a:1"])
    assert {pool.pick().id for _ in range(100)} == {"b:1", "c:1"}  # type: ignore[union-attr]


def test_pause_doubles_and_is_capped() -> None:
    policy = replace(POLICY, backoff_base=1.5, backoff_max=10)
    assert [policy.pause(d) for d in range(1, 6)] == [1.5, 3, 6, 10, 10]
    assert [policy.pause(2, probes) for probes in range(3)] == [3, 6, 10]
