"""``scrapy seed SPIDER URL... [-f FILE|-]``: publish seeds to a crawl's seed topic."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable, Iterator
from typing import IO, Any, ClassVar

from scrapy.commands import ScrapyCommand
from scrapy.exceptions import UsageError

from crawler.config import readers as config
from crawler.config.readers import SettingError
from crawler.connections import clients as connection
from crawler.connections.kafka_topics import TopicPolicy
from crawler.connections.options import KafkaOptions, connect_timeout
from crawler.frontier import codec
from crawler.frontier.partitioning import PARTITION_BY, partitioner


class Command(ScrapyCommand):
    requires_project = True
    default_settings: ClassVar[dict[str, Any]] = {"LOG_LEVEL": "INFO"}

    def syntax(self) -> str:
        return "<spider> [url ...] [-f FILE|-]"

    def short_desc(self) -> str:
        return "Publish seed URLs to a distributed crawl (<CRAWL_ID>.seeds)"

    def add_options(self, parser: argparse.ArgumentParser) -> None:
        super().add_options(parser)
        parser.add_argument("-f", "--file", dest="file", help="read seeds from FILE, - for stdin")
        parser.add_argument("--crawl-id", dest="crawl_id", help="CRAWL_ID (default: the spider)")

    def run(self, args: list[str], opts: argparse.Namespace) -> None:
        if not args:
            raise UsageError("name the spider whose crawl gets the seeds")
        settings = self.settings
        assert settings is not None
        if opts.crawl_id:
            settings.set("CRAWL_ID", opts.crawl_id, "cmdline")
        try:
            crawl = config.crawl_id(settings, args[0])
            lines = list(_numbered(args[1:], opts.file))
            if not lines:
                raise UsageError("no seeds given: pass URLs or -f FILE")
            sent, bad = publish(settings, crawl, lines)
        except (SettingError, connection.ServiceUnavailable) as exc:  # one line, no traceback
            print(f"scrapy seed: {exc}", file=sys.stderr)
            self.exitcode = 1
            return
        print(f"{sent} seeds published to {crawl}.seeds, {bad} invalid lines skipped")
        self.exitcode = 0 if sent or not bad else 1


def _numbered(urls: list[str], path: str | None) -> Iterator[tuple[str, int, str]]:
    for number, url in enumerate(urls, 1):
        yield ("argument", number, url)
    if path:
        handle: IO[str] = sys.stdin if path == "-" else open(path, encoding="utf-8")
        with handle:
            for number, line in enumerate(handle, 1):
                if line.strip() and not line.lstrip().startswith("#"):
                    yield (path if path != "-" else "stdin", number, line.strip())


def publish(settings: object, crawl: str, lines: Iterable[tuple[str, int, str]]) -> tuple[int, int]:
    """Validate and send seed *lines*; returns (sent, invalid)."""
    from scrapy.settings import BaseSettings

    assert isinstance(settings, BaseSettings)
    kafka = KafkaOptions.from_settings(settings)
    if not kafka.bootstrap:
        raise UsageError("Setting KAFKA_BOOTSTRAP_SERVERS: required to publish seeds")
    timeout = connect_timeout(settings)
    key_for = partitioner(config.get_choice(settings, "KAFKA_PARTITION_BY", PARTITION_BY),
                          config.get_int(settings, "KAFKA_HOST_PARTITIONS", minimum=0))
    partitions = config.get_int(settings, "KAFKA_PARTITIONS", minimum=1)
    policy = TopicPolicy.from_settings(settings)
    with connection.quiet_client_logs():  # a refusal is said in one line, not per retry
        connection.ensure_topics(kafka, {f"{crawl}.seeds": partitions},
                                 policy=policy, connect_timeout=timeout)
    producer = connection.kafka_producer(kafka, connect_timeout=timeout, linger_ms=5,
                                         client_id=f"seed-{crawl}")
    futures, bad = [], 0
    for source, number, text in lines:
        try:
            request = codec.decode_seed(text.encode())
        except codec.CodecError as exc:
            print(f"{source}:{number}: skipped: {exc}", file=sys.stderr)
            bad += 1
            continue
        futures.append(producer.send(f"{crawl}.seeds", key=key_for(request), value=text.encode()))
    producer.flush()
    for future in futures:
        future.get(timeout=timeout * 4)
    producer.close()
    return len(futures), bad
