"""Every Redis key of a crawl, and the id of this worker process: one place for each.

All keys of a crawl share the hash tag ``{<CRAWL_ID>}``, so in a Redis Cluster they land in
one slot (Lua scripts touch several at once) and ``SCAN {<CRAWL_ID>}:*`` finds them all.
"""

from __future__ import annotations

import os
import socket
import uuid
from dataclasses import dataclass
from functools import cache


@dataclass(frozen=True)
class CrawlKeys:
    """The Redis keys of crawl *crawl_id*."""

    crawl_id: str

    @property
    def prefix(self) -> str:
        """``{<CRAWL_ID>}:``, the start of every key of the crawl."""
        return f"{{{self.crawl_id}}}:"

    @property
    def pattern(self) -> str:
        """``{<CRAWL_ID>}:*``: the ``SCAN`` pattern of every key of the crawl."""
        return self.prefix + "*"

    def family(self, key: str) -> str:
        """What *key* of the crawl holds, by its first name part: ``bloom``, ``seed``..."""
        return key[len(self.prefix):].split(":", 1)[0] or "?"

    @property
    def bloom(self) -> str:
        """The shared Bloom filter's metadata hash; its slices are ``<bloom>:<n>[:<piece>]``."""
        return self.prefix + "bloom"

    def bloom_generation(self, generation: int) -> str:
        """The Bloom filter of recrawl generation *generation* (``RECRAWL_AFTER > 0``), laid
        out as :attr:`bloom` is: ``<bloom>:g<n>:meta``, ``<bloom>:g<n>:s<i>[:<piece>]``."""
        return f"{self.bloom}:g{generation}"

    @property
    def recrawl(self) -> str:
        """Hash: the recrawl generation (``generation``, ``started``, ``after``; Redis time)."""
        return self.prefix + "recrawl"

    @property
    def recrawl_due(self) -> str:
        """Hash: fingerprint (hex) -> Redis time its request was last queued, for the
        requests with a ``recrawl_after`` meta only (:mod:`crawler.dedup.due`)."""
        return self.prefix + "recrawl:due"

    @property
    def warc_digests(self) -> str:
        """Hash: fingerprint (hex) -> ``<payload digest> <WARC-Date>`` of the URL's last
        full WARC capture, for revisit records (:mod:`crawler.archive.digests`)."""
        return self.prefix + "warc:digests"

    @property
    def ledger(self) -> str:
        """Hash: the crawl ledger's counters (:mod:`crawler.ledger`)."""
        return self.prefix + "ledger"

    def ledger_seen(self, topic: str, partition: int) -> str:
        """Sorted set: the offsets of *topic*/*partition* the ledger counted and Kafka may
        still deliver again (not yet committed)."""
        return f"{self.prefix}ledger:seen:{topic}:{partition}"

    @property
    def scope(self) -> str:
        """Set: host names added to the crawl's allowed domains (``scrapy seed``)."""
        return self.prefix + "scope"

    @property
    def workers(self) -> str:
        """Hash: worker id -> JSON heartbeat."""
        return self.prefix + "workers"

    @property
    def finished(self) -> str:
        """The crawl's finished record (JSON)."""
        return self.prefix + "finished"

    @property
    def run_started(self) -> str:
        """When the crawl's current (or last) run began (Redis time; the finished record
        copies it)."""
        return self.prefix + "run-started"

    @property
    def expiring(self) -> str:
        """Set: the keys a finished crawl made expiring (persistent again on a new run)."""
        return self.prefix + "expiring"

    @property
    def control(self) -> str:
        """An operator's command to every worker (pause, resume, stop)."""
        return self.prefix + "control"

    @property
    def alerts(self) -> str:
        """Hash: alert name -> JSON, refreshed by the workers that see it."""
        return self.prefix + "alerts"

    def seed_claim(self, fingerprint: str) -> str:
        """The claim of one start request, so that one worker publishes it."""
        return self.seed_claim_prefix + fingerprint

    @property
    def seed_claim_prefix(self) -> str:
        """``<prefix>seed:<fingerprint>`` strings hold the seed claims."""
        return self.prefix + "seed:"

    @property
    def rebuild(self) -> str:
        """A Bloom filter being rebuilt after Redis lost the crawl's (:mod:`crawler.recovery`),
        laid out as :attr:`bloom` is and renamed to it once complete."""
        return self.prefix + "rebuild"

    @property
    def repair(self) -> str:
        """The lock of the one worker repairing the crawl's lost state (its worker id)."""
        return self.prefix + "repair"

    @property
    def seed_key(self) -> str:
        """The crawl's secret that signs the seed records its workers publish
        (:mod:`crawler.frontier.seedtrust`)."""
        return self.prefix + "seedkey"

    @property
    def proxies(self) -> str:
        """Set: the proxy pool's members."""
        return self.prefix + "proxies"

    @property
    def proxy_seeded(self) -> str:
        """Set: the addresses the settings have ever added."""
        return self.prefix + "proxy:seeded"

    @property
    def proxy_health(self) -> str:
        """Hash: credential-free proxy id -> JSON health."""
        return self.prefix + "proxy:health"

    @property
    def proxy_hosts(self) -> str:
        """Hash: ``<cause>:<host>`` -> failures seen through the pool (cause: proxy | origin)."""
        return self.prefix + "proxy:hosts"

    @property
    def proxy_tombstone(self) -> str:
        """While it exists, a missing members set means 'emptied by an operator'."""
        return self.prefix + "proxy:none"

    @property
    def host_slots_prefix(self) -> str:
        """``<prefix>slots:<host>`` hashes hold each host's cluster-wide concurrency shares."""
        return self.prefix + "slots:"

    def host_slots(self, host: str) -> str:
        """Hash: worker id -> ``held,want,expires_ms,served_ms`` for one host."""
        return self.host_slots_prefix + host

    def host_pages(self, host: str) -> str:
        """String: the pages of *host* the crawl has started (``HOST_PAGE_BUDGET``)."""
        return self.prefix + "budget:" + host

    @property
    def seed_hosts(self) -> str:
        """Set: the hosts of the crawl's seeds, which private networks stay open to."""
        return self.prefix + "seed-hosts"

    def robots(self, origin: str) -> str:
        """String: the JSON robots.txt verdict of *origin* (``scheme://host:port``)."""
        return self.prefix + "robots:" + origin

    def robots_claim(self, origin: str) -> str:
        """String: the worker fetching *origin*'s robots.txt for the cluster, while it does."""
        return self.prefix + "robots-claim:" + origin

    @property
    def ratelimit_prefix(self) -> str:
        """``<prefix>ratelimit:<host>`` hashes hold each host's token bucket."""
        return self.prefix + "ratelimit:"

    @property
    def ratelimit_overrides(self) -> str:
        """Hash: host -> JSON, the live rate overrides."""
        return self.ratelimit_prefix + "overrides"

    @property
    def ratelimit_adapted(self) -> str:
        """Hash: host -> until when it keeps the rate a 429 or 503 gave it (no rate before)."""
        return self.ratelimit_prefix + "adapted"

    def ratelimit_bucket(self, host: str) -> str:
        # a host named "overrides" or "adapted" must not collide with those hashes
        return self.ratelimit_prefix + (host + "." if host in ("overrides", "adapted")
                                        else host)


@cache
def worker_id() -> str:
    """``host:pid:<6 hex>``, this process's id: the heartbeat field, the ``worker`` label of
    every metric, the node ``scrapy cluster status`` and the dashboard show. The random part
    tells a restarted worker from its predecessor when a PID is reused."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
