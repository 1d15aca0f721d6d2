"""Seed records of ``<CRAWL_ID>.seeds``: claimed in Redis, at most a few at a time.

A seed record becomes a request only if its claim in Redis wins (the first record of a
URL wins, and so does the same record delivered again: see
:meth:`crawler.frontier.crawlstate.CrawlState.claim_seed`). A seed file of 50,000 lines arrives
as fast as the broker can deliver it, so claims run under a bound
(``KAFKA_SEED_CLAIMS``), and a record counts against the worker's buffer
(``KAFKA_BUFFER_SIZE``) until its lease ends: the rest of the file waits in the
broker, not in memory, and the Redis pool is never exhausted by claims.

A record a worker of the crawl signed is decoded in full; any other is an external seed,
held to ``SEED_META_KEYS`` and ``SEED_REQUEST_FIELDS`` (:mod:`crawler.frontier.seedrule`):
what they do not allow sends it to the dead-letter topic with the reason.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from scrapy import Request, Spider

from crawler.connections.retry import RedisRetry, retry
from crawler.dedup.due import RECRAWL_META
from crawler.frontier import canonical, codec
from crawler.frontier.consumer import Record
from crawler.frontier.leases import Lease
from crawler.frontier.scope import CrawlScope, host_of
from crawler.frontier.seedrule import DEFAULT, SeedRule
from crawler.frontier.seedtrust import SeedSigner, Verdict
from crawler.ledger import outcomes
from crawler.security.trusted import TRUSTED

logger = logging.getLogger(__name__)
SCOPE_LINES, SCOPE_EVERY = 10, 1000  # warnings of refused seeds: the first ones, then 1 in N


class SeedClaims:
    """Turn seed records into requests, under a bound of concurrent claims."""

    def __init__(
        self, *, spider: Spider, fingerprint: Callable[[Request], bytes], state: Any,
        submit: Callable[..., bool], stats: Any, finish: Callable[[Lease], None],
        dead: Callable[[Record, Lease, str], None], limit: int, signer: SeedSigner,
        rule: SeedRule = DEFAULT, scope: CrawlScope | None = None,
        canonical_rules: canonical.CanonicalRules = canonical.DEFAULT,
    ) -> None:
        self.spider, self.fingerprint, self.state = spider, fingerprint, state
        self.canonical = canonical_rules  # CANONICAL_*: a seed in the form of the crawl's links
        self.scope, self.signer, self.rule = scope, signer, rule
        self._badly_signed = 0
        self.submit, self.stats, self.finish, self.dead = submit, stats, finish, dead
        self._slots = asyncio.Semaphore(limit)
        self._trust_retry = RedisRetry("seed hosts")
        self.pending = 0  # seed records received and not yet claimed or refused
        self.refused = 0  # seeds outside the crawl's scope

    def take(self, record: Record, lease: Lease) -> Any | None:
        """A coroutine that claims *record*'s seed, or None if the record is invalid."""
        try:
            request = self._decode(record)
        except codec.CodecError as exc:
            if isinstance(exc, codec.SeedRefused):
                self.stats.inc_value("frontier/seeds_restricted")
            self.dead(record, lease, str(exc))
            return None
        self.pending += 1
        return self._claim(request, record, lease)

    def _decode(self, record: Record) -> Request:
        """The seed of *record* (in full if a worker of the crawl signed it, else restricted),
        in canonical form (:mod:`crawler.frontier.canonical`)."""
        verdict = self.signer.verdict(record.value, record.headers)
        if verdict is Verdict.SIGNED:
            request = codec.decode_trusted_seed(record.value, self.spider)
        else:
            if verdict is Verdict.BAD:
                self._bad_signature(record)
            request = codec.decode_seed(record.value, self.spider, rule=self.rule)
        url = self.canonical.url(request.url)
        return request if url == request.url else request.replace(url=url)

    def _bad_signature(self, record: Record) -> None:
        self._badly_signed += 1
        self.stats.inc_value("frontier/seeds_bad_signature")
        if self._badly_signed == 1:
            logger.warning("Seed record %s:%d:%d carries a signature this worker cannot verify "
                           "(a forgery, or a worker with another seed key: was the crawl's "
                           "Redis state lost?); it is taken as an external seed",
                           record.topic, record.partition, record.offset)

    async def _claim(self, request: Request, record: Record, lease: Lease) -> None:
        try:
            async with self._slots:
                await self._claim_one(request, record, lease)
        finally:
            self.pending -= 1

    async def _claim_one(self, request: Request, record: Record, lease: Lease) -> None:
        fingerprint = self.fingerprint(request)
        record_id = f"{record.topic}:{record.partition}:{record.offset}"
        claimed = await self.state.claim_seed(fingerprint.hex(), record_id)
        # with a recrawl_after meta, the due store decides (crawler.dedup.due)
        if not (claimed or request.dont_filter or RECRAWL_META in request.meta):
            self.stats.inc_value("frontier/seeds_duplicate")
            lease.outcome = outcomes.SEED_DUPLICATE
        elif self.scope is not None and not await self.scope.admits_seed(request.url):
            self._out_of_scope(request.url)
            lease.outcome = outcomes.SEED_OUT_OF_SCOPE
        else:  # its host first: private networks stay open to it (crawler.security.trusted)
            host = host_of(request.url)
            await retry(lambda: TRUSTED.add(host), on_retry=self._trust_retry.on_retry)
            self.submit(request, fingerprint, filtered=not request.dont_filter)
            self.stats.inc_value("frontier/seeds_taken")
            lease.outcome = outcomes.SEED_ACCEPTED
        self.finish(lease)

    def _out_of_scope(self, url: str) -> None:
        """Say it for the first ``SCOPE_LINES`` seeds, then every ``SCOPE_EVERY``-th."""
        refused = self.refused = self.refused + 1
        self.stats.inc_value("frontier/seeds_out_of_scope")
        if refused <= SCOPE_LINES or refused % SCOPE_EVERY == 0:
            domains = ", ".join(getattr(self.spider, "allowed_domains", [])[:5])
            logger.warning("Seed %s refused (%d so far): its host is outside the crawl's scope "
                           "(allowed domains %s; scrapy seed adds hosts unless "
                           "SEED_SCOPE=reject)", url, refused, domains)
