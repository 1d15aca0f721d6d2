"""Import a stopped scrapy-redis crawl's seen set into this crawl's Bloom filter.

    python -m crawler.migrate.scrapy_redis SPIDER --pending pending.jsonl [--key KEY]
        [--from REDIS_URL] [--no-check] [--crawl-id ID] [-s NAME=VALUE ...]

Run it in the project, as ``scrapy seed``: it reads the project's settings (``scrapy.cfg``
or ``SCRAPY_SETTINGS_MODULE``, then ``-s``). It reads scrapy-redis's dupefilter SET (``KEY``,
default ``SPIDER:dupefilter``, on ``--from``, default the crawl's own ``REDIS_URL``) with
``SSCAN`` and adds its fingerprints to the crawl's filter, ``{<CRAWL_ID>}:bloom``: the SET
holds hex SHA1s, nothing pickled. The fingerprints of the seeds in ``--pending`` (the files
given to ``scrapy seed``) are left out, so that those seeds are not filtered as duplicates.

It refuses, with one line and before any change, unless the workers compute scrapy-redis's
fingerprints (``REQUEST_FINGERPRINTER_CLASS = "crawler.migrate.ScrapyRedisFingerprinter"``),
and if the SET holds none of the pending seeds' fingerprints (``--no-check``: import all the
same, for a queue of start URLs only, which scrapy-redis never marks seen). See
``docs/tutorials/from-scrapy-redis.md``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Iterator, Sequence
from typing import Any

from redis.exceptions import RedisError
from scrapy import Request
from scrapy.settings import Settings
from scrapy.utils.misc import load_object
from scrapy.utils.project import get_project_settings

from crawler.config import readers as config
from crawler.config.keys import CrawlKeys
from crawler.config.readers import SettingError
from crawler.connections import clients as connection
from crawler.connections.options import RedisOptions
from crawler.dedup.backend import BloomConfig, load_backend
from crawler.dedup.dupefilter import BloomMissing, RedisBloom
from crawler.dedup.generations import RecrawlConfig
from crawler.frontier import codec, seedfiles
from crawler.frontier.seedfiles import Bad
from crawler.frontier.seedrule import TRUSTED
from crawler.migrate import seen
from crawler.migrate.fingerprint import ScrapyRedisFingerprinter, scrapy_redis_fingerprint

PROG = "python -m crawler.migrate.scrapy_redis"
FINGERPRINTER = "crawler.migrate.ScrapyRedisFingerprinter"
PROGRESS_EVERY = 1_000_000  # fingerprints between two progress lines on stderr


def parser() -> argparse.ArgumentParser:
    parse = argparse.ArgumentParser(prog=PROG, description=__doc__,
                                    formatter_class=argparse.RawDescriptionHelpFormatter)
    parse.add_argument("spider", help="the spider's name: the SET's default key and CRAWL_ID")
    parse.add_argument("--pending", action="append", required=True, metavar="FILE",
                       help="seeds given to scrapy seed (lines, JSON lines, CSV; gzip; - for "
                            "stdin): their fingerprints are left out; repeatable")
    parse.add_argument("--key", help="the dupefilter SET (default: SPIDER:dupefilter)")
    parse.add_argument("--from", dest="source", metavar="REDIS_URL",
                       help="the Redis of the SET (default: the crawl's REDIS_URL)")
    parse.add_argument("--no-check", dest="verify", action="store_false",
                       help="import even if the SET holds none of the pending seeds")
    parse.add_argument("--crawl-id", help="CRAWL_ID (default: the setting, else SPIDER)")
    parse.add_argument("-s", "--set", action="append", default=[], metavar="NAME=VALUE",
                       help="a setting, as scrapy's -s")
    return parse


def project_settings(pairs: Sequence[str], crawl_id: str | None = None) -> Settings:
    """The project's settings, with ``-s NAME=VALUE`` and ``--crawl-id`` over them."""
    settings = get_project_settings()
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            raise SettingError(name or pair, f"-s takes NAME=VALUE, got {pair!r}")
        settings.set(name, value, priority="cmdline")
    if crawl_id:
        settings.set("CRAWL_ID", crawl_id, priority="cmdline")
    return settings


def check_settings(settings: Settings) -> None:
    """:class:`SettingError` unless the crawl's workers would read what is imported."""
    given = settings.get("REQUEST_FINGERPRINTER_CLASS")
    fingerprinter = load_object(given) if isinstance(given, str) else given
    if not (isinstance(fingerprinter, type)
            and issubclass(fingerprinter, ScrapyRedisFingerprinter)):
        raise SettingError("REQUEST_FINGERPRINTER_CLASS", (
            f"is {given!r}: the workers would not compute scrapy-redis's fingerprints, so "
            f"its seen set would filter nothing; set it to {FINGERPRINTER!r} for this crawl"))
    if RecrawlConfig.from_settings(settings).enabled:
        raise SettingError("RECRAWL_AFTER", "must be 0: the seen set goes into the crawl's "
                                            "one filter, not into recrawl generations")
    backend = load_backend(settings)
    if not (isinstance(backend, type) and issubclass(backend, RedisBloom)):
        raise SettingError("FRONTIER_DEDUP_CLASS", f"{backend!r} is not crawler.dedup."
                                                   f"RedisBloom: the import writes that filter")
    if not config.get_str(settings, "REDIS_URL"):
        raise SettingError("REDIS_URL", "required: the crawl's Bloom filter lives there")


