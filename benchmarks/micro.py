"""Microbenchmarks of the crawler's building blocks (issue 5, part 2).

    .venv/bin/python -m benchmarks.micro [--quick] [--out docs/benchmarks/micro.md]

Starts its own Redis and Kafka broker (Apache Kafka, one node) on free loopback ports with
:class:`crawler.localstack.stack.Stack`, stops them by PID at the end, and measures:

1. Bloom memory per URL (``MEMORY USAGE`` of a real filter) and its false-positive rate;
2. dedup throughput: fingerprints checked and added a second by one worker process;
3. frontier throughput: requests a second produced and consumed through the broker;
4. serialisation cost: microseconds per ``encode_request`` / ``decode_request``;
5. the demo site's server: requests a second on kept-alive connections.

Each number is the median of a few repetitions. It prints a table and writes a markdown
report with the command, the date, the machine, each measurement, its target and
PASS/MISS. ``--quick`` runs tiny sizes (for the smoke test): its numbers mean nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import platform
import shlex
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from datetime import UTC, datetime
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from benchmarks import (
    micro_bloom,
    micro_codec,
    micro_demo_site,
    micro_frontier,
    micro_politeness,
    services,
)
from benchmarks.micro_result import FULL, QUICK, Measurement, Sizes, fmt
from benchmarks.report import cpu_model
from crawler.localstack.kafka_broker import KAFKA_VERSION
from crawler.localstack.services import java_binary, redis_binary
from crawler.localstack.stack import Stack

logger = logging.getLogger(__name__)

DEFAULT_OUT = Path("docs/benchmarks/micro.md")
SECTIONS = (micro_bloom.MEMORY, micro_bloom.DEDUP, micro_frontier.FRONTIER, micro_codec.CODEC,
            micro_politeness.POLITENESS, micro_demo_site.DEMO_SITE)
NOTES = {
    micro_bloom.MEMORY: "A new filter made by `RedisBloom.open()` (growth 2); every key it "
    "created is measured with `MEMORY USAGE key SAMPLES 0`, so allocator rounding counts. "
    "The false-positive rate is measured on a filter filled to its capacity.",
    micro_bloom.DEDUP: "One process, the Outbox's order: `RedisBloom.check(batch)` then "
    "`RedisBloom.add(batch)` of fresh SHA1 fingerprints, on one Redis (AOF on, as the "
    "stack runs it). Redis CPU is its own user + system time over the run; this process's "
    "CPU a call is the client side of one `check` or `add` (redis-py, asyncio). Redis runs "
    "the scripts on one core; with small batches the per-call cost of both sides "
    "dominates, with large ones the bit operations do.",
    micro_frontier.FRONTIER: "One process with the worker's Sender and ConsumerLoop; an "
    "asyncio loop stands in for the reactor, the engine takes and acknowledges each "
    "request as soon as it is decoded. Broker: Apache Kafka, one node, its log on disk. Encoding, "
    "kafka-python's record building and parsing (pure Python) and decoding all share one "
    "core under the GIL, so producing and consuming at once costs about their sum.",
    micro_codec.CODEC: "Per call, in this process; records are what goes to Kafka.",
    micro_politeness.POLITENESS: "What spreading one host over the workers, the cluster-wide "
    "per-host limits and the priority bands add to each request, in this process (the "
    "renewals against the stack's Redis). Compare with the encode and decode of a request "
    "above, and with Scrapy's own cost per page in ../shared/docs/baseline.md.",
    micro_demo_site.DEMO_SITE: "`crawler.localstack.demo_site.serve()` (a threaded `http.server`) "
        "in "
    "this process, with its client threads: both sides share one GIL. The target is about "
    "the pace of `./run demo` (three workers), so that the site is not the demo's bottleneck.",
}


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.micro", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="tiny sizes, one repetition")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="the markdown report")
    return parser.parse_args(argv)


def _first_line(command: list[str]) -> str:
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=10, check=False)
    except OSError as exc:
        return f"unknown ({exc})"
    text = (done.stdout or done.stderr).strip()
    return text.splitlines()[0] if text else "unknown"


def _version(name: str) -> str:
    try:
        return version(name)
    except PackageNotFoundError:
        return "(not installed)"


def machine() -> dict[str, str]:
    return {
        "CPU": f"{os.cpu_count()} cores, {cpu_model()}",
        "OS": platform.platform(),
        "Python": platform.python_version(),
        "Redis": _first_line([redis_binary(), "--version"]),
        "Broker": f"Apache Kafka {KAFKA_VERSION} on "
                  + _first_line([java_binary(), "-version"]),
        "Libraries": ", ".join(f"{name} {_version(name)}" for name in
                               ("redis", "kafka-python", "crc32c", "Scrapy")),
    }


async def measure(env: dict[str, str], sizes: Sizes) -> list[Measurement]:
    memory, dedup = await micro_bloom.run(env, sizes)
    logger.info("Bloom filter done")
    frontier = await micro_frontier.run(env["KAFKA_BOOTSTRAP_SERVERS"], sizes)
    logger.info("frontier done")
    politeness = await micro_politeness.run(env["REDIS_URL"], sizes)
    return (memory + dedup + frontier + micro_codec.run(sizes) + politeness
            + micro_demo_site.run(sizes))


def table_rows(measurements: list[Measurement]) -> list[list[str]]:
    return [[m.section, m.name, fmt(m.value), m.unit, str(m.target or ""), m.verdict]
            for m in measurements]


def print_table(measurements: list[Measurement]) -> None:
    rows = [["section", "measurement", "median", "unit", "target", ""],
            *table_rows(measurements)]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)))


def section_markdown(number: int, section: str, measurements: list[Measurement]) -> list[str]:
    lines = [f"## {number}. {section}", "", NOTES[section], "",
             "| measurement | median | unit | target | result | how |",
             "|---|---:|---|---|---|---|"]
    for m in measurements:
        lines.append(f"| {m.name} | {fmt(m.value)} | {m.unit} | {m.target or ''} "
                     f"| {m.verdict} | {m.detail} |")
    met = [m.name for m in measurements if m.verdict == "PASS"]
    missed = [m.name for m in measurements if m.verdict == "MISS"]
    if met or missed:
        lines += ["", f"Meets its target: {'; '.join(met) or 'none'}. "
                      f"Misses it: {'; '.join(missed) or 'none'}."]
    return [*lines, ""]


def markdown(command: str, started: datetime, sizes: Sizes,
             measurements: list[Measurement]) -> str:
    lines = ["# Microbenchmarks", "",
             "Written by `benchmarks/micro.py`; every number below comes from the run.", "",
             f"- Command: `{command}`",
             f"- Date: {started:%Y-%m-%d %H:%M} UTC",
             f"- Repetitions: {sizes.repeats} (medians reported)"]
    lines += [f"- {key}: {value}" for key, value in machine().items()]
    if sizes is QUICK:
        lines.append("- **--quick**: tiny sizes for the smoke test; these numbers mean nothing")
    verdicts = [m.verdict for m in measurements if m.verdict]
    lines += [f"- Targets: {verdicts.count('PASS')} PASS, {verdicts.count('MISS')} MISS", ""]
    for number, section in enumerate(SECTIONS, 1):
        lines += section_markdown(number, section,
                                  [m for m in measurements if m.section == section])
    return "\n".join(lines)


def command_line(argv: Sequence[str]) -> str:
    python = sys.executable
    if python.startswith(os.getcwd() + os.sep):
        python = os.path.relpath(python)
    return shlex.join([python, "-m", "benchmarks.micro", *argv])


def main(argv: Sequence[str] | None = None) -> int:
    services.end_on_sigterm()  # a SIGTERM stops what it started, too
    args_list = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(args_list)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    for noisy in ("kafka", "crawler.frontier.consumer", "crawler.frontier.producer",
                  "crawler.connections.clients",
                  "crawler.localstack.stack"):
        logging.getLogger(noisy).setLevel(logging.CRITICAL if noisy == "kafka" else
                                          logging.WARNING)
    sizes, started = (QUICK if args.quick else FULL), datetime.now(UTC)
    with tempfile.TemporaryDirectory(prefix="micro-stack-") as directory:
        stack = Stack(Path(directory))
        try:
            env = stack.start(["redis", "kafka"])
            logger.info("services: %s", env)
            measurements = asyncio.run(measure(env, sizes))
        finally:
            stack.stop()
    print_table(measurements)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(markdown(command_line(args_list), started, sizes, measurements))
    print(f"\nwrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
