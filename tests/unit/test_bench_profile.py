"""The benchmark's attribution of py-spy samples to components, and its report sections."""

from __future__ import annotations

from collections import Counter

from benchmarks import profile
from benchmarks.report import limit_rows, profile_section, startup_section
from benchmarks.runner import Run

SITE = "/work/.venv/lib/python3.11/site-packages"
REPO = "/work/main"
LINES = [
    # a Bloom check's Redis reply: redis-py under dedup's frame
    f"<module> ({SITE}/scrapy/cmdline.py:1);_flush ({REPO}/crawler/frontier/outbox.py:170);"
    f"check ({REPO}/crawler/dedup/redis_filter.py:40);read_response ({SITE}/redis/_parsers.py:9) 7",
    # json.dumps under the codec: the frontier's
    f"crawl ({SITE}/scrapy/core/engine.py:5);encode_request ({REPO}/crawler/frontier/codec.py:90);"
    f"dumps (/usr/lib/python3.11/json/__init__.py:231) 5",
    # the accounting of the frontier is the ledger's
    f"x ({REPO}/crawler/frontier/scheduler.py:1);tell ({REPO}/crawler/frontier/accounting.py:9) 2",
    # Scrapy alone, and the spider under it
    f"_next ({SITE}/scrapy/core/scraper.py:3);extract ({SITE}/w3lib/url.py:3) 10",
    # the command that runs the whole crawl is no component: the frames inside it say
    f"run ({REPO}/crawler/commands/runspider.py:20);crawl ({SITE}/scrapy/core/engine.py:5) 4",
    f"run ({REPO}/crawler/commands/crawl.py:40);check ({REPO}/crawler/dedup/local.py:5) 1",
    f"_next ({SITE}/scrapy/core/scraper.py:3);parse ({REPO}/benchmarks/spider.py:40) 3",
    # kafka-python in the consumer loop's thread
    f"_run ({REPO}/crawler/frontier/consumer.py:180);poll ({SITE}/kafka/consumer/group.py:7) 4",
    f"process_item ({REPO}/crawler/pipelines/mongo.py:60);encode ({SITE}/bson/__init__.py:1) 6",
    f"process_request ({REPO}/crawler/middlewares/ratelimit.py:9) 1",
    # threads blocked in a wait, which py-spy may count as active: apart, no CPU
    f"run ({SITE}/asyncio/base_events.py:1);select (/usr/lib/python3.11/selectors.py:468) 9",
    f"_run ({REPO}/crawler/frontier/consumer.py:1);wait (/usr/lib/python3.11/threading.py:3) 2",
    "a line that is not a stack",
]


def test_a_sample_is_its_innermost_package_frames_component() -> None:
    found = profile.attribute(LINES)
    assert found == Counter({"dedup": 8, "frontier": 9, "ledger": 2, profile.SCRAPY: 14,
                             "spider": 3, "storage": 6, "politeness": 1, profile.WAITING: 11})
    assert profile.is_wait("Condition.wait (/usr/lib/python3.11/threading.py:331)")
    assert not profile.is_wait(f"_wait_for_room ({REPO}/crawler/frontier/consumer.py:9)")


def test_milliseconds_per_page_split_the_cpu_by_the_samples() -> None:
    found = profile.ms_per_page(Counter({"frontier": 1, profile.SCRAPY: 3}), cpu_s=8.0, pages=1000)
    assert found == {"frontier": 2.0, profile.SCRAPY: 6.0}
    assert list(found) == ["frontier", profile.SCRAPY]  # the report's order
    assert profile.ms_per_page(Counter(), 1.0, 10) == {}
    assert profile.ms_per_page(Counter({"frontier": 1, profile.WAITING: 9}), 1.0, 10) == {
        "frontier": 100.0}


def test_the_report_shows_the_profile_and_the_start_up_parts() -> None:
    samples = {"frontier": 25, profile.SCRAPY: 75}
    lines = profile_section({"pages": 100, "cpu_s": 2.0, "rate": 100, "samples": samples,
                             "ms_per_page": profile.ms_per_page(Counter(samples), 2.0, 100)})
    assert "| frontier | 25.0% | 5.00 |" in lines
    run = Run(1, "worker1", 1, 100, 10.0, 2.0, 150.0, 1.0,
              {"startup": [{"imports": 0.6, "join": 3.0, "total": 3.6}]})
    table = startup_section([run], {"share": 0.3, "joined": {"join": 4.0, "total": 4.5}})
    assert "| run | imports | join | total |" in table
    assert "| crawler, 1 worker, a new crawl | 0.60 | 3.00 | 3.60 |" in table
    assert "| a worker joining a crawl 30% done | 0.00 | 4.00 | 4.50 |" in table
    assert startup_section([], None) == [] and profile_section({}) == []


def test_the_bounds_a_run_is_held_to_say_met_or_missed() -> None:
    stock = Run(1, "stock", 1, 100, 10.0, 2.0, 135.0, 0.0)
    heavy = Run(1, "worker1", 1, 100, 10.0, 2.0, 156.0, 1.0)
    light = Run(2, "worker1", 1, 100, 10.0, 2.0, 150.0, 1.0)
    rows = limit_rows([stock, heavy], {"joined": {"total": 1.4}})
    assert rows == ["| worker start-up to its first request, joining a crawl | 1.40 s | - "
                    "| <= 1.5 s: met |",
                    "| peak RSS, 1 worker above stock | +21 MiB | - | <= +20 MiB: MISSED |"]
    assert limit_rows([stock, light], {"joined": {"total": 6.3}}) == [
        "| worker start-up to its first request, joining a crawl | 6.30 s | - "
        "| <= 1.5 s: MISSED |",
        "| peak RSS, 1 worker above stock | +15 MiB | - | <= +20 MiB: met |"]
    assert limit_rows([], None) == []
