import pytest
from scrapy import Request

from crawler.frontier.buffer import RequestBuffer


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_priority_first_then_arrival_order():
    buffer: RequestBuffer[str] = RequestBuffer()
    for name, priority in [("a", 0), ("b", 5), ("c", 0), ("d", 5), ("e", -1)]:
        buffer.push(Request(f"http://x.test/{name}", priority=priority), name)
    order = [buffer.pop()[1] for _ in range(5)]
    assert order == ["b", "d", "a", "c", "e"]
    assert buffer.pop() is None and len(buffer) == 0


def test_a_delayed_request_waits_without_blocking_others():
    clock = Clock()
    buffer: RequestBuffer[str] = RequestBuffer(clock)
    buffer.push(Request("http://x.test/later", priority=100), "later", not_before=clock.now + 5)
    buffer.push(Request("http://x.test/now"), "now")
    assert (buffer.ready, buffer.delayed, len(buffer)) == (1, 1, 2)
    assert buffer.next_due() == 5
    assert buffer.pop()[1] == "now"
    assert buffer.pop() is None  # still pending: has_pending_requests stays true
    assert len(buffer) == 1
    clock.now += 5
    assert buffer.pop()[1] == "later"
    assert buffer.next_due() is None


def test_a_due_request_keeps_its_priority():
    clock = Clock()
    buffer: RequestBuffer[str] = RequestBuffer(clock)
    buffer.push(Request("http://x.test/retry", priority=-5), "retry", not_before=clock.now + 1)
    buffer.push(Request("http://x.test/high", priority=3), "high")
    clock.now += 2
    assert [buffer.pop()[1], buffer.pop()[1]] == ["high", "retry"]


def test_past_not_before_is_ready_at_once():
    clock = Clock()
    buffer: RequestBuffer[str] = RequestBuffer(clock)
    buffer.push(Request("http://x.test/"), "x", not_before=clock.now - 1)
    assert buffer.ready == 1


def test_a_request_that_waited_goes_before_the_ready_ones_of_its_priority():
    clock = Clock()
    buffer: RequestBuffer[str] = RequestBuffer(clock)
    buffer.push(Request("http://slow.test/1"), "due first", not_before=clock.now + 1)
    buffer.push(Request("http://slow.test/2"), "due second", not_before=clock.now + 1.5)
    for name in ("a", "b"):
        buffer.push(Request(f"http://x.test/{name}"), name)
    buffer.block("busy.test", Request("http://busy.test/"), "unblocked")
    buffer.push(Request("http://x.test/high", priority=1), "high")
    clock.now += 2
    buffer.unblock("busy.test", 1)
    buffer.push(Request("http://x.test/c"), "c")
    order = [buffer.pop()[1] for _ in range(7)]
    # the waited ones in the order they became free to go (the delayed ones when the buffer
    # was next asked); the ready ones after them, however long before they came
    assert order == ["high", "unblocked", "due first", "due second", "a", "b", "c"]


def test_hurry_brings_the_first_waiting_request_of_a_unit_forward():
    clock = Clock()
    buffer: RequestBuffer[str] = RequestBuffer(clock)
    for name, due in [("a2", 3.0), ("a1", 2.0), ("b", 1.0), ("a0", 0.5)]:
        buffer.push(Request(f"http://{name[0]}.test/{name}"), name, not_before=clock.now + due)
    wants_a = lambda request: request.url.startswith("http://a.test/")  # noqa: E731
    assert buffer.hurry(wants_a, clock.now + 0.2)  # a0, the first of a.test, now at +0.2
    assert not buffer.hurry(wants_a, clock.now + 5)  # none waits longer than that
    clock.now += 0.2
    assert buffer.pop()[1] == "a0" and buffer.pop() is None
    assert buffer.hurry(wants_a, clock.now)  # a1 next (of a1 and a2)
    assert buffer.pop()[1] == "a1" and buffer.pop() is None
    assert buffer.next_due() == pytest.approx(0.8)  # b at +1, untouched
    assert not buffer.hurry(lambda request: False, clock.now)
