"""A crawl of one ``data:`` URL (no network) in a fresh interpreter, and what it built and
imported: for the tests of what a crawl with the add-on loads (tracing off, Scrapy's remote
control off). A fresh interpreter, because other tests of the pytest process may have imported
those modules already."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterable
from pathlib import Path
from typing import Any

SCRIPT = textwrap.dedent("""
    import json, sys
    from scrapy import Spider
    from scrapy.crawler import CrawlerProcess

    settings, mode, roots = json.loads(sys.argv[1]), sys.argv[2], json.loads(sys.argv[3])
    seen = {}

    def built(crawler):
        seen["extensions"] = [type(e).__name__ for e in crawler.extensions.middlewares]

    class One(Spider):
        name = "one"
        start_urls = ["data:,hello"]

        def parse(self, response):
            yield {"url": response.url}

        def closed(self, reason):
            built(self.crawler)
            spidermw = self.crawler.engine.scraper.spidermw.middlewares
            seen["spider_middlewares"] = [type(m).__name__ for m in spidermw]
            seen["items"] = self.crawler.stats.get_value("item_scraped_count")

    if mode == "crawl":
        process = CrawlerProcess(settings)
        process.crawl(One)
        process.start()
    else:  # only build the crawler, its extensions included
        from scrapy.utils.test import get_crawler
        built(get_crawler(One, settings))
    seen["modules"] = sorted(m for m in sys.modules
                             if any(m == r or m.startswith(r + ".") for r in roots))
    print(json.dumps(seen))
""")


def one_crawl(cwd: Path, settings: dict[str, Any], *, mode: str = "crawl",
              roots: Iterable[str] = (), unset: Iterable[str] = (),
              env: dict[str, str] | None = None) -> tuple[dict[str, Any], str]:
    """Crawl (``mode="crawl"``) or only build the crawler (``"build"``) with *settings*, in
    *cwd*, robots.txt not asked for and the items to ``cwd/items.jsonl``: the extensions
    built, in a crawl its spider middlewares and items, and the modules imported under
    *roots* (``"aiohttp"``: the package and its modules); and the crawl's log.

    The interpreter gets this process's environment but ``SCRAPY_*`` and the names in
    *unset*, and *env* on top."""
    settings = {"ROBOTSTXT_OBEY": False, "LOCAL_ITEMS_PATH": str(cwd / "items.jsonl"),
                **settings}
    dropped = set(unset)
    environ = {k: v for k, v in os.environ.items()
               if k not in dropped and not k.startswith("SCRAPY_")}
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, json.dumps(settings), mode, json.dumps(list(roots))],
        cwd=cwd, env={**environ, **(env or {})}, capture_output=True, text=True, timeout=120,
        check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return dict(json.loads(done.stdout.strip().splitlines()[-1])), done.stderr
