"""The soak, short: 8,000 pages at the default settings by three workers, one of them killed
with ``kill -9`` every 10 s and restarted (``benchmarks/soak.py``; the long run, 100,000
pages, is ``python -m benchmarks.soak``). Every page is stored once, the ledger balances,
and the worker that lives through the whole crawl (and every rebalance the kills cause)
grows by less than 10% in RSS after its warm-up, its open file descriptors flat.

Only the run's length differs from the long one: fewer pages, kills and samples closer
together, a 20 s warm-up (the first kill and its rebalance fall inside it). Kills stop once
90% of the pages are stored; at 15 s apart a fast run (8,000 pages in about 30 s) got only
one in, so they are 10 s apart.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.soak import Plan, soak, write
from crawler.localstack.stack import Stack

pytestmark = pytest.mark.e2e
PLAN = Plan(pages=8000, kill_every=10, warmup=20, sample_every=1, timeout=400)


@pytest.mark.timeout(600)
def test_a_crawl_killed_every_10_s_keeps_its_pages_and_a_flat_worker(
        stack: Stack, crawl_id: str, tmp_path: Path) -> None:
    out = soak(stack.env(), crawl_id, PLAN, tmp_path)
    lines = "\n".join(write(out, tmp_path / "report"))
    assert len(out.kills) >= 2, lines
    survivor = [g for g in out.growths if g.index == 0]
    assert len(survivor) == 1 and not survivor[0].killed and survivor[0].judged, lines
    assert out.problems() == [], lines
