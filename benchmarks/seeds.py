"""``scrapy seed`` throughput: a file of a million seeds published to a real broker::

    .venv/bin/python -m benchmarks.seeds                      # 1,000,000 seeds, plain and gzip
    .venv/bin/python -m benchmarks.seeds --seeds 50000        # smoke

The local stack's broker and Redis run on free loopback ports; the command runs as a user
runs it (``python -m scrapy seed``), its seeds on 1,000 hosts of the crawl's scope (a worker
opened the crawl: its allowed domains are in the scope set). The figure is seeds per second
of wall time, start-up included, as the command's own summary says, and the records the
seeds topic holds afterwards are counted: every seed must be there.
"""

from __future__ import annotations

import argparse
import gzip
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from kafka import KafkaConsumer, TopicPartition

from benchmarks import services
from crawler.config.keys import CrawlKeys
from crawler.connections.clients import redis_sync_client
from crawler.localstack.stack import Stack

HOSTS = 1000
TARGET = 20_000  # seeds per second (issue 15)


def write_seeds(path: Path, count: int, *, packed: bool) -> None:
    lines = "".join(f"http://h{i % HOSTS}.bench.test/page/{i}\n" for i in range(count))
    data = lines.encode()
    path.write_bytes(gzip.compress(data, compresslevel=1) if packed else data)


def topic_records(bootstrap: str, topic: str) -> int:
    """The distinct records *topic* holds, read to its end (end offsets are not trusted
    here: Tansu 0.6, the broker this benchmark first ran on, gave them short)."""
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    try:
        tps = [TopicPartition(topic, p) for p in consumer.partitions_for_topic(topic) or ()]
        consumer.assign(tps)
        consumer.seek_to_beginning()
        seen: set[bytes] = set()
        quiet_since = time.monotonic()
        while time.monotonic() - quiet_since < 5:
            for records in consumer.poll(500, max_records=10_000).values():
                seen.update(r.value for r in records)
                quiet_since = time.monotonic()
        return len(seen)
    finally:
        consumer.close()


def run(env: dict[str, str], crawl: str, path: Path) -> tuple[float, str]:
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "scrapy", "seed", "site", "-f", str(path), "--crawl-id", crawl],
        env={**os.environ, **env, "SCRAPY_SETTINGS_MODULE": "crawler.settings"},
        capture_output=True, text=True, timeout=1800)
    spent = time.monotonic() - started
    if proc.returncode != 0:
        raise SystemExit(f"scrapy seed failed: {proc.stderr[-2000:]}")
    return spent, proc.stdout.strip().splitlines()[-1]


def main(argv: list[str] | None = None) -> int:
    services.end_on_sigterm()  # a SIGTERM stops what it started, too
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, default=1_000_000)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-seeds-") as tmp:
        stack = Stack(Path(tmp) / "stack")
        try:
            env = stack.start(["redis", "kafka"])
            env["MONGO_URI"] = "mongodb://127.0.0.1:9/"  # not used by scrapy seed
            failed = False
            for packed in (False, True):
                crawl = f"bench-seeds-{'gz' if packed else 'plain'}"
                client = redis_sync_client(env["REDIS_URL"])
                client.sadd(CrawlKeys(crawl).scope, "bench.test")  # as a worker's open does
                client.close()
                path = Path(tmp) / ("seeds.txt.gz" if packed else "seeds.txt")
                write_seeds(path, args.seeds, packed=packed)
                spent, summary = run(env, crawl, path)
                held = topic_records(env["KAFKA_BOOTSTRAP_SERVERS"], f"{crawl}.seeds")
                rate = args.seeds / spent
                print(f"{path.name}: {args.seeds:,} seeds in {spent:.1f} s = {rate:,.0f} seeds/s "
                      f"(wall, start-up included; target {TARGET:,}); topic holds {held:,}")
                print(f"  scrapy seed: {summary}")
                published = int(re.match(r"(\d+) seeds published", summary).group(1))  # type: ignore[union-attr]
                failed |= held != args.seeds or published != args.seeds
        finally:
            stack.stop()
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
