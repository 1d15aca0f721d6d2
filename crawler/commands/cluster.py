"""``scrapy cluster ACTION [CRAWL_ID]``: look at a running distributed crawl.

``status [CRAWL_ID] [--json] [--watch]`` reads the crawl's state in Redis (worker
heartbeats, Bloom filter metadata, proxy health, proxy failures per host, the finished mark)
and shows it (:mod:`crawler.operations.clusterview`). It only reads: nothing in Redis is changed.
``pause``, ``resume`` and ``stop`` set the crawl's control key, which every worker
reads at its next heartbeat: ``pause`` stops new downloads (in-flight ones finish),
``resume`` undoes it, ``stop`` closes every worker with reason ``stopped``; what was
not finished stays in Kafka for the next run of the same ``CRAWL_ID``.
``report CRAWL_ID [--json]`` prints the crawl ledger: where every record of the crawl went,
and what no counter explains (:mod:`crawler.ledger.report`; Kafka and MongoDB are read too).
``dashboard [CRAWL_ID] [--port P]`` serves the status as a live web page and
``/api/status`` on 127.0.0.1 (:mod:`crawler.operations.dashboard`; ``--port 0``: a free port).
``trace CRAWL_ID URL [--json]`` prints what happened to one URL, from the crawl's status
index in MongoDB (:mod:`crawler.operations.trace`).
``purge CRAWL_ID --yes`` removes every Redis key and Kafka topic of a crawl that has no
live worker (:mod:`crawler.frontier.crawllife`); without ``--yes`` it only lists them.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Awaitable, Callable
from dataclasses import asdict
from functools import partial
from typing import Any, ClassVar

import redis.asyncio as aioredis
from redis.exceptions import RedisError
from scrapy.commands import ScrapyCommand
from scrapy.exceptions import UsageError
from scrapy.settings import BaseSettings

from crawler import scrapy_commands
from crawler.config import readers as config
from crawler.config.keys import CrawlKeys
from crawler.connections import clients as connection
from crawler.connections.options import KafkaOptions, RedisOptions, connect_timeout
from crawler.connections.tasks import every
from crawler.dedup.backend import BloomConfig
from crawler.dedup.dupefilter import RedisBloom
from crawler.frontier import crawllife, crawlstate
from crawler.frontier.config import heartbeat_interval
from crawler.frontier.crawlstate import CrawlState, HeartbeatClock
from crawler.ledger import report as ledger_report
from crawler.ledger import sources as ledger_sources
from crawler.operations import clusterview, dashboard, finishedview, proxyview, trace
from crawler.operations.clusterview import RateTracker, Snapshot
from crawler.recovery import mirror as state_mirror

ACTIONS = ("status", "report", "trace", "pause", "resume", "stop", "dashboard", "purge")
CLEAR = "\033[H\033[2J"
DASHBOARD_PORT = 8765
HOSTS_BATCH = 1000  # fields of the proxy hosts hash per HSCAN


class Command(ScrapyCommand):
    requires_project = True
    requires_crawler_process = False
    default_settings: ClassVar[dict[str, Any]] = {"LOG_LEVEL": "WARNING"}

    def syntax(self) -> str:
        return ("status|report|pause|resume|stop|dashboard|purge [CRAWL_ID] [--json] [--watch] "
                "[--port P] [--yes] | trace CRAWL_ID URL [--json]")

    def short_desc(self) -> str:
        return scrapy_commands.CLUSTER

    def add_options(self, parser: argparse.ArgumentParser) -> None:
        super().add_options(parser)
        parser.add_argument("--json", dest="json", action="store_true",
                            help="print the status as JSON")
        parser.add_argument("--watch", dest="watch", action="store_true",
                            help="refresh every second until Ctrl-C")
        parser.add_argument("--port", dest="port", type=int, default=DASHBOARD_PORT,
                            help=f"dashboard: port on 127.0.0.1 (default {DASHBOARD_PORT}; "
                                 "0: a free port)")
        parser.add_argument("--yes", dest="yes", action="store_true",
                            help="purge: really remove the crawl's keys and topics")

    def run(self, args: list[str], opts: argparse.Namespace) -> None:
        if not args or args[0] not in ACTIONS:
            raise UsageError(f"name an action: {', '.join(ACTIONS)}")
        if args[0] == "trace":
            self.exitcode = self._trace(args[1:], opts)
            return
        if len(args) > 2:
            raise UsageError(f"{args[0]} takes at most one CRAWL_ID")
        if args[0] == "purge" and len(args) < 2:
            raise UsageError("purge needs the CRAWL_ID on the command line")
        settings = self.settings
        assert settings is not None
        crawl = _crawl_id(settings, args[1] if len(args) > 1 else "")
        url = config.get_str(settings, "REDIS_URL")
        if not url:
            _fail("REDIS_URL is not set (setting or environment): cannot read the crawl state")
            self.exitcode = 1
            return
        if args[0] == "dashboard" and not 0 <= opts.port <= 65535:
            raise UsageError(f"--port must be 0..65535, not {opts.port}")
        actions = {"status": _status, "dashboard": _dashboard, "purge": _purge,
                   "report": _report}
        action = actions.get(args[0], partial(_control, args[0]))
        try:
            self.exitcode = asyncio.run(_connected(action, settings, url, crawl, opts))
        except KeyboardInterrupt:
            self.exitcode = 0


    def _trace(self, args: list[str], opts: argparse.Namespace) -> int:
        if len(args) != 2:
            raise UsageError("trace needs the CRAWL_ID and the URL: scrapy cluster trace "
                             "CRAWL_ID URL [--json]")
        assert self.settings is not None
        crawl = _crawl_id(self.settings, args[0])
        try:
            found = asyncio.run(trace.lookup(self.settings, crawl, args[1]))
        except LookupError as exc:
            _fail(str(exc))
            return 1
        except Exception as exc:  # MongoDB unreachable, refused
            _fail(f"cannot read the status index of crawl {crawl}: {exc}")
            return 1
        print(trace.as_json(found) if opts.json else trace.as_text(found))
        return 0


def _fail(message: str) -> None:
    print(f"scrapy cluster: {message}", file=sys.stderr)


def _crawl_id(settings: BaseSettings, given: str) -> str:
    if given:
        settings.set("CRAWL_ID", given, "cmdline")
    if not config.get_str(settings, "CRAWL_ID"):
        raise UsageError("name the crawl: scrapy cluster status CRAWL_ID, or set CRAWL_ID")
    try:
        return config.crawl_id(settings, "")
    except config.SettingError as exc:
        raise UsageError(str(exc)) from None


class Reader:
    """Reads one crawl's state from Redis, without changing anything."""

    def __init__(self, client: aioredis.Redis, url: str, crawl: str, bloom: RedisBloom) -> None:
        self.client, self.url, self.crawl, self.bloom = client, url, crawl, bloom
        self.keys = CrawlKeys(crawl)
        self.clock = HeartbeatClock()

    async def read(self) -> Snapshot:
        """The state, with every heartbeat time and ``now`` on Redis's clock."""
        now, workers, unreadable = await crawlstate.read_workers(
            self.client, self.keys.workers, self.clock)
        info = await self.bloom.info()
        members = await self.client.scard(self.keys.proxies)
        health = await self.client.hgetall(self.keys.proxy_health)
        hosts = await self._proxy_hosts()
        finished = crawllife.parse_finished(await self.client.get(self.keys.finished))
        raw_alerts = await self.client.hgetall(self.keys.alerts)
        ledger = await ledger_sources.ledger_counters(self.client, self.crawl)
        return Snapshot(
            crawl_id=self.crawl, now=now, workers=workers, unreadable=unreadable,
            bloom=asdict(info) if info.slices else None,
            proxies=clusterview.proxy_counts(int(members), health),
            finished_at=finished.closed if finished is not None else None,
            alerts=clusterview.parse_alerts(raw_alerts, now),
            proxy_faults=proxyview.proxy_faults(health), host_faults=proxyview.host_faults(hosts),
            ledger=ledger)

    async def _proxy_hosts(self) -> dict[Any, Any]:
        """By HSCAN: a field per host and cause can make a hash too big for one HGETALL."""
        scan = self.client.hscan_iter(self.keys.proxy_hosts, count=HOSTS_BATCH)
        return {field: value async for field, value in scan}


