"""The fault-injecting origin: deterministic transient faults, a complete request log, and a site
that a naive retrying client crawls completely."""

from __future__ import annotations

import http.client
import re
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import urljoin, urlsplit

import pytest
from servers.faultorigin import (
    Faults,
    OriginProcess,
    Outcome,
    last_status,
    outcome,
    page_scenarios,
    read_log,
    site_urls,
    start_origin,
)

HOSTS = ("127.0.0.1", "127.0.0.2")
HREF = re.compile(r'href="([^"]*)"')
# Many faults, short sleeps: every kind shows up in a few dozen requests, and tests stay fast.
HEAVY = Faults(reset=0.15, too_many=0.15, unavailable=0.15, slow=0.15,
               slow_min=0.2, slow_max=0.4, max_failures=2)


@pytest.fixture
def origin(tmp_path: Path) -> Iterator[OriginProcess]:
    handle, _ = start_origin(60, tmp_path / "origin.jsonl", hosts=HOSTS, faults=HEAVY, seed=7)
    with handle:
        yield handle
    assert handle.proc.poll() is not None


def get(url: str, headers: dict[str, str] | None = None) -> tuple[int | str, dict[str, str], str]:
    """One GET on a new connection: status (or ``"reset"``), headers, body."""
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=10)
    try:
        conn.request("GET", parts.path or "/", headers=headers or {})
        response = conn.getresponse()
        return response.status, dict(response.getheaders()), response.read().decode()
    except ConnectionError:  # ConnectionResetError, RemoteDisconnected
        return "reset", {}, ""
    finally:
        conn.close()


def expected(result: Outcome) -> int | str:
    return "reset" if result.status is None else result.status


def fetch_with_retries(url: str, headers: dict[str, str] | None = None,
                       tries: int = 5) -> tuple[str, int]:
    """Naive retrying: again at once after any failure. Returns the body and the tries used."""
    for attempt in range(1, tries + 1):
        status, _, body = get(url, headers)
        if status == 200:
            return body, attempt
    raise AssertionError(f"{url} failed {tries} times")


def test_faults_over_http_follow_outcome_and_end(origin: OriginProcess) -> None:
    seen: set[int | str] = set()
    for n, url in enumerate(site_urls(origin.base_urls, 60)[:30]):
        host, path = urlsplit(url).hostname or "", urlsplit(url).path
        for attempt in range(1, HEAVY.max_failures + 2):
            status, headers, _ = get(url)
            predicted = outcome(HEAVY, 7, host, path, attempt)
            assert status == expected(predicted), (url, attempt)
            seen.add(status)
            if predicted.retry_after is not None:
                assert headers["Retry-After"] == str(predicted.retry_after)
            if status == 200:
                break
        assert status == 200, f"page {n} still failing after {attempt} attempts"
    assert {200, 429, 503, "reset"} <= seen


def test_same_seed_same_faults_across_runs(tmp_path: Path) -> None:
    runs = []
    for run in range(2):
        handle, base = start_origin(20, tmp_path / f"{run}.jsonl", faults=HEAVY, seed=3)
        with handle:
            runs.append([get(url)[0] for url in site_urls([base], 20) for _ in range(2)])
    assert runs[0] == runs[1]


def test_log_records_every_request(origin: OriginProcess) -> None:
    urls = [*site_urls(origin.base_urls, 60)[:20], origin.base_urls[1] + "/missing"]
    sent: list[tuple[float, float, int | str]] = []
    for url in urls:
        before = time.time()
        status = get(url, {"Via": "1.1 test-client"})[0]
        sent.append((before, time.time(), status))
    entries = read_log(origin.log_path)
    assert len(entries) == len(sent)
    for entry, url, (before, after, status) in zip(entries, urls, sent, strict=True):
        assert before <= entry["ts"] <= after
        assert entry["host"] == urlsplit(url).netloc and entry["path"] == urlsplit(url).path
        assert entry["status"] == status and entry["via"] == "1.1 test-client"
        if entry["fault"] == "slow":
            assert entry["latency"] >= HEAVY.slow_min
    assert entries[-1]["status"] == 404 and entries[-1]["site"] == "127.0.0.2"
    stamps = [entry["ts"] for entry in entries]
    assert stamps == sorted(stamps) and any(stamp != round(stamp, 3) for stamp in stamps)


def test_host_header_picks_the_site(origin: OriginProcess) -> None:
    """Whichever address a request reached, a known Host header picks the page; an unknown one
    (``a.localtest``) falls back to the address (proxies may forward to the wrong address)."""
    port = urlsplit(origin.base_urls[0]).port
    body, first = fetch_with_retries(f"{origin.base_urls[0]}/", {"Host": f"127.0.0.2:{port}"})
    assert "<title>Page 1</title>" in body
    body, second = fetch_with_retries(f"{origin.base_urls[0]}/", {"Host": f"a.localtest:{port}"})
    assert "<title>Page 0</title>" in body
    sites = [entry["site"] for entry in read_log(origin.log_path)]
    assert sites == ["127.0.0.2"] * first + ["127.0.0.1"] * second


def test_naive_retrying_client_reaches_every_page(origin: OriginProcess) -> None:
    seen, frontier, worst = {origin.base_urls[0] + "/"}, [origin.base_urls[0] + "/"], 0
    with ThreadPoolExecutor(8) as pool:
        while frontier:
            results = list(pool.map(fetch_with_retries, frontier))
            worst = max(worst, *(tries for _, tries in results))
            links = {urljoin(url, href) for url, (body, _) in zip(frontier, results, strict=True)
                     for href in HREF.findall(body)}
            frontier = sorted(links - seen)
            seen |= links
    assert seen == set(site_urls(origin.base_urls, 60))
    assert worst <= HEAVY.max_failures + 1
    final = last_status(read_log(origin.log_path))
    assert len(final) == 60 and set(final.values()) == {200}


def test_hostile_pages_over_http(tmp_path: Path) -> None:
    """``--faults hostile``: a "503x3" page answers 503, 503, 503, 200; a "reset" page resets
    the connection once, then answers; a "429x2" page says ``Retry-After: 1`` twice."""
    hostile = Faults.parse("hostile")
    handle, _ = start_origin(60, tmp_path / "origin.jsonl", hosts=HOSTS, faults=hostile, seed=1)
    assert "hostile" in handle.proc.args  # the CLI flag, as a user would pass it
    urls = site_urls(handle.base_urls, 60)
    story = page_scenarios(hostile, 1, HOSTS, 60)
    with handle:
        thrice = urls[story.index("503x3")]
        assert [get(thrice)[0] for _ in range(5)] == [503, 503, 503, 200, 200]
        reset = urls[story.index("reset")]
        assert [get(reset)[0] for _ in range(3)] == ["reset", 200, 200]
        too_many = urls[story.index("429x2")]
        answers = [get(too_many) for _ in range(3)]
        assert [status for status, _, _ in answers] == [429, 429, 200]
        assert [headers.get("Retry-After") for _, headers, _ in answers] == ["1", "1", None]
        plain = urls[story.index(None)]
        assert [get(plain)[0] for _ in range(2)] == [200, 200]
        entries = read_log(handle.log_path)
    assert [e["attempt"] for e in entries] == [1, 2, 3, 4, 5, 1, 2, 3, 1, 2, 3, 1, 2]
    assert [e["fault"] for e in entries[5:8]] == ["reset", None, None]
