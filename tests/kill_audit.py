"""What the kill tests check after the crawl: redeliveries, duplicate work, fetch bounds.

Sources: the origin's own request log (``DemoServer.request_log``), the records of
``<CRAWL_ID>.requests`` read back from the broker, and the worker logs (assignments, stats).
"""

from __future__ import annotations

import json
import re
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urldefrag

from kafka import KafkaConsumer, TopicPartition
from kill_cluster import ASSIGNED, Kill

from crawler.localstack.demo_site import Fetch

_PARTITION = re.compile(r"([\w.-]+)\[(\d+)\]")


def page_fetches(log: list[Fetch], base_url: str, urls: list[str]) -> dict[str, list[Fetch]]:
    """Every fetch of each page, in arrival order (requests for other paths are left out)."""
    pages: dict[str, list[Fetch]] = {url: [] for url in urls}
    base = base_url.rstrip("/")
    for fetch in log:
        url = base + fetch.path
        if url in pages:
            pages[url].append(fetch)
    return pages


def read_topic(bootstrap: str, topic: str) -> dict[str, list[tuple[int, str]]]:
    """Every record of *topic* as ``{"topic:partition": [(offset, url), ...]}`` (the URL
    without its fragment: the page the origin sees)."""
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None,
                             enable_auto_commit=False)
    try:
        parts = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic))]
        consumer.assign(parts)
        consumer.seek_to_beginning(*parts)
        records: dict[str, list[tuple[int, str]]] = {f"{topic}:{tp.partition}": [] for tp in parts}
        deadline = time.monotonic() + 120
        while not _at_end(consumer, parts):  # the fetch high-water mark: what the log holds
            if time.monotonic() > deadline:
                raise AssertionError(f"could not read {topic} to its end")
            for tp, items in consumer.poll(timeout_ms=500).items():
                records[f"{topic}:{tp.partition}"] += [
                    (r.offset, urldefrag(json.loads(r.value)["url"]).url) for r in items]
        return records
    finally:
        consumer.close()


def _at_end(consumer: KafkaConsumer, parts: list[TopicPartition]) -> bool:
    for tp in parts:
        high = consumer.highwater(tp)
        if high is None or consumer.position(tp) < high:
            return False
    return True


def acquisitions(log: str) -> Counter[str]:
    """How many times one worker process's log shows it newly assigned each partition."""
    epochs: Counter[str] = Counter()
    owned: set[str] = set()
    for line in log.splitlines():
        if ASSIGNED in line:
            now = {f"{t}:{p}" for t, p in _PARTITION.findall(line.split(ASSIGNED, 1)[1])}
            epochs.update(now - owned)
            owned = now
    return epochs


def stat_total(log_dir: Path, key: str) -> int:
    """*key* summed over the stats dumps of the worker processes that closed."""
    pattern = re.compile(rf"'{re.escape(key)}': (\d+)")
    return sum(int(m) for path in log_dir.glob("worker-*.log")
               for m in pattern.findall(path.read_text(errors="replace")))


@dataclass
class KillOutcome:
    kill: Kill
    held: set[str] = field(default_factory=set)  # fetched by the victim, record uncommitted
    missing: set[str] = field(default_factory=set)  # of those, never fetched again by another


def redeliveries(kill: Kill, records: dict[str, list[tuple[int, str]]],
                 fetches: dict[str, list[Fetch]]) -> KillOutcome:
    """The pages the victim fetched from records it never committed, and which of them no
    other process fetched after it (each must be: its record is delivered again)."""
    out = KillOutcome(kill)
    uncommitted = {url for part, done in kill.committed.items()
                   for offset, url in records.get(part, []) if offset >= done}
    for url in uncommitted & fetches.keys():
        mine = [f.at for f in fetches[url] if f.user_agent == kill.agent and f.at < kill.at]
        if not mine:
            continue
        out.held.add(url)
        if not any(f.user_agent != kill.agent and f.at > max(mine) for f in fetches[url]):
            out.missing.add(url)
    return out


@dataclass
class DuplicateWork:
    pages: int
    fetches: int
    unique: int
    redelivered_after_kills: int  # per kill: pages its victim held uncommitted, fetched again
    raced_copies: int  # both workers produced a new URL at once (bloom/race_duplicates)
    raced_dropped: int  # second copies the consumer dropped (frontier/raced_copies_dropped)
    over_bound: list[str]  # pages a process fetched more often than it got their partition

    @property
    def duplicates(self) -> int:
        return self.fetches - self.unique

    def lines(self, seed: int, outcomes: list[KillOutcome]) -> list[str]:
        out = [f"kill seed {seed}: {len(outcomes)} kills"]
        for o in outcomes:
            k = o.kill
            out.append(f"  {k.phase:<10} {k.agent:<16} log={k.log_states:<8} leases={k.leases:<4}"
                       f" lag={sum(k.lag.values()):<5} held-uncommitted={len(o.held):<4}"
                       f" refetched-by-another={len(o.held) - len(o.missing)}")
        other = max(self.duplicates - self.redelivered_after_kills, 0)
        out.append(f"  pages {self.pages}: {self.unique} fetched, {self.fetches} fetches,"
                   f" {self.duplicates} duplicate ({self.duplicates / self.pages:.1%}):"
                   f" {self.redelivered_after_kills} redeliveries of what the victims held,"
                   f" {other} other (rebalances, raced copies)")
        out.append(f"  raced copies produced {self.raced_copies}, dropped by the consumer"
                   f" {self.raced_dropped} (stats of the workers that closed)")
        return out


def duplicate_work(fetches: dict[str, list[Fetch]], records: dict[str, list[tuple[int, str]]],
                   log_dir: Path, outcomes: list[KillOutcome],
                   epochs: dict[str, Counter[str]]) -> DuplicateWork:
    """Duplicate fetches, and the pages fetched more often than the bound allows.

    The bound: a worker process consumes each record of a partition once per assignment
    (epoch) and drops a second copy of a URL it consumed in the same epoch, and every copy of
    a URL lands in one partition (the key is a function of the URL). So one process fetches
    a page at most once per epoch of the page's partition. *epochs*: by User-Agent.
    """
    partition_of = {url: part for part, items in records.items() for _, url in items}
    counts = {url: len(f) for url, f in fetches.items()}
    over = []
    for url, items in fetches.items():
        part = partition_of.get(url, "")
        for agent, n in Counter(f.user_agent for f in items).items():
            if n > epochs.get(agent, Counter())[part]:
                over.append(f"{url} fetched {n}x by {agent}, which was assigned {part} "
                            f"{epochs.get(agent, Counter())[part]}x")
    return DuplicateWork(
        pages=len(fetches), fetches=sum(counts.values()),
        unique=sum(1 for n in counts.values() if n),
        redelivered_after_kills=sum(len(o.held - o.missing) for o in outcomes),
        raced_copies=stat_total(log_dir, "bloom/race_duplicates"),
        raced_dropped=stat_total(log_dir, "frontier/raced_copies_dropped"), over_bound=over)


def by_agent(fetches: dict[str, list[Fetch]]) -> dict[str, int]:
    counts: dict[str, int] = defaultdict(int)
    for items in fetches.values():
        for f in items:
            counts[f.user_agent] += 1
    return dict(counts)