def _bloom(client: aioredis.Redis, crawl: str, settings: BaseSettings) -> RedisBloom:
    """A handle on the crawl's filter, for :meth:`RedisBloom.info` only (never opened)."""
    return RedisBloom.for_crawl(client, crawl, BloomConfig.from_settings(settings))


stale_after = crawlstate.stale_after_setting  # the workers' one rule


Action = Callable[[aioredis.Redis, BaseSettings, str, str, argparse.Namespace], Awaitable[int]]


async def _connected(action: Action, settings: BaseSettings, url: str, crawl: str,
                     opts: argparse.Namespace) -> int:
    """``action(client, settings, url, crawl, opts)`` with a client of *url*, closed at the
    end; 1 if Redis cannot be reached."""
    client = await _connect(settings, url)
    if client is None:
        return 1
    try:
        return await action(client, settings, url, crawl, opts)
    finally:
        await client.aclose()


async def _connect(settings: BaseSettings, url: str) -> aioredis.Redis | None:
    try:
        options = RedisOptions.from_settings(settings)  # REDIS_URL and REDIS_PARAMS (TLS, ACL)
        client = connection.redis_from(options)
    except config.SettingError as exc:
        _fail(str(exc))
        return None
    timeout = options.connect_timeout
    try:
        await asyncio.wait_for(connection.check_redis(client, url), timeout + 1)
    except (connection.ServiceUnavailable, TimeoutError) as exc:
        _fail(str(exc) if isinstance(exc, connection.ServiceUnavailable) else
              f"Cannot reach the service of REDIS_URL at {config.mask_url(url)}: timed out")
        await client.aclose()
        return None
    return client


