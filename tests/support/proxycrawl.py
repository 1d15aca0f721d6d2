"""A crawl of a list of URLs with the proxy pool on, in a subprocess: its DEBUG log, stats and
items (the real-crawl tests of the proxy middleware and the probes)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

from support.proxies import PROXY_ON, assert_no_secret

CRAWL = textwrap.dedent("""
    import json, sys
    import scrapy
    from scrapy.crawler import CrawlerProcess

    config = json.loads(sys.argv[1])

    class PagesSpider(scrapy.Spider):
        name = "pages"

        async def start(self):
            for url in config["urls"]:
                yield scrapy.Request(url)

        def parse(self, response):
            yield {"url": response.url, "status": response.status}

    process = CrawlerProcess(settings=config["settings"], install_root_handler=True)
    crawler = process.create_crawler(PagesSpider)
    process.crawl(crawler)
    process.start()
    stats = {k: v if isinstance(v, (int, float)) else str(v)
             for k, v in crawler.stats.get_stats().items()}
    with open(config["stats"], "w") as f:
        json.dump(stats, f)
""")


class Crawl:
    """A crawl of *urls* in a subprocess: its log (DEBUG), stats and items."""

    def __init__(self, tmp_path: Path, urls: list[str], **settings: Any) -> None:
        self.dir = tmp_path
        (tmp_path / "crawl.py").write_text(CRAWL)
        self.log, self.items_path = tmp_path / "crawl.log", tmp_path / "items.jsonl"
        config = {"urls": urls, "stats": str(tmp_path / "stats.json"), "settings": {
            **PROXY_ON, "LOG_LEVEL": "DEBUG", "LOG_FILE": str(self.log),
            "FEEDS": {str(self.items_path): {"format": "jsonlines"}},
            "CONCURRENT_REQUESTS": 8, "DOWNLOAD_TIMEOUT": 10, **settings}}
        self.process = subprocess.Popen(
            [sys.executable, str(tmp_path / "crawl.py"), json.dumps(config)], cwd=tmp_path,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    def wait(self, timeout: float = 60) -> None:
        output, _ = self.process.communicate(timeout=timeout)
        assert self.process.returncode == 0, output[-3000:]
        assert "Traceback" not in self.text(), self.text()[-3000:]

    def text(self) -> str:
        return self.log.read_text() if self.log.exists() else ""

    @property
    def stats(self) -> dict[str, Any]:
        return json.loads((self.dir / "stats.json").read_text())  # type: ignore[no-any-return]

    @property
    def items(self) -> list[dict[str, Any]]:
        if not self.items_path.exists():
            return []
        return [json.loads(line) for line in self.items_path.read_text().splitlines()]

    def assert_no_secret(self) -> None:
        assert_no_secret(self.text(), json.dumps(self.stats), self.items_path.read_text()
                         if self.items_path.exists() else "")


def urls_of(base: str, count: int, prefix: str) -> list[str]:
    return [f"{base}/{prefix}/{n}" for n in range(count)]


