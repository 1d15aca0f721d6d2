"""docs/tutorials/from-scrapy-redis.md, run as it is written.

The page's two ``settings.py`` blocks become the settings of an old (scrapy-redis) and a new
project, its export script is run as printed, and each of its commands is run word for word,
with the services' real addresses in place of ``redis://redis:6379/0`` and the like. The
old crawl's queue and seen set are made by scrapy-redis's own ``Scheduler`` on a real Redis
of the test's own (``own_redis``: scrapy-redis's keys are ``shop:...``), the seeds go to a
real broker, and the new crawl's name is the test's ``crawl_id`` (``CRAWL_ID``).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import redis
from kafka import KafkaConsumer, TopicPartition
from pymongo import MongoClient
from scrapy import Request, Spider
from scrapy.http import FormRequest, HtmlResponse
from scrapy.linkextractors import LinkExtractor
from scrapy.utils.request import fingerprint as scrapy_fingerprint
from scrapy.utils.test import get_crawler
from scrapy_redis.dupefilter import RFPDupeFilter
from scrapy_redis.scheduler import Scheduler
from w3lib.url import canonicalize_url

from crawler.config.keys import CrawlKeys
from crawler.connections.clients import redis_client
from crawler.dedup.backend import DedupFactory
from crawler.localstack import demo_site as site
from crawler.migrate import scrapy_redis_fingerprint

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "tutorials" / "from-scrapy-redis.md"
BEFORE, AFTER = "# settings.py with scrapy-redis", "# settings.py with this crawler"
EXPORT = "# export_scrapy_redis.py"
SERVICES = {"REDIS_URL": "redis://redis:6379/0", "KAFKA_BOOTSTRAP_SERVERS": "kafka1:9092",
            "MONGO_URI": "mongodb://mongo1/"}  # as the page writes them
NEW_SPIDERS = ("from crawler.spiders.site import SiteSpider\n\n\n"
               "class ShopSpider(SiteSpider):\n    name = \"shop\"\n")
pytestmark = pytest.mark.filterwarnings(  # scrapy-redis 0.9 passes spider= to the stats
    "ignore:Passing a 'spider' argument:scrapy.exceptions.ScrapyDeprecationWarning")


def doc_block(first_line: str) -> str:
    """The fenced block of the page whose first line is *first_line*."""
    blocks = re.findall(r"^```\w*\n(.*?)^```", DOC.read_text(), re.S | re.M)
    found = [b for b in blocks if b.splitlines()[0] == first_line]
    assert len(found) == 1, f"the page has {len(found)} blocks starting {first_line!r}"
    return str(found[0])


def doc_command(command: str, **replace: str) -> list[str]:
    """*command*, which must be a command line of a ``sh`` block of the page, split; each
    word of *replace*'s keys replaced by its value."""
    lines = [line.split("  #")[0].strip() for block in
             re.findall(r"^```sh\n(.*?)^```", DOC.read_text(), re.S | re.M)
             for line in block.splitlines()]
    assert command in lines, f"the page gives no command {command!r}"
    return [replace.get(word, word) for word in shlex.split(command)]


@dataclass
class Projects:
    """The old and the new project of the page, with the environment to run them in."""

    old: Path
    new: Path
    env: dict[str, str]
    old_settings: dict[str, Any]
    new_settings: dict[str, Any]

    def run(self, where: Path, cmd: list[str], timeout: float = 120,
            stdout: Any = subprocess.PIPE) -> subprocess.CompletedProcess[str]:
        if cmd[0] in ("python", "scrapy"):  # this interpreter, as the project's would be
            cmd = [sys.executable, *([] if cmd[0] == "python" else ["-m", "scrapy"]), *cmd[1:]]
        return subprocess.run(cmd, cwd=where, env=self.env, stdout=stdout,
                              stderr=subprocess.PIPE, text=True, timeout=timeout)


def _settings(block: str, services: dict[str, str]) -> tuple[str, dict[str, Any]]:
    for name, placeholder in SERVICES.items():
        block = block.replace(repr(placeholder).replace("'", '"'), json.dumps(services[name]))
    values: dict[str, Any] = {}
    exec(block, values)  # the page's settings.py, as Scrapy would import it
    return block, {k: v for k, v in values.items() if k.isupper()}


