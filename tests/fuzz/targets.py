"""Every reader of data that comes from Kafka, Redis or a seed file, as a fuzz target.

A target takes bytes and may raise only what its callers catch: a frontier or seed record
that does not decode raises :class:`~crawler.frontier.codec.CodecError` (the frontier
dead-letters it with that reason); a Redis record that does not parse is skipped, counted
as unreadable or started afresh. Anything else escaping a target is a crash: the fuzzers
(``tests/unit/test_fuzz_decoders.py`` and ``atheris_decoders.py``, docs/fuzzing.md) fail.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from dataclasses import dataclass

from crawler.frontier import codec, crawllife, crawlstate, seedfiles
from crawler.ledger.sources import parse_counters
from crawler.operations import clusterview, proxyview
from crawler.politeness.proxystore import _health

#: what the callers of Health.from_json catch (proxystore, proxyview, clusterview)
HEALTH_ERRORS = (ValueError, KeyError, TypeError)


@dataclass(frozen=True)
class Target:
    name: str
    run: Callable[[bytes], object]
    allowed: tuple[type[BaseException], ...] = ()


def _text(data: bytes) -> str:
    return data.decode("utf-8", "replace")


def _seed_file(data: bytes) -> object:
    for fmt in ("lines", "csv"):
        list(seedfiles.read(io.StringIO(_text(data)), "fuzz", fmt))
    return None


def _typed_value(data: bytes) -> object:
    """*data* as the value of a meta key in a version 2 record: the tagged values' decoder
    (crawler.frontier.metatypes) gets the bytes a mutation made, past the record's checks."""
    return codec.decode_request(b'{"v":2,"url":"http://a.test/","tags":[],"meta":{"x":'
                                + data + b'},"cb_kwargs":{"y":' + data + b"}}")


def _health_record(data: bytes) -> object:
    proxyview.proxy_faults({b"p": data})
    clusterview.proxy_counts(1, {b"p": data})
    return _health(_text(data))


TARGETS = (
    Target("request record", lambda d: codec.decode_request(d), (codec.CodecError,)),
    Target("typed meta value", _typed_value, (codec.CodecError,)),
    Target("seed record", lambda d: codec.decode_seed(d), (codec.CodecError,)),
    Target("seed line", lambda d: seedfiles.seed_of(_text(d).strip()), (codec.CodecError,)),
    Target("seed file", _seed_file),
    Target("heartbeat", lambda d: crawlstate.parse_heartbeats({b"w": d, "x": d})),
    Target("finished record", lambda d: crawllife.parse_finished(d)),
    Target("alerts", lambda d: clusterview.parse_alerts({b"a": d}, 1e9)),
    Target("proxy health", _health_record),
    Target("ledger counters", lambda d: parse_counters({b"fetched/2xx": d, d: b"1"})),
)


def check(target: Target, data: bytes) -> None:
    """Run *target* on *data*; an exception it may not raise propagates."""
    try:
        target.run(data)
    except target.allowed:
        pass
