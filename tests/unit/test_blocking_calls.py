"""Blocking client calls a worker may give up on: they end by themselves, and one still
running cannot keep a closed worker's process alive."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from typing import Any

import pytest

from crawler.connections import kafka_clients
from crawler.connections.clients import committed_offsets
from crawler.connections.tasks import in_thread

pytestmark = pytest.mark.unit

# a worker's close in miniature: a call that never returns, given up by wait_for, then exit
CALL = 6  # seconds the abandoned call would take
ABANDON = """
import asyncio, time
from crawler.connections.tasks import in_thread
async def main():
    try:
        await asyncio.wait_for({call}(lambda: time.sleep({CALL}), {name}), 0.2)
    except (asyncio.TimeoutError, TimeoutError):
        print("gave up", flush=True)
asyncio.run(main())
"""


def _exit_after_giving_up(call: str, name: str) -> float:
    """Seconds from the script's "gave up" to its exit: not its start-up, which a loaded
    machine stretches (CI, 2026-12-07: 9.8 s from the start, beside the serial tests)."""
    script = ABANDON.format(call=call, name=name, CALL=CALL)
    with subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True) as proc:
        assert proc.stdout is not None and proc.stderr is not None
        line = proc.stdout.readline()
        gave_up = time.monotonic()
        proc.wait(timeout=120)
        assert line.strip() == "gave up", proc.stderr.read()
    return time.monotonic() - gave_up


def test_a_call_given_up_does_not_hold_the_process_at_exit() -> None:
    # the call began 0.2 s before "gave up": the process either exits then or lives it out
    assert _exit_after_giving_up("in_thread", "'stuck'") < CALL / 2  # not waited for
    # asyncio.to_thread's executor is joined at exit: the process lives out the whole call
    assert _exit_after_giving_up("asyncio.to_thread", "") >= CALL / 2


def test_in_thread_hands_back_the_result_and_the_exception() -> None:
    def fails() -> None:
        raise KeyError("lost")

    async def both() -> tuple[int, BaseException]:
        result = await in_thread(lambda: 6 * 7, "sum")
        try:
            await in_thread(fails, "fails")
        except KeyError as exc:
            return result, exc
        raise AssertionError("no exception")

    result, exc = asyncio.run(both())
    assert result == 42 and exc.args == ("lost",)


class Clock:
    """``time`` for :mod:`crawler.connections.kafka_clients`: only ``monotonic``, moved by
    hand (a real sleep made the bounds depend on the machine's load: 0.4 s slept 0.5 in CI)."""

    def __init__(self) -> None:
        self.now = 100.0

    def monotonic(self) -> float:
        return self.now


class SlowCoordinator:
    """A consumer whose ``committed()`` takes 0.375 s of *clock* and honours its timeout."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.timeouts: list[int] = []

    def committed(self, tp: Any, timeout_ms: int | None = None) -> int:
        assert timeout_ms is not None, "no deadline: kafka-python would retry for ever"
        self.timeouts.append(timeout_ms)
        if timeout_ms < 400:
            raise TimeoutError(f"{tp} within {timeout_ms} ms")
        self.clock.now += 0.375  # exact in binary: the timeouts are exact too
        return 7


def test_committed_offsets_share_one_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = Clock()
    monkeypatch.setattr(kafka_clients, "time", clock)
    consumer = SlowCoordinator(clock)
    assert committed_offsets(consumer, ["a", "b"], timeout=5.0) == {"a": 7, "b": 7}
    consumer = SlowCoordinator(clock)
    with pytest.raises(TimeoutError):
        committed_offsets(consumer, ["a", "b", "c", "d"], timeout=1.0)
    assert consumer.timeouts == [1000, 625, 250]  # what is left of one deadline, each time
