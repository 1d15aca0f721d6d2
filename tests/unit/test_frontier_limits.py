"""Pure logic of the frontier's limits: which send errors are final, one wake-up timer,
what a stuck lease is, and the bound of seed claims (no broker: see the e2e tests)."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import pytest
from kafka import errors as kafka_errors

from crawler.frontier.delay import Wakeup
from crawler.frontier.leases import Lease, LeaseRegistry
from crawler.frontier.producer import Sender, permanent


def test_only_errors_a_retry_cannot_fix_are_permanent() -> None:
    assert permanent(kafka_errors.MessageSizeTooLargeError("2 MB"))
    assert permanent(kafka_errors.InvalidRecordError())
    for transient in (kafka_errors.KafkaTimeoutError(), kafka_errors.KafkaConnectionError(),
                      kafka_errors.NotLeaderForPartitionError(), RuntimeError("down")):
        assert not permanent(transient)


@pytest.mark.parametrize("error", [
    kafka_errors.TopicAuthorizationFailedError(), kafka_errors.ClusterAuthorizationFailedError(),
    kafka_errors.SaslAuthenticationFailedError("rotated password")])
def test_a_refusal_by_the_acls_or_the_login_stalls_and_is_never_rejected(
        error: Exception, caplog: pytest.LogCaptureFixture) -> None:
    """Issue 33: a revoked ACL is an operator's change, undone later. The send is retried
    (never dead-lettered, never counted done), with one ERROR for the stall, not one a send;
    the first send that gets through ends the stall."""
    later: list[Any] = []
    sender, done, refused = _sender(later), [], []
    for _ in range(3):
        sender.send("t", None, b"v", lambda p, o: done.append(o), rejected=refused.append)
    jobs = [sender._queue.get() for _ in range(3)]
    with caplog.at_level(logging.INFO, logger="crawler.frontier.producer"):
        for job in jobs:
            sender._failed(job, error)
        assert not permanent(error) and refused == [] and done == []
        assert len(later) == 3 and sender.pending == 3 and sender.rejected == 0
        assert sender.refused_since is not None and sender.refusals == 1
        errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
        assert len(errors) == 1 and "refuses this worker's sends to t" in errors[0], errors
        sender._acks.append((lambda p, o: done.append(o), 0, 7))
        sender._acked()  # a retry went through: the ACL is back
    assert sender.refused_since is None and done == [7]
    assert any("takes this worker's sends again" in r.getMessage() for r in caplog.records)


def _sender(later: list[Any]) -> Sender:
    return Sender(None, call_from_thread=lambda f, *a: f(*a),  # type: ignore[arg-type]
                  call_later=lambda delay, *a: later.append(a), backoff=1, backoff_max=1)


def test_a_permanent_error_ends_the_send_through_rejected() -> None:
    later: list[Any] = []
    sender, done, refused = _sender(later), [], []
    sender.send("t", None, b"v" * 10, lambda p, o: done.append(o), rejected=refused.append)
    job = sender._queue.get()
    sender._failed(job, kafka_errors.MessageSizeTooLargeError("too big"))
    assert later == [] and done == [] and len(refused) == 1
    assert sender.pending == 0 and sender.rejected == 1


def test_a_transient_error_is_retried_with_its_rejected_callback() -> None:
    later: list[Any] = []
    sender, refused = _sender(later), []
    sender.send("t", None, b"v", lambda p, o: None, rejected=refused.append)
    sender._failed(sender._queue.get(), kafka_errors.KafkaTimeoutError())
    assert refused == [] and sender.pending == 1
    func, *args = later.pop()
    func(*args)  # the retry keeps its callback: a later permanent error still ends it
    sender._failed(sender._queue.get(), kafka_errors.MessageSizeTooLargeError())
    assert len(refused) == 1 and sender.pending == 0


class _Call:
    def __init__(self, timers: list[_Call], delay: float, func: Any) -> None:
        self.delay, self.func, self.cancelled = delay, func, False
        timers.append(self)

    def active(self) -> bool:
        return not self.cancelled

    def cancel(self) -> None:
        self.cancelled = True


def test_one_timer_for_many_delayed_requests() -> None:
    timers: list[_Call] = []
    woken: list[int] = []
    due: list[float | None] = [None]
    wakeup = Wakeup(lambda delay, func: _Call(timers, delay, func), lambda: woken.append(1),
                    lambda: due[0])
    now = time.time()
    for i in range(100):
        wakeup.at(now + 50 + i)  # later than the first: no new timer
    assert len(timers) == 1
    wakeup.at(now + 10)  # earlier: replaces it
    assert len(timers) == 2 and timers[0].cancelled
    due[0] = 5.0
    timers[1].func()
    assert woken == [1] and len(timers) == 3 and 4 < timers[2].delay <= 5


def test_a_parked_lease_is_not_stuck() -> None:
    registry = LeaseRegistry(lambda lease: None)
    lease = Lease("t", 0, 0, 1)
    registry.register(lease, "request")
    registry.start("request", lease)
    registry.park("retry", lease)
    registry.left("request")
    lease.started -= 7200
    assert registry.stuck(3600) == []  # waiting in the buffer is not being stuck
    registry.unpark(lease)
    assert registry.stuck(3600) == []  # it just left the buffer: progress
    lease.started -= 7200
    assert registry.stuck(3600) == [lease]


def test_seed_claims_run_under_their_bound() -> None:
    from scrapy import Spider

    from crawler.frontier.consumer import Record
    from crawler.frontier.seeding import SeedClaims
    from crawler.frontier.seedtrust import SeedSigner

    running, peak = [0], [0]

    class State:
        async def claim_seed(self, fingerprint: str, record: str) -> bool:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
            await asyncio.sleep(0.001)
            running[0] -= 1
            return True

    class Stats:
        def inc_value(self, key: str) -> None:
            pass

    finished: list[Lease] = []

    async def main() -> None:
        claims = SeedClaims(spider=Spider("s"), fingerprint=lambda r: r.url.encode(),
                            state=State(), submit=lambda *a, **k: True, stats=Stats(),
                            finish=finished.append, dead=lambda *a: None, limit=4,
                            signer=SeedSigner(b"a seed key of 16+ bytes"))
        coros = [claims.take(Record("s", 0, i, f"http://a.test/{i}".encode(), 1),
                             Lease("s", 0, i, 1)) for i in range(100)]
        await asyncio.gather(*[c for c in coros if c is not None])
        assert claims.pending == 0

    asyncio.run(main())
    assert peak[0] == 4 and len(finished) == 100
