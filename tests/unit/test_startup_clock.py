"""Where a worker's start-up goes: the parts between the marks, and the one line."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from scrapy import Request, Spider, signals
from scrapy.utils.test import get_crawler

from crawler.frontier import startup


@pytest.fixture(autouse=True)
def fresh() -> Iterator[None]:
    startup.reset()
    yield
    startup.reset()

IMPORTED = time.time()  # when pytest imported this module


def test_each_part_runs_from_the_mark_before_it() -> None:
    for part, at in [("imports", 10.5), ("preflight", 10.75), ("setup", 11.0),
                     ("connections", 11.1), ("topics", 11.3), ("join", 14.3),
                     ("first_request", 14.4)]:
        startup.mark(part, at)
    found = startup.parts(started=10.0)
    assert list(found) == list(startup.PARTS)
    assert found["imports"] == 0.5 and found["join"] == pytest.approx(3.0)
    assert sum(found.values()) == pytest.approx(4.4)
    assert startup.line(found).startswith("Start-up: 4.40 s to the first request (imports 0.50 s")
    assert "group join 3.00 s, first request 0.10 s)" in startup.line(found)


def test_a_second_mark_keeps_the_first_and_a_missing_part_folds_into_the_next() -> None:
    startup.mark("setup", 2.0)
    startup.mark("setup", 9.0)  # a second crawler of the process, a second rebalance
    startup.mark("first_request", 3.0)
    assert startup.parts(started=1.0) == {"setup": 1.0, "first_request": 1.0}
    assert startup.parts(started=None) == {"first_request": 1.0}
    with pytest.raises(ValueError, match="unknown start-up part"):
        startup.mark("lunch")


SKEW = 60.0  # seconds


def test_the_process_start_comes_from_proc(tmp_path: Path) -> None:
    started = startup.process_start()
    # this process began before this module was imported, and after the machine booted (a
    # whole suite may run for more than an hour before the unit tests)
    # SKEW: this sandbox's /proc/uptime and a process's start ticks once disagreed by 14 s late
    # in a loaded CI run (the start came out after this module's import); the computation
    # itself is pinned exactly on the files below
    booted = time.time() - float(Path("/proc/uptime").read_text().split()[0])
    assert started is not None and booted - SKEW <= started <= IMPORTED + SKEW
    stat, uptime = tmp_path / "stat", tmp_path / "uptime"
    ticks = os.sysconf("SC_CLK_TCK")
    stat.write_text("1 (a (b) c) S " + " ".join(["0"] * 18) + f" {5 * ticks} 0 0\n")
    uptime.write_text("7.25 3.10\n")  # booted 7.25 s ago; the process started 2.25 s ago
    assert startup.process_start(str(stat), str(uptime), now=lambda: 1000.0) == 997.75
    assert startup.process_start(str(tmp_path / "none"), str(uptime)) is None


def test_the_first_request_sent_reports_once(caplog: pytest.LogCaptureFixture) -> None:
    crawler = get_crawler(Spider)
    watch = startup.StartupWatch(crawler, started=lambda: time.time() - 2.0)  # kept: weak refs
    startup.mark("setup")
    with caplog.at_level(logging.INFO, logger="crawler.frontier.startup"):
        for _ in range(2):
            crawler.signals.send_catch_log(signals.request_reached_downloader,
                                           request=Request("https://a.test/"), spider=None)
    [line] = [r.getMessage() for r in caplog.records]
    assert watch.reported
    assert line.startswith("Start-up: 2.0") and "setup 2.0" in line
    assert crawler.stats.get_value("startup/total") == pytest.approx(2.0, abs=0.1)  # type: ignore[union-attr]
    assert crawler.stats.get_value("startup/setup") == pytest.approx(2.0, abs=0.1)  # type: ignore[union-attr]