async def _report(client: aioredis.Redis, settings: BaseSettings, url: str, crawl: str,
                  opts: argparse.Namespace) -> int:
    """The crawl ledger and its reconciliation (:mod:`crawler.ledger.report`)."""
    try:
        report = await ledger_sources.read_report(client, settings, crawl)
    except (connection.ServiceUnavailable, config.SettingError) as exc:
        _fail(str(exc))
        return 1
    print(json.dumps(report, indent=2) if opts.json else "\n".join(ledger_report.lines(report)))
    return 0


async def _control(command: str, client: aioredis.Redis, settings: BaseSettings, url: str,
                   crawl: str, opts: argparse.Namespace) -> int:
    await CrawlState(client, crawl, stale_after=stale_after(settings)).set_control(command)
    print(f"crawl {crawl}: {command} sent; every worker applies it at its next heartbeat")
    return 0


async def _status(client: aioredis.Redis, settings: BaseSettings, url: str, crawl: str,
                  opts: argparse.Namespace) -> int:
    reader = Reader(client, url, crawl, _bloom(client, crawl, settings))
    stale = stale_after(settings)
    if opts.watch:
        return await _watch(reader, stale, as_json=opts.json)
    return await _once(reader, stale, settings, as_json=opts.json)


async def _once(reader: Reader, stale: float, settings: BaseSettings, *, as_json: bool) -> int:
    """Two reads some time apart (so the rate has two heartbeats), then one report."""
    rates = RateTracker()
    first = await reader.read()
    rates.update(first.workers)
    if first.workers:
        interval = heartbeat_interval(settings)
        await asyncio.sleep(max(1.0, 1.5 * interval))
        first = await reader.read()
    status = clusterview.build_status(first, rates.update(first.workers), stale)
    finished = None if first.workers else await _finished(reader, settings)
    if finished is not None:
        status["finished"] = finished
    text = clusterview.render_text(status)
    if finished is not None:
        text += "\n\n" + "\n".join(finishedview.lines(finished))
    print(clusterview.to_json(status) if as_json else text)
    if not first.workers and finished is None:
        _fail(f"no workers found for crawl {reader.crawl!r}: the hash "
              f"{reader.keys.workers} is empty; is the crawl running, is CRAWL_ID right?")
        return 1
    return 0


def _summaries(reader: Reader, settings: BaseSettings) -> dashboard.Summary:
    """The finished crawl's summary for the dashboard, its ledger read once per finish."""
    known: dict[float, dict[str, Any]] = {}

    async def summary(finished_at: float) -> dict[str, Any] | None:
        if finished_at not in known and (view := await _finished(reader, settings, quiet=True)):
            known.clear()
            known[finished_at] = view
        return known.get(finished_at)
    return summary


async def _finished(reader: Reader, settings: BaseSettings, *,
                    quiet: bool = False) -> dict[str, Any] | None:
    """The summary of a crawl marked finished (its ledger read once), or None (*quiet*: say
    nothing when its ledger cannot be read)."""
    record = await crawllife.read_finished(reader.client, reader.crawl)
    if record is None:
        return None
    try:
        report = await ledger_sources.read_report(reader.client, settings, reader.crawl)
    except (connection.ServiceUnavailable, config.SettingError) as exc:
        if not quiet:
            _fail(f"crawl {reader.crawl!r} is marked finished; its ledger cannot be read: "
                  f"{exc}")
        return None
    return finishedview.summary(record, report)


