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
