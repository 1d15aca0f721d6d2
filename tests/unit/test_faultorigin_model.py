"""The fault origin's model, without serving it: which attempt of which page faults, how, and
the busiest-window count over a request log (tests/integration/test_faultorigin.py serves it)."""

from __future__ import annotations

import hashlib
from collections import Counter

import pytest
from servers.faultorigin import (
    HOSTILE,
    Faults,
    Outcome,
    is_doomed,
    max_per_window,
    outcome,
    page_scenarios,
    scenario,
)

HOSTILE_FAULTS = Faults.parse("hostile")
FAILING = ("503x1", "429x2", "reset", "503x3")  # the scenarios whose first attempt fails


def test_outcome_is_deterministic_and_transient() -> None:
    faults = Faults()
    kinds: set[str | None] = set()
    for n in range(500):
        path = f"/p/{n}.html"
        for attempt in range(1, faults.max_failures + 3):
            result = outcome(faults, 1, "127.0.0.1", path, attempt)
            assert result == outcome(faults, 1, "127.0.0.1", path, attempt)
            kinds.add(result.fault)
            if attempt > faults.max_failures:
                assert result == Outcome(200)
            if result.status == 429:
                assert result.retry_after in (1, 2)
            if result.fault == "slow":
                assert faults.slow_min <= result.delay <= faults.slow_max
    assert kinds == {None, "reset", "429", "503", "slow"}
    assert Faults.parse(faults.spec()) == faults
    assert outcome(Faults.parse("none"), 1, "127.0.0.1", "/", 1) == Outcome(200)
    with pytest.raises(ValueError, match="unknown fault setting"):
        Faults.parse("bogus=1")


def test_doomed_pages_fault_on_every_attempt_and_only_they() -> None:
    faults = Faults(doomed=0.1)
    doomed = {n for n in range(1, 500) if is_doomed(faults, 1, "127.0.0.1", f"/p/{n}.html")}
    assert 20 <= len(doomed) <= 80 and not is_doomed(Faults(doomed=1.0), 1, "127.0.0.1", "/")
    for n in range(1, 500):
        results = [outcome(faults, 1, "127.0.0.1", f"/p/{n}.html", a) for a in range(1, 20)]
        if n in doomed:
            assert all(r.fault in ("reset", "429", "503") for r in results), n
        else:
            assert results[faults.max_failures:] == [Outcome(200)] * (19 - faults.max_failures)
    never = Faults(reset=0, too_many=0, unavailable=0, doomed=1.0)
    assert outcome(never, 1, "127.0.0.1", "/p/3.html", 5) == Outcome(503)
    assert Faults.parse(faults.spec()) == faults


def test_max_per_window_on_a_synthetic_log() -> None:
    def at(host: str, *stamps: float) -> list[dict[str, object]]:
        return [{"ts": 1000.0 + s, "host": f"{host}:80", "site": host} for s in stamps]

    entries = (at("127.0.0.1", 0.0, 0.1, 0.5, 0.99, 1.0, 1.5, 1.6, 1.7, 3.0)
               + at("127.0.0.2", 0.2, 0.3))
    # [0.5, 1.5) holds 0.5, 0.99, 1.0 and [0.99, 1.99) holds 0.99, 1.0, 1.5, 1.6, 1.7
    assert max_per_window(entries, "127.0.0.1") == 5
    assert max_per_window(entries, "127.0.0.1:80") == 5
    assert max_per_window(entries, "127.0.0.2") == 2
    assert max_per_window(entries, "127.0.0.1", window=0.005) == 1
    assert max_per_window(entries, "127.0.0.1", window=10) == 9
    assert max_per_window(entries, "127.0.0.3") == 0
    assert max_per_window(at("127.0.0.1", 0.0, 1.0), "127.0.0.1") == 1  # half-open window


def _digest(faults: Faults) -> str:
    digest = hashlib.sha256()
    for seed in (1, 3, 7):
        for host in ("127.0.0.1", "127.0.0.2"):
            for n in range(300):
                path = "/" if n == 0 else f"/p/{n}.html"
                for attempt in range(1, 6):
                    digest.update(repr(outcome(faults, seed, host, path, attempt)).encode())
    return digest.hexdigest()


