"""Where the crawl report's numbers come from: the ledger in Redis, offsets in Kafka, items
in MongoDB. Read in this order (committed offsets before the ledger) so that a crawl running
meanwhile can only make ``unaccounted`` smaller, never invent a gap."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Mapping
from typing import Any

import redis.asyncio as aioredis
from scrapy.settings import BaseSettings

from crawler.config.keys import CrawlKeys
from crawler.connections import clients as connection
from crawler.connections.tasks import in_thread
from crawler.frontier import crawllife, crawlstate
from crawler.frontier.config import FrontierConfig
from crawler.ledger.report import Offsets, lines, reconcile
from crawler.storage.settings import StorageConfig

logger = logging.getLogger(__name__)
REPORT_TIMEOUT = 15.0  # seconds a worker gives the report at close


async def ledger_counters(client: aioredis.Redis, crawl: str) -> dict[str, int]:
    return parse_counters(await client.hgetall(CrawlKeys(crawl).ledger))


def parse_counters(raw: Mapping[Any, Any]) -> dict[str, int]:
    """The ledger hash as ``{counter: n}``; a field that is not an integer is left out
    (the ledger's script writes only integers: another writer's field is not a count)."""
    counters: dict[str, int] = {}
    for name, value in raw.items():
        try:
            counters[_text(name)] = int(value)
        except (ValueError, TypeError, UnicodeDecodeError):
            logger.warning("Unreadable ledger counter %r left out", name)
    return counters


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def kafka_offsets(cfg: FrontierConfig) -> tuple[Offsets, Offsets]:
    """(request topics, seeds topic): records written and committed by the crawl's group.
    Blocking: call it from a thread."""
    consumer = connection.kafka_consumer(
        cfg.kafka, group_id=cfg.group_id, connect_timeout=cfg.connect_timeout,
        client_id=f"report-{cfg.crawl_id}", session_timeout_ms=cfg.session_timeout_ms,
        heartbeat_interval_ms=cfg.heartbeat_interval_ms,
        max_poll_interval_ms=cfg.max_poll_interval_ms)
    try:
        topics = cfg.request_topics_in(consumer.topics())
        seeds = [cfg.seeds_topic] if cfg.seeds_topic in consumer.topics() else []
        return (_offsets(consumer, topics, cfg.connect_timeout),
                _offsets(consumer, seeds, cfg.connect_timeout))
    finally:
        consumer.close(autocommit=False)


def _offsets(consumer: Any, topics: Iterable[str], timeout: float) -> Offsets:
    from kafka import TopicPartition

    tps = [TopicPartition(t, p) for t in topics for p in consumer.partitions_for_topic(t) or ()]
    if not tps:
        return Offsets(0, 0)
    committed = connection.committed_offsets(consumer, tps, timeout)  # before the ledger
    begin = consumer.beginning_offsets(tps)
    end = consumer.end_offsets(tps)
    done: dict[Any, int] = {tp: begin[tp] if (at := committed[tp]) is None else at
                            for tp in tps}
    # a committed offset past the end offset is the truer end (Tansu 0.6, a broker this
    # project ran on before Apache Kafka, said end offsets short of the records it held)
    return Offsets(written=sum(max(end[tp], done[tp]) for tp in tps),
                   committed=sum(done.values()))


async def mongo_counts(settings: BaseSettings, crawl: str, *,
                       exact: bool = True) -> tuple[int | None, int | None]:
    """(items stored, items rejected) in the crawl's collections (not *exact*: MongoDB's
    estimate from its metadata, which costs nothing on a big collection)."""
    cfg = StorageConfig.from_settings(settings, crawl)
    if cfg is None:
        return None, None
    client = connection.mongo_client(cfg.uri, params=cfg.params,
                                     connect_timeout=cfg.connect_timeout, timeout=cfg.timeout)
    try:
        db = client[cfg.database]
        items, rejected = db[cfg.crawl_id], db[f"{cfg.crawl_id}.rejected"]
        if not exact:
            return (await items.estimated_document_count(),
                    await rejected.estimated_document_count())
        return await items.count_documents({}), await rejected.count_documents({})
    finally:
        await client.close()


async def read_report(client: aioredis.Redis, settings: BaseSettings,
                      crawl: str, *, exact: bool = True) -> dict[str, Any]:
    """The crawl's reconciliation (:func:`crawler.ledger.report.reconcile`; not *exact*:
    MongoDB's estimated counts)."""
    cfg = FrontierConfig.from_settings(settings, crawl)
    requests, seeds = await in_thread(lambda: kafka_offsets(cfg), "ledger-offsets")
    counters = await ledger_counters(client, crawl)
    stored, rejected = await mongo_counts(settings, crawl, exact=exact)
    now, workers, _bad = await crawlstate.read_workers(client, CrawlKeys(crawl).workers,
                                                      crawlstate.HeartbeatClock())
    stale = crawlstate.stale_after_setting(settings)
    live = sum(not crawlstate.is_lost(now, float(w.get("ts") or 0), stale)
               for w in workers.values())
    finished = crawllife.parse_finished(await client.get(CrawlKeys(crawl).finished))
    return reconcile(counters, crawl_id=crawl, requests=requests, seeds=seeds, stored=stored,
                     rejected=rejected, finished=finished is not None and not live,
                     workers=live)


async def log_report(client: aioredis.Redis, settings: BaseSettings, crawl: str, *,
                     timeout: float) -> None:
    """The report in the log, a line each (a worker's last words); a line why if it cannot
    be read within *timeout* seconds."""
    try:
        report = await asyncio.wait_for(read_report(client, settings, crawl), timeout)
    except Exception as exc:  # an outage at close: the crawl's state is intact
        logger.warning("Crawl ledger: no report at close (%s); scrapy cluster report %s "
                       "shows it later", str(exc) or type(exc).__name__, crawl)
        return
    for line in lines(report):
        logger.info("Crawl ledger: %s", line)