def make_projects(tmp_path: Path, redis_url: str, stack_env: dict[str, str],
                  crawl_id: str) -> Projects:
    services = {**stack_env, "REDIS_URL": redis_url}
    made: dict[str, dict[str, Any]] = {}
    for name, first_line in (("old", BEFORE), ("new", AFTER)):
        root = tmp_path / name
        (root / "shop").mkdir(parents=True)
        (root / "scrapy.cfg").write_text("[settings]\ndefault = shop.settings\n")
        (root / "shop" / "__init__.py").write_text("")
        text, made[name] = _settings(doc_block(first_line), services)
        (root / "shop" / "settings.py").write_text(text)
        (root / "shop" / "spiders.py").write_text(NEW_SPIDERS if name == "new" else "")
    env = {k: v for k, v in os.environ.items()
           if k not in ("SCRAPY_SETTINGS_MODULE", "SCRAPY_PROJECT", "CRAWL_ID", *SERVICES)}
    env["CRAWL_ID"] = crawl_id  # the new crawl's topics and keys: this test's own
    return Projects(tmp_path / "old", tmp_path / "new", env, made["old"], made["new"])


def in_process(settings: dict[str, Any]) -> dict[str, Any]:
    """A project's settings for a crawler of this process, which has no ``shop`` package."""
    return {k: v for k, v in settings.items() if k != "SPIDER_MODULES"}


class OldShop(Spider):
    name = "shop"

    def parse_item(self, response: Any) -> None:
        """A callback other than ``parse``, as scrapy-redis stores it: by name."""


@contextmanager
def scrapy_redis(settings: dict[str, Any]) -> Iterator[tuple[Scheduler, OldShop]]:
    """scrapy-redis's own scheduler and dupefilter, built from the old project's settings,
    opened; closed (``SCHEDULER_PERSIST``: the keys stay) on leaving."""
    crawler = get_crawler(OldShop, in_process(settings))
    scheduler = Scheduler.from_crawler(crawler)
    spider = OldShop.from_crawler(crawler)
    scheduler.open(spider)
    try:
        yield scheduler, spider
    finally:
        scheduler.close("shutdown")


@dataclass
class Moved:
    lines: list[dict[str, Any]]  # the exported seeds
    export_counts: set[str]  # the export's last line on stderr, cut at its commas
    export_stderr: str
    seed_stdout: str
    imported: str  # the import's one line


def export(projects: Projects) -> tuple[str, str]:
    """Step 2 of the page, in the old project: ``pending.jsonl`` and what went to stderr."""
    (projects.old / "export_scrapy_redis.py").write_text(doc_block(EXPORT))
    cmd = doc_command("python export_scrapy_redis.py shop > pending.jsonl")
    assert cmd[-2:] == [">", "pending.jsonl"]
    with open(projects.old / "pending.jsonl", "w") as out:
        done = projects.run(projects.old, cmd[:-2], stdout=out)
    assert done.returncode == 0, done.stderr[-3000:]
    return (projects.old / "pending.jsonl").read_text(), done.stderr


def migrate(projects: Projects) -> Moved:
    """Steps 2, 4 and 5 of the page: export (in the old project), import and publish (in
    the new one)."""
    text, export_stderr = export(projects)
    (projects.new / "pending.jsonl").write_text(text)
    imported = projects.run(projects.new, doc_command(
        "python -m crawler.migrate.scrapy_redis shop --pending pending.jsonl"))
    assert imported.returncode == 0, imported.stderr[-3000:]
    seed = projects.run(projects.new,
                        doc_command("scrapy seed shop -f pending.jsonl --scope reject"))
    assert seed.returncode == 0, seed.stderr[-3000:]
    return Moved([json.loads(line) for line in text.splitlines()],
                 set(export_stderr.strip().splitlines()[-1].split(", ")), export_stderr,
                 seed.stdout, imported.stdout.strip())


