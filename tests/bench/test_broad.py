"""The broad-crawl benchmark's report maths (benchmarks/broad_report.py): the bound and the
politeness violations read from an origin's access log. Pure functions, no services."""

from __future__ import annotations

import pytest

from benchmarks import broad_report as maths
from benchmarks.broad_site import PROBE, Host

A, B, C = "127.20.0.1", "127.20.0.2", "127.20.0.3"


def line(end: float, host: str, uri: str, took: float = 0.0, status: int = 200) -> str:
    """One access-log line as nginx writes it ($msec ... $request_time ...)."""
    return f"{end:.3f} {host} {uri} {status} {took:.3f} 1 1 100"


def test_parse_reads_start_and_end_and_skips_the_start_up_check() -> None:
    hits = maths.parse([line(10.5, A, "/p/1.html", took=0.25, status=404),
                        line(11.0, A, PROBE, status=404), "garbage"])
    assert hits == [maths.Hit(10.25, 10.5, A, "/p/1.html", 404)]


def test_gap_violations_are_starts_closer_than_the_crawl_delay() -> None:
    log = [line(100.0, A, "/robots.txt"), line(100.001, A, "/"),  # robots.txt left out
           line(101.001, A, "/p/1.html"),  # 1.000 s: kept
           line(101.5, A, "/p/2.html"),  # 0.499 s: a violation
           line(102.496, A, "/p/3.html"),  # 0.996 s: within the log's rounding
           line(103.2, A, "/p/4.html", took=0.3),  # started 102.9: 0.404 s
           line(100.0, B, "/"), line(100.1, B, "/p/1.html")]  # B has no delay
    gaps = maths.gap_violations(maths.parse(log), {A: 1.0})
    assert [(g.host, round(g.gap, 3)) for g in gaps] == [(A, 0.499), (A, 0.404)]
    assert maths.gap_violations(maths.parse(log), {A: 0.4}) == []


def test_in_flight_counts_requests_that_start_at_the_host_limit() -> None:
    log = [line(10.0, A, "/p/1.html", took=1.0),  # 9-10
           line(10.5, A, "/p/2.html", took=1.0),  # 9.5-10.5
           line(10.2, A, "/p/3.html", took=0.4),  # 9.8-10.2: a third at once
           line(11.0, A, "/p/4.html", took=0.5),  # 10.5-11: touches, does not overlap
           line(10.3, A, "/p/5.html"),  # an instant inside 9.5-10.5 (one open then)
           line(20.0, B, "/"), line(20.0, B, "/p/1.html"), line(20.0, B, "/p/2.html")]
    flight = maths.in_flight(maths.parse(log), limit=2)
    assert flight[A] == (3, 1)
    assert flight[B] == (1, 0)  # served within one millisecond: no certain overlap
    assert maths.in_flight(maths.parse(log), limit=3)[A] == (3, 0)


def test_robots_fetches_per_host() -> None:
    hits = maths.parse([line(1, A, "/robots.txt"), line(2, A, "/robots.txt"),
                        line(1, B, "/robots.txt", status=404), line(3, B, "/")])
    assert maths.robots_fetches(hits, [A, B, C]) == {
        "max": 2, "mean": 1.0, "more_than_once": 1, "never": 1, "total": 3}


def test_coverage_counts_site_pages_refetches_and_disallowed_fetches() -> None:
    hosts = [Host(0, A, 3), Host(1, B, 1)]
    hits = maths.parse([line(1, A, "/"), line(2, A, "/p/1.html"), line(3, A, "/p/1.html"),
                        line(4, A, "/p/2.html", status=500), line(5, A, "/private/0.html"),
                        line(6, B, "/gone/1.html", status=404)])
    cov = maths.coverage(hits, hosts)
    assert (cov["pages"], cov["expected"], cov["missing"]) == (2, 4, 2)
    assert (cov["refetched"], cov["disallowed"], cov["requests"]) == (1, 1, 6)


def test_the_bound_is_the_longest_delay_chain_or_the_cpu_time_on_the_cores() -> None:
    hosts = [Host(0, A, 31, delay=0.5), Host(1, B, 11, delay=1.0), Host(2, C, 400)]
    one = maths.bound(hosts, 1000, pages_per_cpu_s=50.0, processes=1, cores=2)
    assert (one.delay_s, one.host, one.cpu_s, one.cores) == (15.0, A, 20.0, 1)
    assert (one.total, one.limit) == (20.0, "CPU")
    four = maths.bound(hosts, 1000, pages_per_cpu_s=50.0, processes=4, cores=2)
    assert (four.cpu_s, four.cores, four.total, four.limit) == (10.0, 2, 15.0, "delay")


def test_phases_and_the_chain_host() -> None:
    log = [line(100.5, A, "/robots.txt"), line(101.0, A, "/"), line(102.0, A, "/p/1.html"),
           line(105.0, A, "/p/2.html"), line(103.0, B, "/")]
    hits = maths.parse(log)
    phases = maths.phases(hits, launched=100.0, delays={A: 1.0})
    assert phases["first_request"] == pytest.approx(0.5)
    assert (phases["t50"], phases["t95"], phases["last_page"]) == (2.0, 5.0, 5.0)
    assert phases["idle_s"] == 1  # second 4 (104-105): nothing starts
    chain = maths.chain(hits, Host(0, A, 3, delay=1.0), launched=100.0)
    assert (chain["span"], chain["ideal"], chain["lag"]) == (4.0, 2.0, 2.0)
    assert (chain["last"], chain["others_last"]) == (5.0, 3.0)  # A is the tail
    assert maths.timeline(hits, 100.0, step=2.0) == [1, 2, 1]


def test_token_lag_is_the_time_from_the_token_to_the_origin() -> None:
    hits = maths.parse([line(10.3, A, "/"), line(11.5, A, "/p/1.html", took=0.15),
                        line(12.0, B, "/")])  # B has no delay: left out
    rows = [{"url": f"http://{A}:8080/", "taken": 10.0},
            {"url": f"http://{A}:8080/p/1.html", "taken": 11.3},
            {"url": f"http://{A}:8080/p/2.html", "taken": 11.0},  # not at the origin
            {"url": f"http://{B}:8080/", "taken": 11.9},
            {"url": f"http://{A}:8080/x", "taken": None}]
    lag = maths.token_lag(rows, hits, {A: 0.5})
    assert lag["requests"] == 2 and lag["over_100ms"] == 1
    assert (round(lag["median"], 3), round(lag["max"], 3)) == (0.3, 0.3)
    assert round(maths.token_lag(rows[1:2], hits, {A: 0.5})["max"], 3) == 0.05