def test_the_random_profile_is_unchanged_by_the_hostile_one() -> None:
    """Digests of the random profile's outcomes and its spec, recorded before ``profile``."""
    heavy = Faults(reset=0.15, too_many=0.15, unavailable=0.15, slow=0.15, slow_min=0.2,
                   slow_max=0.4)
    assert _digest(Faults()).startswith("1521d78933a2a955")
    assert _digest(Faults(doomed=0.05)).startswith("dd95ab5cfcf96e8e")
    assert _digest(heavy).startswith("dda8157ac5b0f69f")
    assert _digest(Faults.parse("none")).startswith("32ae01cb9697d502")
    assert Faults().spec() == ("reset=0.05,too_many=0.1,unavailable=0.1,slow=0.1,slow_min=1.0,"
                               "slow_max=3.0,max_failures=2,doomed=0.0")


def test_hostile_profile_parses_and_round_trips() -> None:
    assert HOSTILE_FAULTS == Faults(profile="hostile") and HOSTILE_FAULTS.spec() == "hostile"
    assert Faults.parse("profile=hostile") == HOSTILE_FAULTS
    odd = Faults(profile="hostile", max_failures=5)
    assert Faults.parse(odd.spec()) == odd and "profile=hostile" in odd.spec()
    assert Faults.parse("random") == Faults()
    with pytest.raises(ValueError, match="unknown fault profile"):
        Faults.parse("profile=friendly")
    with pytest.raises(ValueError, match="no per-page scenarios"):
        scenario(Faults(), 1, "127.0.0.1", "/")
    assert not is_doomed(Faults(profile="hostile", doomed=1.0), 1, "127.0.0.1", "/p/3.html")


def test_hostile_scenarios_are_deterministic_per_page() -> None:
    names = {entry.name for entry in HOSTILE}
    first = page_scenarios(HOSTILE_FAULTS, 1, ("127.0.0.1", "127.0.0.2"), 500)
    assert first == page_scenarios(HOSTILE_FAULTS, 1, ("127.0.0.1", "127.0.0.2"), 500)
    assert set(first) == names | {None}
    assert first != page_scenarios(HOSTILE_FAULTS, 2, ("127.0.0.1", "127.0.0.2"), 500)
    # the roll is per (seed, host, path): the same path on another host is another page
    assert first[2:] != page_scenarios(HOSTILE_FAULTS, 1, ("127.0.0.2", "127.0.0.1"), 500)[2:]
    homes = {scenario(HOSTILE_FAULTS, seed, "127.0.0.1", "/") for seed in range(40)}
    assert homes == names | {None}, "a host's / has a scenario too"


def test_hostile_proportions_match_over_a_large_sample() -> None:
    pages = 20_000
    counts = Counter(scenario(HOSTILE_FAULTS, 5, "127.0.0.1", f"/p/{n}.html")
                     for n in range(pages))
    for entry in HOSTILE:
        assert abs(counts[entry.name] / pages - entry.share) < 0.01, (entry.name, counts)
    expected = {"503x1": 1 / 6, "429x2": 1 / 8, "reset": 1 / 10, "503x3": 1 / 12, "slow": 1 / 15}
    assert {entry.name: entry.share for entry in HOSTILE} == expected
    assert abs(counts[None] / pages - (1 - sum(expected.values()))) < 0.01
    failing = sum(counts[name] for name in FAILING) / pages
    assert failing >= 0.40, failing


def test_hostile_pages_fail_their_attempts_then_succeed() -> None:
    sequences = {
        "503x1": [Outcome(503)],
        "429x2": [Outcome(429, retry_after=1)] * 2,
        "reset": [Outcome(None)],
        "503x3": [Outcome(503)] * 3,
        "slow": [Outcome(200, delay=2.0)],
        None: [],
    }
    seen: Counter[str | None] = Counter()
    for n in range(600):
        host, path = ("127.0.0.1", "127.0.0.2")[n % 2], "/" if n < 2 else f"/p/{n}.html"
        name = scenario(HOSTILE_FAULTS, 9, host, path)
        results = [outcome(HOSTILE_FAULTS, 9, host, path, a) for a in range(1, 8)]
        failing = sequences[name]
        assert results == failing + [Outcome(200)] * (7 - len(failing)), (n, name)
        assert results[len(failing)] == Outcome(200)  # attempt N + 1 succeeds at once
        seen[name] += 1
        if name == "429x2":
            assert all(r.retry_after == 1 for r in results[:2])
        if name in FAILING:
            assert results[0].fault is not None
    assert set(seen) == set(sequences)