def seeds_topic(bootstrap: str, topic: str, count: int) -> list[Any]:
    """The values of *topic*, JSON decoded where they are JSON, once *count* are read."""
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                             consumer_timeout_ms=10_000)
    try:
        consumer.assign([TopicPartition(topic, p)
                         for p in consumer.partitions_for_topic(topic) or ()])
        consumer.seek_to_beginning()
        values = []
        for record in consumer:
            text = record.value.decode()
            values.append(json.loads(text) if text.startswith("{") else text)
            if len(values) == count:
                break
        return values
    finally:
        consumer.close()


async def dupefilter_says(projects: Projects, redis_url: str, crawl_id: str,
                          requests: list[Request]) -> list[bool]:
    """Seen? for each request, from the new crawl's dupefilter, built as a worker builds it
    (``FRONTIER_DEDUP_CLASS``, the crawler's ``request_fingerprinter``)."""
    crawler = get_crawler(Spider, {**in_process(projects.new_settings), "CRAWL_ID": crawl_id})
    client = redis_client(redis_url)
    try:
        backend = DedupFactory.from_crawler(crawler)(client, CrawlKeys(crawl_id).bloom)
        await backend.open()
        fingerprints = [crawler.request_fingerprinter.fingerprint(r) for r in requests]
        return await backend.check(fingerprints)
    finally:
        await client.aclose()


def test_the_queue_and_the_seen_set_move_as_the_page_says(stack, own_redis, crawl_id,
                                                          tmp_path):
    projects = make_projects(tmp_path, own_redis, stack.env(), crawl_id)
    urls = [f"https://shop.example/p/{i}.html" for i in range(1, 9)]
    post = FormRequest("https://shop.example/search", formdata={"q": "lamp"})
    offsite = Request("https://elsewhere.example/x")
    with scrapy_redis(projects.old_settings) as (scheduler, spider):
        for i, url in enumerate(urls, 1):
            callback = spider.parse_item if i % 2 == 0 else None
            assert scheduler.enqueue_request(Request(url, priority=i % 3, callback=callback))
        assert not scheduler.enqueue_request(Request(urls[0]))  # a duplicate: filtered
        assert scheduler.enqueue_request(post) and scheduler.enqueue_request(offsite)
        taken = [scheduler.next_request() for _ in range(3)]  # a worker fetched these
        scheduler.server.rpush("shop:start_urls", "https://shop.example/",
                               json.dumps({"url": "https://shop.example/new.html"}))
    assert {r.priority for r in taken} == {2}  # the priority queue's highest first
    pending = [(u, i % 3) for i, u in enumerate(urls, 1) if u not in {r.url for r in taken}]

    moved = migrate(projects)

    assert sorted(map(json.dumps, moved.lines)) == sorted(map(json.dumps, [
        *({"url": u, "priority": p} for u, p in pending),
        {"url": offsite.url, "priority": 0},
        {"url": "https://shop.example/"}, {"url": "https://shop.example/new.html"}]))
    assert "not exported: POST https://shop.example/search" in moved.export_stderr
    callbacks = sum(1 for u, _p in pending if int(u.split("/")[-1].split(".")[0]) % 2 == 0)
    assert moved.export_counts == {"6 requests", f"{callbacks} of which callback parse_item",
                                   "1 not exported (not a GET)", "2 start URLs"}
    assert f"8 seeds published to {crawl_id}.seeds" in moved.seed_stdout
    # the page's example output is this crawl's, but for its name
    example = doc_block("shop:dupefilter: 4 fingerprints imported into {shop}:bloom (4 new "
                        "to it, 0 there already); 6 of the 8 pending seeds' fingerprints "
                        "were in the SET and left out").strip()
    assert moved.imported == example.replace("{shop}", f"{{{crawl_id}}}")

    published = seeds_topic(stack.env()["KAFKA_BOOTSTRAP_SERVERS"], f"{crawl_id}.seeds", 8)
    assert sorted(map(json.dumps, published)) == sorted(map(json.dumps, moved.lines))

    starts = [Request("https://shop.example/"), Request("https://shop.example/new.html")]
    waiting = [Request(u, priority=p) for u, p in pending] + [offsite, *starts]
    seen = asyncio.run(dupefilter_says(projects, own_redis, crawl_id, [*taken, post, *waiting]))
    assert seen == [True] * 4 + [False] * len(waiting)

    dele = doc_command("redis-cli -u redis://redis:6379/0 DEL shop:requests shop:dupefilter "
                       "shop:start_urls", **{"redis://redis:6379/0": own_redis})
    assert projects.run(projects.new, dele).stdout.strip() == "3"
    with redis.Redis.from_url(own_redis) as client:
        assert not client.keys("shop:*")


