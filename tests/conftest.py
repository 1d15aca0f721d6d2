"""Fixtures for tests against real services: one local stack per session, and a demo site.

Nothing starts at import time: a test that uses none of these fixtures starts nothing.
"""

from __future__ import annotations

import logging
import re
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import in_ci
from support.demo_site import PAGES as SITE_DIR_PAGES
from support.minutes import cpu_seconds
from support.scheduling import make_scheduler

from crawler.connections.kafka_logs import CLIENT_LOGGERS
from crawler.localstack.kafka_cluster import KafkaCluster
from crawler.localstack.secured import SecuredStack
from crawler.localstack.secured_mongo import SecuredMongo, start_secured_mongod
from crawler.localstack.stack import Stack

DEMO_SITE_PAGES = 50
CPU_AT_START = pytest.StashKey[float]()


@pytest.fixture(autouse=True)
def _client_log_levels() -> Iterator[None]:
    """A crawl's add-on sets the clients' loggers to CLIENT_LOG_LEVEL for its process; a
    test's crawl must not change what the next test's caplog sees of kafka-python."""
    saved = {name: logging.getLogger(name).level for name in CLIENT_LOGGERS}
    yield
    for name, level in saved.items():
        logging.getLogger(name).setLevel(level)


@pytest.fixture(scope="session")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """Redis, Apache Kafka (one node) and MongoDB on free loopback ports, stopped at the end."""
    services = Stack(tmp_path_factory.mktemp("stack"))
    try:
        services.start()
        yield services
    finally:
        services.stop()


@pytest.fixture(scope="session")
def kafka_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    """Three Apache Kafka brokers as production runs them (replication 3, min ISR 2), for the
    tests of replication and broker failures; a test that kills a node starts it again."""
    cluster = KafkaCluster(tmp_path_factory.mktemp("kafka3"))
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[str]:
    """A Redis of this test alone, which it may flush, limit or give ACL users."""
    services = Stack(tmp_path / "own-redis")
    try:
        yield services.start(["redis"])["REDIS_URL"]
    finally:
        services.stop()


@pytest.fixture
def own_stack(tmp_path: Path) -> Iterator[Stack]:
    """A stack of this test alone, nothing started: the test starts what it needs."""
    stack = Stack(tmp_path / "stack")
    try:
        yield stack
    finally:
        stack.stop()


# --- secured services ---------------------------------------------------------------------
@pytest.fixture(scope="session")
def secured_mongo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecuredMongo]:
    """A mongod with auth (keyfile), TLS required and a single-node replica set rs0."""
    mongo = start_secured_mongod(tmp_path_factory.mktemp("secured-mongo"))
    try:
        yield mongo
    finally:
        mongo.stop()


@pytest.fixture(scope="session")
def secured_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecuredStack]:
    """The secured local stack (``stack start --secured``): Redis, mongod and the broker, each
    with TLS and a user; its settings are :meth:`SecuredStack.env`."""
    stack = SecuredStack(tmp_path_factory.mktemp("secured-stack"))
    try:
        stack.start()
        yield stack
    finally:
        stack.stop()


@pytest.fixture(scope="session")
def redis_url(stack: Stack) -> str:
    return stack.env()["REDIS_URL"]


@pytest.fixture(scope="session")
def kafka_bootstrap(stack: Stack) -> str:
    return stack.env()["KAFKA_BOOTSTRAP_SERVERS"]


@pytest.fixture(scope="session")
def mongo_uri(stack: Stack) -> str:
    return stack.env()["MONGO_URI"]


@pytest.fixture
def crawl_id(request: pytest.FixtureRequest) -> str:
    """A crawl id unique to this test run: ``t-<test name>-<hex>`` (``[A-Za-z0-9._-]``, <= 100)."""
    name = re.sub(r"[^A-Za-z0-9._-]+", "-", request.node.name).strip("-.")
    return f"t-{name[:80]}-{secrets.token_hex(4)}"


@pytest.fixture(scope="session")
def demo_site_pages() -> int:
    """How many pages the ``demo_site`` fixture serves."""
    return DEMO_SITE_PAGES