async def _watch(reader: Reader, stale: float, *, as_json: bool) -> int:
    """Refresh every second until Ctrl-C; JSON mode prints one line per refresh."""
    rates = RateTracker()

    async def show() -> None:
        try:
            snapshot = await reader.read()
            status = clusterview.build_status(snapshot, rates.update(snapshot.workers), stale)
            text = clusterview.render_text(status)
            line = json.dumps(status, sort_keys=True)
        except (RedisError, OSError) as exc:
            text = line = f"Redis unreachable at {config.mask_url(reader.url)}: {exc}"
        if as_json:
            print(line, flush=True)
        else:
            sys.stdout.write(f"{CLEAR}{text}\n\n(refreshing every second; Ctrl-C to quit)\n")
            sys.stdout.flush()

    await every(1.0, show, wait_first=False)  # until Ctrl-C
    return 0


async def _dashboard(client: aioredis.Redis, settings: BaseSettings, url: str, crawl: str,
                     opts: argparse.Namespace) -> int:
    """Serve the live page until Ctrl-C (or SIGTERM); 1 if the port is unusable."""
    reader = Reader(client, url, crawl, _bloom(client, crawl, settings))
    try:
        await dashboard.serve(reader.read, stale_after(settings), opts.port,
                              config.mask_url(url), summary=_summaries(reader, settings))
    except OSError as exc:  # binding the port
        _fail(f"cannot serve the dashboard on {dashboard.HOST}:{opts.port}: {exc}")
        return 1
    return 0


async def _purge(client: aioredis.Redis, settings: BaseSettings, url: str, crawl: str,
                 opts: argparse.Namespace) -> int:
    """Remove the crawl's Redis keys and Kafka topics (``--yes``), or list them."""
    reader = Reader(client, url, crawl, _bloom(client, crawl, settings))
    snapshot = await reader.read()
    if snapshot.workers:  # read again a few heartbeats later: a live worker has beaten
        await asyncio.sleep(1.5 * heartbeat_interval(settings) + 0.5)
        snapshot = await reader.read()
    stale = stale_after(settings)
    live = [w for w, d in snapshot.workers.items()
            if not crawlstate.is_lost(snapshot.now, d["ts"], stale)]
    if live:
        _fail(f"crawl {crawl} has {len(live)} live worker(s) ({', '.join(sorted(live))}); "
              f"stop it first: scrapy cluster stop {crawl}")
        return 1
    return await _purge_idle(settings, client, crawl, yes=opts.yes)


async def _purge_state_copy(settings: BaseSettings, crawl: str) -> None:
    """The MongoDB copy of the crawl's seed key and finished record (its items stay)."""
    try:
        await state_mirror.purge(settings, crawl)
    except Exception as exc:  # MongoDB down: said, the rest is purged all the same
        _fail(f"the MongoDB copy of the crawl's state ({crawl}.state) was not dropped: {exc}")


async def _purge_idle(settings: BaseSettings, client: aioredis.Redis, crawl: str, *,
                      yes: bool) -> int:
    kafka = KafkaOptions.from_settings(settings)
    timeout = connect_timeout(settings)
    if yes:
        keys = await crawllife.purge_keys(client, crawl)
        await _purge_state_copy(settings, crawl)
    else:
        keys = {}
        async for batch in crawllife.crawl_keys(client, crawl):
            for key in batch:
                keys[crawllife.family(crawl, key)] = keys.get(crawllife.family(crawl, key), 0) + 1
    topics: list[str] = []
    group = "no KAFKA_BOOTSTRAP_SERVERS: topics not looked at"
    if kafka.bootstrap:
        try:
            topics, group = await asyncio.to_thread(
                crawllife.purge_topics, kafka, crawl, connect_timeout=timeout, dry_run=not yes)
        except connection.ServiceUnavailable as exc:
            _fail(f"{exc}; the Redis keys {'were' if yes else 'would be'} removed all the same")
            group = "broker unreachable: topics not looked at"
    verb = "removed" if yes else "would remove"
    families = ", ".join(f"{n} {f}" for f, n in sorted(keys.items())) or "none"
    print(f"crawl {crawl}: {verb} {sum(keys.values())} Redis keys ({families}); "
          f"{len(topics)} Kafka topics ({', '.join(topics) or 'none'}); {group}")
    if not yes:
        print(f"nothing removed: run scrapy cluster purge {crawl} --yes to remove them")
        return 1
    return 0
