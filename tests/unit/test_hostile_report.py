"""What benchmarks/hostile.py reads from a crawl: the workers' final stats dumps, the longest
gap between origin arrivals, the pages lost by scenario (tests/bench/test_bench_smokes.py runs
it)."""

from __future__ import annotations

import pytest

from benchmarks.hostile_report import final_stats, longest_gap, missing, summed

LOG = """2026-12-02 03:00:00 [scrapy.core.engine] INFO: Spider opened
2026-12-02 03:00:01 [scrapy.statscollectors] INFO: Dumping Scrapy stats:
{'downloader/request_count': 9,
 'proxy/127.0.0.1:1/requests': 4,
 'proxy/127.0.0.1:2~0a1b2c3d/bans': 2,
 'proxy/requests': 7,
 'retry/count': 3,
 'retry/delay_seconds': 1.25,
 'start_time': datetime.datetime(2026, 12, 2, 3, 0, tzinfo=datetime.timezone.utc)}
2026-12-02 03:00:02 [scrapy.core.engine] INFO: Spider closed (finished)
"""


def test_final_stats_reads_the_last_dump_only() -> None:
    first = final_stats(LOG)
    assert first is not None and first["proxy/requests"] == 7 and "start_time" not in first
    second = final_stats(LOG + LOG.replace("'retry/count': 3", "'retry/count': 5"))
    assert second is not None and second["retry/count"] == 5
    assert final_stats("2026-12-02 03:00:00 [scrapy] INFO: killed\n") is None


def test_summed_keeps_proxy_and_retry_stats_and_names_proxies_by_role() -> None:
    dump = final_stats(LOG)
    assert dump is not None
    roles = {"127.0.0.1:1": "healthy0", "127.0.0.1:2~0a1b2c3d": "dead"}
    assert summed([dump, dump], roles) == {
        "proxy/dead/bans": 4, "proxy/healthy0/requests": 8, "proxy/requests": 14,
        "retry/count": 6, "retry/delay_seconds": 2.5}
    assert summed([dump], {}, ("downloader/",)) == {"downloader/request_count": 9}


def test_longest_gap_and_missing_pages() -> None:
    entries = [{"ts": 100.0 + t} for t in (0.5, 0.1, 3.0, 3.2, 9.7, 9.9)]
    assert longest_gap(entries, 99.0) == pytest.approx((6.5, 4.2))
    assert longest_gap(entries[:1], 99.0) == (0.0, 0.0)
    urls = ["u0", "u1", "u2", "u3"]
    lost = missing(urls, [None, "503x3", "503x3", "reset"], {"u0", "u3"})
    assert lost == {"pages": [1, 2], "by_scenario": {"503x3": 2}}