def pending_fingerprints(paths: Sequence[str]) -> set[bytes]:
    """The fingerprints the workers will compute for the seeds of *paths* (the formats of
    ``scrapy seed``), as :class:`ScrapyRedisFingerprinter` computes them."""
    found: set[bytes] = set()
    for path in paths:
        for entry in _entries(path):
            if isinstance(entry, Bad):  # scrapy seed skips it too
                print(f"{entry.where}: skipped: {entry.reason}", file=sys.stderr)
            else:
                found.add(scrapy_redis_fingerprint(entry))
    return found


def _entries(path: str) -> Iterator[Request | Bad]:
    source = "stdin" if path == "-" else path
    with seedfiles.open_text(path) as handle:
        if seedfiles.format_of(path) == "csv":
            for entry in seedfiles.read(handle, source, "csv", TRUSTED):
                yield entry if isinstance(entry, Bad) else seed_request(entry.value)
            return
        for number, line in enumerate(handle, 1):
            text = line.strip()
            if text and not text.startswith("#"):
                try:
                    yield seed_request(text.encode())
                except (codec.CodecError, ValueError) as exc:
                    yield Bad(f"{source}:{number}", str(exc))


def seed_request(value: bytes) -> Request:
    """The request a worker builds from seed record *value*, but for its callbacks (they
    are no part of a fingerprint, and naming them needs the spider)."""
    if value.lstrip().startswith(b"{"):
        data = json.loads(value)
        if isinstance(data, dict):
            data.pop("callback", None)
            data.pop("errback", None)
        value = json.dumps(data).encode()
    return codec.decode_seed(value, rule=TRUSTED)


async def run(settings: Settings, crawl: str, key: str, source_url: str | None,
              pending: set[bytes], *, verify: bool = True) -> seen.Imported:
    """Check the SET, then import it into the crawl's filter (created if it is new)."""
    options = RedisOptions.from_settings(settings)
    client = connection.redis_from(options)
    source = client if not source_url else connection.redis_client(
        source_url, connect_timeout=options.connect_timeout)
    try:
        await _reach(client, "REDIS_URL", options.url)
        if source is not client:
            await _reach(source, "--from", source_url or "")
        result = await seen.check(source, key, pending, verify=verify)
        cfg = BloomConfig.from_settings(settings)
        bloom = RedisBloom(client, CrawlKeys(crawl).bloom, capacity=cfg.capacity,
                           error_rate=cfg.error_rate, growth=cfg.growth, on_missing="raise")
        await bloom.open()
        return await seen.import_set(source, key, bloom, pending, result, _progress)
    finally:
        if source is not client:
            await source.aclose()
        await client.aclose()


async def _reach(client: Any, setting: str, url: str) -> None:
    try:
        await client.ping()
    except RedisError as exc:
        raise connection.ServiceUnavailable(setting, url, exc) from None


def _progress(result: seen.Imported) -> None:
    done = result.added + result.present
    if done % PROGRESS_EVERY < seen.BATCH:
        print(f"{done:,} of {result.members:,} fingerprints imported", file=sys.stderr)


def summary(result: seen.Imported, key: str, crawl: str) -> str:
    line = (f"{key}: {result.added + result.present:,} fingerprints imported into "
            f"{CrawlKeys(crawl).bloom} ({result.added:,} new to it, {result.present:,} there "
            f"already); {result.pending_found:,} of the {result.pending:,} pending seeds' "
            f"fingerprints were in the SET and left out")
    if result.invalid:
        line += f"; {result.invalid:,} members that are no fingerprint skipped"
    return line


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        settings = project_settings(args.set, args.crawl_id)
        check_settings(settings)
        crawl = config.crawl_id(settings, args.spider)
        key = args.key or f"{args.spider}:dupefilter"
        pending = pending_fingerprints(args.pending)
        result = asyncio.run(run(settings, crawl, key, args.source, pending,
                                 verify=args.verify))
    except (SettingError, seen.Refused, connection.ServiceUnavailable, RedisError,
            BloomMissing, OSError) as exc:  # BloomMissing: the filter deleted meanwhile
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 1
    print(summary(result, key, crawl))
    return 0


if __name__ == "__main__":
    sys.exit(main())