@pytest.mark.parametrize(("queue_class", "starts"), [("FifoQueue", "set"),
                                                     ("LifoQueue", "zset"),
                                                     ("PriorityQueue", "empty")])
def test_the_export_reads_each_kind_of_queue(own_redis, crawl_id, tmp_path, queue_class,
                                             starts):
    services = {"KAFKA_BOOTSTRAP_SERVERS": "127.0.0.1:9", "MONGO_URI": "mongodb://127.0.0.1:9/"}
    projects = make_projects(tmp_path, own_redis, services, crawl_id)
    setting = f'SCHEDULER_QUEUE_CLASS = "scrapy_redis.queue.{queue_class}"\n'
    with open(projects.old / "shop" / "settings.py", "a") as settings:
        settings.write(setting)
    projects.old_settings["SCHEDULER_QUEUE_CLASS"] = f"scrapy_redis.queue.{queue_class}"
    urls = [f"https://shop.example/p/{i}.html" for i in range(6)] if starts != "empty" else []
    with scrapy_redis(projects.old_settings) as (scheduler, _spider):
        for i, url in enumerate(urls):
            scheduler.enqueue_request(Request(url, priority=i))
        taken = {scheduler.next_request().url for _ in urls[:2]}
    with redis.Redis.from_url(own_redis) as client:
        if starts == "set":
            client.sadd("shop:start_urls", "https://shop.example/a", "https://shop.example/b")
        elif starts == "zset":
            client.zadd("shop:start_urls", {"https://shop.example/a": 1,
                                            "https://shop.example/b": 2})
        before = {k: client.dump(k) for k in client.keys("shop:*")}

    text, stderr = export(projects)

    expected = [{"url": u, "priority": i} for i, u in enumerate(urls) if u not in taken]
    expected += [{"url": f"https://shop.example/{x}"} for x in "ab" if starts != "empty"]
    assert sorted(map(json.dumps, map(json.loads, text.splitlines()))) == \
        sorted(map(json.dumps, expected))
    assert stderr.strip().splitlines()[-1] == ("4 requests, 2 start URLs" if urls
                                               else "nothing pending")
    with redis.Redis.from_url(own_redis) as client:  # it only reads
        assert {k: client.dump(k) for k in client.keys("shop:*")} == before


def test_the_import_refuses_what_would_mark_nothing_seen(stack, own_redis, crawl_id,
                                                        tmp_path):
    projects = make_projects(tmp_path, own_redis, stack.env(), crawl_id)
    urls = [f"https://shop.example/p/{i}.html" for i in range(4)]
    (projects.new / "pending.jsonl").write_text("".join(f"{u}\n" for u in urls[2:]))
    with redis.Redis.from_url(own_redis) as client:  # a SET of Scrapy's fingerprints
        client.sadd("shop:dupefilter", *(scrapy_fingerprint(Request(u)).hex() for u in urls))
    cmd = doc_command("python -m crawler.migrate.scrapy_redis shop --pending pending.jsonl")

    wrong_class = projects.run(projects.new, [*cmd, "-s", "REQUEST_FINGERPRINTER_CLASS="
                                              "scrapy.utils.request.RequestFingerprinter"])
    wrong_set = projects.run(projects.new, cmd)

    assert wrong_class.returncode == wrong_set.returncode == 1
    assert "Setting REQUEST_FINGERPRINTER_CLASS: is 'scrapy.utils.request." \
           "RequestFingerprinter'" in wrong_class.stderr
    assert "none of the 2 pending requests' fingerprints is in shop:dupefilter" \
           in wrong_set.stderr
    assert len(wrong_class.stderr.splitlines()) == len(wrong_set.stderr.splitlines()) == 1
    with redis.Redis.from_url(own_redis) as client:
        assert not client.keys(f"{{{crawl_id}}}:*")  # no filter made, nothing written


