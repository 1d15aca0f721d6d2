"""The soak's figures: growth over fifths after warm-up, the crawl's end, the bounds."""

from __future__ import annotations

from dataclasses import replace

from benchmarks.soak_report import Growth, Life, Sample, crawl_end, failures, growth, table

LIFE = Life(0, 0, 100, started=0.0, ended=60.0, killed=False)


def _samples(rss: list[int], fds: list[int] | None = None, stored: int = 5) -> list[Sample]:
    fds = fds or [30] * len(rss)
    pairs = zip(rss, fds, strict=True)
    return [Sample(float(t), 0, 0, r, f, 0, 0, stored) for t, (r, f) in enumerate(pairs)]


def test_growth_compares_the_peaks_of_the_first_and_last_fifths_after_warm_up() -> None:
    rss = [50] * 10 + [100, 120] + [100] * 16 + [130, 100]
    g = growth(LIFE, _samples(rss), warmup=10, crawl_end=100)
    assert g.judged and (g.rss_first_kib, g.rss_last_kib) == (120, 130)
    assert abs(g.rss_growth - 130 / 120 + 1) < 1e-9
    assert g.rss_peak_kib == 130


def test_warm_up_and_samples_after_the_crawl_ended_are_left_out() -> None:
    rss = [10] * 5 + [100] * 10 + [500] * 5  # the last five come after the last page
    g = growth(LIFE, _samples(rss), warmup=5, crawl_end=14)
    assert (g.rss_first_kib, g.rss_last_kib) == (100, 100)


def test_a_life_too_short_after_warm_up_is_not_judged() -> None:
    g = growth(LIFE, _samples([100] * 12), warmup=5, crawl_end=100)
    assert not g.judged and failures([g], 0.1, 4, 32, 32) == []
    assert "too short" in table([g])[-1]


def test_a_life_measured_for_less_than_its_warm_up_is_not_judged() -> None:
    rss = [100] * 30 + [120] * 7  # 17 samples over 16 s after a 20 s warm-up: +20%
    g = growth(LIFE, _samples(rss), warmup=20, crawl_end=100)
    assert not g.judged and failures([g], 0.1, 4, 32, 32) == []
    longer = growth(LIFE, _samples(rss + [120] * 4), warmup=20, crawl_end=100)  # over 20 s
    assert longer.judged and failures([longer], 0.1, 4, 32, 32) != []


def test_other_lives_samples_do_not_count() -> None:
    other = [Sample(float(t), 1, 0, 900, 90, 0, 0, 5) for t in range(20)]
    g = growth(LIFE, _samples([100] * 20) + other, warmup=0, crawl_end=100)
    assert (g.rss_last_kib, g.fds_last) == (100, 30)


def test_crawl_end_is_the_first_sample_with_the_final_count() -> None:
    samples = [Sample(float(t), 0, 0, 1, 1, 0, 0, min(t, 7)) for t in range(12)]
    assert crawl_end(samples) == 7.0


def test_failures_name_rss_growth_and_file_descriptor_growth() -> None:
    ok = Growth(0, 0, 1, 60, False, True, 100, 109, 109, 30, 34, 32, 20)
    grown = Growth(1, 2, 2, 60, True, True, 100, 110, 110, 30, 35, 33, 21)
    assert failures([ok], 0.10, 4, 32, 20) == []
    found = failures([grown], 0.10, 4, 32, 20)
    assert len(found) == 4 and "33 connections to the origin" in found[0]
    assert "21 connections to the services" in found[1]
    assert "RSS grew 10.0%" in found[2] and "30 -> 35" in found[3]


def test_the_origins_connections_are_bounded_not_held_flat() -> None:
    """More connections to the origin after a peer's share was handed on is no leak; more of
    anything else is."""
    shares = _samples([100] * 20, fds=[40] * 10 + [48] * 10)
    shares = [replace(s, origin=s.fds - 30) for s in shares]
    g = growth(LIFE, shares, warmup=0, crawl_end=100)
    assert (g.fds_first, g.fds_last, g.origin_peak) == (30, 30, 18)
    assert failures([g], 0.1, 4, 32, 32) == []
    assert failures([g], 0.1, 4, 16, 32) != []


def test_the_services_connections_are_bounded_not_held_flat() -> None:
    """A Redis pool that grows with the worker's share (10 -> 15 connections) is no leak; five
    more files, pipes or listening sockets are."""
    fds = [40] * 10 + [45] * 10
    pools = [replace(s, services=s.fds - 30) for s in _samples([100] * 20, fds=fds)]
    g = growth(LIFE, pools, warmup=0, crawl_end=100)
    assert (g.fds_first, g.fds_last, g.services_peak) == (30, 30, 15)
    assert failures([g], 0.1, 4, 32, 32) == []
    assert failures([g], 0.1, 4, 32, 14) != []
    files = [replace(s, services=10) for s in _samples([100] * 20, fds=fds)]
    g = growth(LIFE, files, warmup=0, crawl_end=100)
    assert (g.fds_first, g.fds_last) == (30, 35)
    assert failures([g], 0.1, 4, 32, 32) == [
        "worker 0 gen 0: open files other than TCP connections grew 30 -> 35"]