@pytest.fixture(scope="module")
def site_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A generated demo site of ``support.demo_site.PAGES`` pages (not served), one a module."""
    from crawler.localstack.demo_site import generate

    directory = tmp_path_factory.mktemp("site")
    generate(directory, SITE_DIR_PAGES)
    return directory


@pytest.fixture(scope="session")
def demo_site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Base URL (no trailing slash) of a served demo site of ``DEMO_SITE_PAGES`` pages.

    ``crawler.localstack.demo_site.site_urls(demo_site, demo_site_pages)`` lists its pages.
    """
    from crawler.localstack import demo_site as site

    directory = tmp_path_factory.mktemp("demo_site")
    site.generate(directory, DEMO_SITE_PAGES)
    server = site.serve(directory)
    try:
        yield server.base_url
    finally:
        server.close()


GROUPS = ("unit", "integration", "e2e", "bench")
SERVICE_FIXTURES = frozenset({"stack", "own_redis", "redis_url", "kafka_bootstrap", "mongo_uri",
                              "secured_mongo", "secured_stack", "kafka_cluster"})


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark each test with its group: the folder it lives in (``pytest -m unit`` works too),
    unless it carries a group mark itself (two workers in an integration file: ``e2e``).

    A unit test that asks for a service is in the wrong folder: the run stops and says so.
    """
    misplaced = []
    for item in items:
        group = next((g for g in GROUPS if f"/tests/{g}/" in str(item.path)), None)
        if group is None:
            continue
        if not any(item.get_closest_marker(g) for g in GROUPS):  # an explicit mark wins
            item.add_marker(group)
        wants = SERVICE_FIXTURES.intersection(getattr(item, "fixturenames", ()))
        if group == "unit" and wants:
            misplaced.append(f"{item.nodeid} uses {', '.join(sorted(wants))}")
    if misplaced:
        raise pytest.UsageError("unit tests use no services; move these to tests/integration: "
                                + "; ".join(misplaced))
    if hasattr(config, "workerinput"):  # a pytest-xdist process: the long tests first
        items.sort(key=_run_order)


#: the e2e files that take longest (docs/testing.md), started first so none starts last
LONGEST = ("test_kafka_failover", "test_resilience_e2e", "test_recrawl",
           "test_alerts_live", "test_outages", "test_e2e_kill")


def _run_order(item: pytest.Item) -> tuple[int, int]:
    """e2e (the longest first), then integration, then unit: with the crawls handed out
    first, the two processes end together, the many short tests filling in behind them."""
    group = next((i for i, g in enumerate(("e2e", "integration", "unit"))
                  if item.get_closest_marker(g)), 3)
    name = Path(str(item.path)).stem
    return group, LONGEST.index(name) if name in LONGEST else len(LONGEST)


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> Iterator[None]:
    item.stash[CPU_AT_START] = cpu_seconds()
    yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """Under CI=true nothing skips: a skip there (a missing binary or extra, a test's own
    ``pytest.skip``) is reported as a failure that says why, not as a quiet ``s``. The test's
    CPU time goes into the JUnit XML (``cpu_s``, :func:`support.minutes.cpu_seconds`)."""
    if call.when == "teardown" and CPU_AT_START in item.stash:
        item.user_properties.append(("cpu_s", f"{cpu_seconds() - item.stash[CPU_AT_START]:.2f}"))
    outcome: Any = yield
    _fail_a_skip_in_ci(outcome.get_result())


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector: pytest.Collector) -> Iterator[None]:
    """The same for a whole module skipped while it is collected."""
    outcome: Any = yield
    _fail_a_skip_in_ci(outcome.get_result())


def _fail_a_skip_in_ci(report: pytest.TestReport | pytest.CollectReport) -> None:
    if in_ci() and report.skipped and not hasattr(report, "wasxfail"):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else report.longrepr
        report.outcome = "failed"
        report.longrepr = f"skipped under CI=true, where every test must run: {reason}"


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``--dist loadgroup``: the groups of :data:`support.scheduling.SHARED` (one process per
    costly shared fixture), every other test alone."""
    return make_scheduler(config, log)