def test_the_import_reads_the_set_from_another_redis(stack, own_redis, crawl_id, tmp_path):
    crawl_redis = stack.env()["REDIS_URL"]  # the new crawl's; scrapy-redis's is own_redis
    projects = make_projects(tmp_path, crawl_redis, stack.env(), crawl_id)
    requests = [Request(f"https://shop.example/p/{i}.html") for i in range(3)]
    (projects.new / "pending.jsonl").write_text(requests[2].url + "\n")
    with redis.Redis.from_url(own_redis) as client:
        client.sadd("shop:dupefilter", *(scrapy_redis_fingerprint(r).hex() for r in requests))
    cmd = doc_command("python -m crawler.migrate.scrapy_redis shop --pending pending.jsonl")

    done = projects.run(projects.new, [*cmd, "--from", own_redis])

    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"shop:dupefilter: 2 fingerprints imported into "
                                  f"{{{crawl_id}}}:bloom (2 new to it, 0 there already); 1 of "
                                  f"the 1 pending"), done.stdout
    seen = asyncio.run(dupefilter_says(projects, crawl_redis, crawl_id, requests))
    assert seen == [True, True, False]


OFFSITE = "http://elsewhere.invalid/"


def old_crawl(settings: dict[str, Any], site_dir: Path, base: str, pages: int) -> list[str]:
    """*pages* pages of the demo site crawled by scrapy-redis's scheduler and dupefilter:
    each page taken from the queue, read from its file, its links queued as the ``site``
    spider yields them (off-site ones too: Scrapy's offsite filter runs at download time).
    The URLs fetched."""
    fetched: list[str] = []
    with scrapy_redis(settings) as (scheduler, _spider):
        scheduler.enqueue_request(Request(f"{base}/"))
        while len(fetched) < pages:
            request = scheduler.next_request()
            parts = urlsplit(request.url)
            if parts.netloc != urlsplit(base).netloc:
                continue  # the offsite filter drops it
            page = site_dir / (parts.path.lstrip("/") or "index.html")
            response = HtmlResponse(request.url, body=page.read_bytes(), request=request)
            fetched.append(canonicalize_url(request.url))
            for link in LinkExtractor().extract_links(response):
                scheduler.enqueue_request(Request(link.url))
        # the last page linked to another site too: a pending request for the offsite filter
        scheduler.enqueue_request(Request(OFFSITE))
    return fetched


@pytest.mark.e2e  # a worker process
def test_a_moved_crawl_fetches_every_page_once(stack, own_redis, crawl_id, tmp_path):
    site.generate(tmp_path / "site", 40)
    server = site.serve(tmp_path / "site")
    try:
        projects = make_projects(tmp_path, own_redis, stack.env(), crawl_id)
        fetched = old_crawl(projects.old_settings, tmp_path / "site", server.base_url, 12)
        moved = migrate(projects)
        assert {"url": OFFSITE, "priority": 0} in moved.lines
        crawl = doc_command("scrapy crawl shop")
        # CRAWL_IDLE_TIMEOUT: the test need not wait the default 30 s once the crawl is over
        worker = projects.run(projects.new, [*crawl, "-a", f"start_urls={server.base_url}/",
                                             "-s", "CRAWL_IDLE_TIMEOUT=3"], timeout=300)
        assert worker.returncode == 0, worker.stderr[-3000:]
        report = projects.run(projects.new, doc_command("scrapy cluster report shop",
                                                        shop=crawl_id))
    finally:
        server.close()
    with MongoClient(stack.env()["MONGO_URI"]) as client:
        documents = list(client["crawler"][crawl_id].find())
    stored = [d["url"] for d in documents]
    scrapy_redis_says = RFPDupeFilter(server=None, key="shop:dupefilter").request_fingerprint
    assert [d["_id"] for d in documents] == [scrapy_redis_says(Request(u)) for u in stored]
    everything = {canonicalize_url(u) for u in site.site_urls(server.base_url, 40)}
    assert len(set(fetched)) == 12
    assert sorted(map(canonicalize_url, stored)) == sorted(everything - set(fetched))
    assert "unaccounted 0" in report.stdout, report.stdout + report.stderr
    assert "out_of_scope 1" in report.stdout, report.stdout
