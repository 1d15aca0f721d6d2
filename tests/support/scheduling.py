"""How ``./run tests`` hands tests to its pytest-xdist processes (``--dist loadgroup``).

Each process starts its own session fixtures. The tests of a file in :data:`SHARED` share a
costly one (a three-broker cluster, the secured stack, a built wheel): one process runs all
the tests of its group, so the fixture starts once, not once a process. Every other test is
its own unit, handed out in collection order (the longest first, ``tests/conftest.py``).

pytest-xdist 3.8's own ``xdist_group`` mark does nothing under pytest 9 (it renames
``item._nodeid``, which pytest 9 no longer reads), hence this table.
"""

from __future__ import annotations

from typing import Any

from xdist.scheduler import LoadScopeScheduling

SHARED = {
    "tests/e2e/test_kafka_failover.py": "kafka_cluster",
    "tests/integration/test_durable_topics.py": "kafka_cluster",
    "tests/e2e/test_secured_stack_crawl.py": "secured_stack",
    "tests/e2e/test_scrapyd.py": "secured_stack",
    "tests/integration/test_secured_mongo.py": "secured_mongo",
    "tests/e2e/test_startup_mongo_uri.py": "secured_mongo",
    "tests/integration/test_wheel.py": "wheel",
}


def group_of(nodeid: str) -> str:
    """The unit of work of the test *nodeid*: its group, or itself."""
    return SHARED.get(nodeid.split("::", 1)[0], nodeid)


class GroupedScheduling(LoadScopeScheduling):
    """Load scheduling of units: the groups of :data:`SHARED`, every other test alone."""

    def _split_scope(self, nodeid: str) -> str:
        return group_of(nodeid)


def make_scheduler(config: Any, log: Any) -> GroupedScheduling | None:
    """The scheduler of ``--dist loadgroup``; ``None`` leaves any other mode to xdist."""
    if config.getvalue("dist") != "loadgroup":
        return None
    return GroupedScheduling(config, log)
