"""The two halves of ``scrapy seed`` that talk to services: the producer of seed records,
and the crawl's scope and ledger in Redis. Blocking: the command runs no reactor."""

from __future__ import annotations

import logging
import time
import zlib
from collections import Counter
from typing import Any

import redis
from scrapy.exceptions import UsageError
from scrapy.settings import BaseSettings

from crawler.config import readers as config
from crawler.config.keys import CrawlKeys
from crawler.connections import clients as connection
from crawler.connections.kafka_topics import TopicPolicy
from crawler.connections.options import KafkaOptions, RedisOptions, connect_timeout
from crawler.frontier.partitioning import PARTITION_BY, partitioner
from crawler.frontier.scope import host_of, in_domains
from crawler.frontier.seedfiles import Seed

logger = logging.getLogger(__name__)
LINGER_MS = 20


class _Url:
    """What the record key needs of a request: its URL (and a weak reference, for
    Scrapy's parse cache)."""

    __slots__ = ("__weakref__", "url")

    def __init__(self, url: str) -> None:
        self.url = url


class Publisher:
    """Sends seed records to ``<CRAWL_ID>.seeds``, keyed as the workers key requests."""

    def __init__(self, producer: Any, topic: str, key_for: Any, timeout: float,
                 partitions: int = 1) -> None:
        self.producer, self.topic, self.key_for, self.timeout = producer, topic, key_for, timeout
        self.partitions = partitions
        self.counts: Counter[str] = Counter(published=0, invalid=0, out_of_scope=0, failed=0)
        self.started = time.monotonic()
        self.errors: list[str] = []

    @classmethod
    def open(cls, settings: BaseSettings, crawl: str) -> Publisher:
        kafka = KafkaOptions.from_settings(settings)
        if not kafka.bootstrap:
            raise UsageError("Setting KAFKA_BOOTSTRAP_SERVERS: required to publish seeds")
        timeout = connect_timeout(settings)
        key_for = partitioner(config.get_choice(settings, "KAFKA_PARTITION_BY", PARTITION_BY),
                              config.get_int(settings, "KAFKA_HOST_PARTITIONS", minimum=0))
        partitions = config.get_int(settings, "KAFKA_PARTITIONS", minimum=1)
        with connection.quiet_client_logs():  # a refusal is said in one line, not per retry
            connection.ensure_topics(kafka, {f"{crawl}.seeds": partitions},
                                     policy=TopicPolicy.from_settings(settings),
                                     connect_timeout=timeout)
        producer = connection.kafka_producer(kafka, connect_timeout=timeout,
                                             linger_ms=LINGER_MS, client_id=f"seed-{crawl}")
        known = getattr(producer, "partitions_for", lambda _topic: None)(f"{crawl}.seeds")
        count = len(known or ()) or partitions
        return cls(producer, f"{crawl}.seeds", key_for, timeout, count)

    def send(self, seed: Seed) -> None:
        # a seed's record key and partition do not matter (any worker claims it, and keys
        # the request it makes itself): its host and a crc32 of it, not a parse and murmur2
        key = seed.host.encode() if seed.host else self.key_for(_Url(seed.url))
        future = self.producer.send(self.topic, key=key, value=seed.value,
                                    partition=zlib.crc32(key) % self.partitions)
        future.add_errback(self._failed)
        self.counts["published"] += 1

    def _failed(self, exc: BaseException) -> None:
        self.counts["failed"] += 1
        if len(self.errors) < 3:
            self.errors.append(str(exc))

    def close(self) -> None:
        self.producer.flush(timeout=self.timeout * 4 + self.counts["published"] / 5000)
        self.producer.close(timeout=self.timeout)
        self.counts["published"] -= self.counts["failed"]

    def summary(self, added: int) -> str:
        c, spent = self.counts, max(time.monotonic() - self.started, 1e-9)
        line = (f"{c['published']} seeds published to {self.topic}, {c['invalid']} invalid "
                f"lines skipped, {c['out_of_scope']} refused as out of scope, {added} hosts "
                f"added to the crawl's scope ({c['published'] / spent:,.0f} seeds/s)")
        if c["failed"]:
            line += f"; {c['failed']} NOT published: {'; '.join(self.errors)}"
        return line


class SeedScope:
    """The crawl's scope set (:mod:`crawler.frontier.scope`) as ``scrapy seed`` uses it."""

    def __init__(self, client: redis.Redis | None, crawl: str, mode: str,
                 known: set[str], url: str = "") -> None:
        self.client, self.keys, self.mode, self.known = client, CrawlKeys(crawl), mode, known
        self.url = url  # REDIS_URL, for the error line
        self.new: set[str] = set()
        self._unsaved: list[str] = []  # new hosts not yet in the crawl's scope set

    @classmethod
    def connect(cls, settings: BaseSettings, crawl: str, mode: str) -> SeedScope:
        if not config.get_str(settings, "REDIS_URL"):
            logger.warning("REDIS_URL is not set: the crawl's scope is left to the workers")
            return cls(None, crawl, mode, set())
        options = RedisOptions.from_settings(settings)
        client = connection.redis_sync_client(options.url, options.params,
                                              connect_timeout=options.connect_timeout)
        try:
            members = client.smembers(CrawlKeys(crawl).scope)
        except redis.RedisError as exc:
            raise connection.ServiceUnavailable("REDIS_URL", options.url, str(exc)) from exc
        return cls(client, crawl, mode, {_text(m) for m in members}, options.url)

    @property
    def added(self) -> int:
        return len(self.new) if self.mode == "add" else 0

    def admits(self, url: str, host: str = "") -> bool:
        """Whether seed *url* (of *host*, if known) may go (in ``add`` mode a new host joins
        the scope)."""
        host = host or host_of(url)
        if host in self.new or in_domains(host, self.known):
            return True
        if self.mode == "add" or not self.known:  # no worker said its scope yet: they decide
            self.new.add(host)
            if self.mode == "add":
                self._unsaved.append(host)
            return True
        return False

    def save(self) -> None:
        """Put the hosts added since the last call into the crawl's scope set: before their
        seeds are sent, or a worker could claim one and find its host outside the scope."""
        if self.client is None or not self._unsaved:
            return
        try:
            self.client.sadd(self.keys.scope, *self._unsaved)
        except redis.RedisError as exc:
            raise connection.ServiceUnavailable("REDIS_URL", self.url, str(exc)) from exc
        self._unsaved.clear()

    def close(self, counts: Counter[str]) -> None:
        """Add the new hosts (``add``) and count the command's seeds in the crawl ledger."""
        if self.client is None:
            return
        with self.client.pipeline(transaction=False) as pipe:
            if self._unsaved:  # the hosts of seeds that were not sent: kept all the same
                pipe.sadd(self.keys.scope, *self._unsaved)
            for name in ("published", "invalid", "out_of_scope"):
                if counts[name]:
                    pipe.hincrby(self.keys.ledger, f"submitted/{name}", counts[name])
            pipe.execute()
        self.client.close()


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
