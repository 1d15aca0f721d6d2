from crawler.frontier.leases import AckBarrier, Lease, LeaseRegistry, OffsetTracker

TP = ("t.requests", 0)


def test_commits_only_the_finished_prefix():
    tracker = OffsetTracker()
    for offset in range(10, 15):
        tracker.deliver(TP, offset)
    assert tracker.committable(TP) == 10
    tracker.finish(TP, 12)
    tracker.finish(TP, 11)
    assert tracker.committable(TP) == 10  # 10 still in flight holds the partition back
    tracker.finish(TP, 10)
    assert tracker.committable(TP) == 13
    tracker.finish(TP, 14)
    tracker.finish(TP, 13)
    assert tracker.committable(TP) == 15
    assert tracker.in_flight() == 0


def test_partitions_are_independent_and_forgettable():
    tracker = OffsetTracker()
    other = ("t.requests", 1)
    tracker.deliver(TP, 0)
    tracker.deliver(other, 7)
    tracker.finish(other, 7)
    assert tracker.committable(TP) == 0
    assert tracker.committable(other) == 8
    tracker.forget(TP)
    assert tracker.committable(TP) is None
    tracker.finish(TP, 0)  # an ack of a revoked partition is ignored
    assert tracker.committable(TP) is None


def test_refetched_records_are_not_tracked_twice():
    tracker = OffsetTracker()
    tracker.deliver(TP, 0)
    tracker.deliver(TP, 1)
    tracker.deliver(TP, 0)
    tracker.finish(TP, 0)
    tracker.finish(TP, 1)
    assert tracker.committable(TP) == 2
    assert tracker.in_flight(TP) == 0


def test_nothing_delivered_means_nothing_to_commit():
    assert OffsetTracker().committable(TP) is None


def test_barrier_holds_a_lease_until_earlier_operations_end():
    released: list[str] = []
    barrier = AckBarrier(released.append)
    child_a = barrier.begin()
    child_b = barrier.begin()
    barrier.finish("parent")
    late = barrier.begin()  # begun after the parent finished: not its child
    barrier.end(child_b)
    assert released == []
    barrier.end(child_a)
    assert released == ["parent"]
    barrier.finish("other")
    assert released == ["parent"]  # "other" waits for the operation begun before it
    barrier.end(late)
    assert released == ["parent", "other"]
    assert barrier.pending_ops == 0 and barrier.waiting == 0


def test_barrier_releases_immediately_without_operations():
    released: list[int] = []
    barrier = AckBarrier(released.append)
    barrier.finish(1)
    barrier.finish(2)
    assert released == [1, 2]


def test_barrier_releases_in_finish_order():
    released: list[str] = []
    barrier = AckBarrier(released.append)
    first = barrier.begin()
    barrier.finish("a")
    second = barrier.begin()
    barrier.finish("b")
    barrier.end(second)
    assert released == []
    barrier.end(first)
    assert released == ["a", "b"]


def _registry():
    acked: list[Lease] = []
    return LeaseRegistry(acked.append), acked


def test_lease_ends_when_its_last_request_leaves_the_engine():
    registry, acked = _registry()
    lease = Lease("t", 0, 7, epoch=1)
    original = object()
    lease_id = registry.register(lease, original)
    registry.start(original, lease)
    retry = object()
    assert registry.live(lease_id) is lease
    registry.enter(retry, lease)  # a retry keeps the lease
    registry.left(original)
    assert acked == [] and not lease.finished
    registry.left(retry)
    assert acked == [lease] and lease.acked
    assert registry.live(lease_id) is None and not registry.busy


def test_no_continuation_once_the_response_reached_the_spider():
    registry, _ = _registry()
    lease = Lease("t", 0, 1, epoch=1)
    request = object()
    lease_id = registry.register(lease, request)
    registry.start(request, lease)
    registry.scraping(request)
    assert registry.live(lease_id) is None  # a request with copied meta is a child


def test_lease_waits_for_the_children_begun_before_it_ended():
    registry, acked = _registry()
    lease = Lease("t", 0, 1, epoch=1)
    request = object()
    registry.register(lease, request)
    registry.start(request, lease)
    child = registry.barrier.begin()
    registry.left(request)
    assert acked == [] and registry.busy
    registry.barrier.end(child)
    assert acked == [lease]


def test_stuck_leases_are_found():
    registry, _ = _registry()
    lease = Lease("t", 0, 1, epoch=1)
    request = object()
    registry.register(lease, request)
    registry.start(request, lease)
    assert registry.stuck(3600) == []
    lease.started -= 7200
    assert registry.stuck(3600) == [lease]
