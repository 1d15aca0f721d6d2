"""The fault origin's model, without serving it: which attempt of which page faults, how, and
the busiest-window count over a request log (tests/integration/test_faultorigin.py serves it)."""

from __future__ import annotations

import pytest
from servers.faultorigin import (
    Faults,
    Outcome,
    is_doomed,
    max_per_window,
    outcome,
)


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
