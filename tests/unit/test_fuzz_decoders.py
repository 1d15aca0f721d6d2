"""Property-based fuzzing of every decoder of data from Kafka, Redis and seed files
(tests/fuzz/targets.py): no input makes one raise what its callers do not catch.

Inputs are raw bytes and, to get past ``json.loads``, JSON documents built from the fields
each reader looks for with values of every JSON type; version 2 request records with tagged
values, well-formed or not; and values of every supported meta type, which must come back as
themselves through the codec. Then atheris mutates valid records of every kind, guided by
coverage of ``crawler`` (tests/fuzz/atheris_decoders.py). In CI: 500 byte strings and 133
JSON documents per target (6,330), 399 typed records and values, and 100,000 atheris inputs;
``FUZZ_EXAMPLES`` and ``FUZZ_RUNS`` make it longer (docs/fuzzing.md)."""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from fuzz.targets import TARGETS, Target, check
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scrapy import Request

from crawler.frontier import codec, metatypes

EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "500"))  # byte strings; JSON: a quarter+
RUNS = int(os.environ.get("FUZZ_RUNS", "100000"))
# Seeded, so that a failure in CI is the same failure on a laptop: hypothesis derandomized (its
# seed comes from each test's code), atheris's libFuzzer given FUZZ_SEED. FUZZ_SEED=random
# draws fresh inputs (hypothesis at random, libFuzzer from the clock): a longer hunt.
SEED = os.environ.get("FUZZ_SEED", "1")
HARNESS = Path(__file__).resolve().parents[1] / "fuzz" / "atheris_decoders.py"
FIELDS = ("url", "v", "priority", "meta", "callback", "errback", "method", "headers", "body",
          "cookies", "cb_kwargs", "dont_filter", "flags", "encoding", "_class", "ts", "info",
          "at", "closed", "reason", "ttl", "worker", "success", "latency", "state", "until",
          "deaths", "streak", "samples", "probes", "depth_limit", "recrawl_after")
SCALARS = (st.none() | st.booleans() | st.integers() | st.floats()
           | st.sampled_from([10**400, -(10**30), 1e308, "http://a.test/", "https://[::1]/x",
                              "alive", "dead", "probation", "parse", "POST", "2", "", "\x00"])
           | st.text(max_size=20))
VALUES = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=4)
                      | st.dictionaries(st.sampled_from(FIELDS) | st.text(max_size=5), inner,
                                        max_size=4), max_leaves=12)
DOCUMENTS = st.dictionaries(st.sampled_from(FIELDS), VALUES, max_size=8)
FUZZ = settings(max_examples=EXAMPLES, deadline=None, database=None,
                suppress_health_check=list(HealthCheck), derandomize=SEED != "random")
FUZZ_JSON = settings(FUZZ, max_examples=max(EXAMPLES * 4 // 15, 1))  # slower to build


def _dump(value: Any) -> bytes:
    return json.dumps(value, allow_nan=True).encode()


@pytest.mark.parametrize("target", TARGETS, ids=lambda t: t.name)
def test_no_bytes_crash_a_decoder(target: Target) -> None:
    @FUZZ
    @given(st.binary(max_size=300) | st.sampled_from([b"[" * 100_000, b'{"a":' * 50_000]))
    def run(data: bytes) -> None:
        check(target, data)

    run()


@pytest.mark.parametrize("target", TARGETS, ids=lambda t: t.name)
def test_no_json_document_crashes_a_decoder(target: Target) -> None:
    @FUZZ_JSON
    @given(DOCUMENTS | VALUES)
    def run(document: Any) -> None:
        check(target, _dump(document))

    run()


TAG_NAMES = sorted(metatypes.TAGS)
#: tagged objects, well-formed or not: a known or unknown name, any payload, extra keys
TAGGED = st.recursive(
    SCALARS, lambda inner: st.lists(inner, max_size=3)
    | st.fixed_dictionaries({"$t": st.sampled_from([*TAG_NAMES, "nope"]) | SCALARS,
                             "v": inner}, optional={"x": inner})
    | st.dictionaries(st.sampled_from(["$t", "v"]) | st.text(max_size=3), inner, max_size=3),
    max_leaves=10)
KNOWN_TAGS = st.lists(st.sampled_from(TAG_NAMES), max_size=3)
TYPED_DOCUMENTS = st.fixed_dictionaries(
    {"v": st.just(2), "url": st.just("http://a.test/"),
     "tags": st.one_of(KNOWN_TAGS, KNOWN_TAGS, st.lists(st.sampled_from([*TAG_NAMES, "uuid"]),
                                                        max_size=2), VALUES),
     "meta": st.dictionaries(st.sampled_from(FIELDS) | st.text(max_size=5), TAGGED,
                             max_size=4)},
    optional={"cb_kwargs": st.dictionaries(st.text(max_size=5), TAGGED, max_size=3) | TAGGED})


@pytest.mark.parametrize("target", [t for t in TARGETS if t.name in (
    "request record", "seed record")], ids=lambda t: t.name)
def test_no_typed_record_crashes_a_decoder(target: Target) -> None:
    @FUZZ_JSON
    @given(TYPED_DOCUMENTS)
    def run(document: Any) -> None:
        check(target, _dump(document))

    run()


HASHABLE = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=6) | st.binary(max_size=6)
    | st.floats(allow_nan=False, allow_infinity=False) | st.decimals(allow_nan=False) | st.dates()
    | st.timedeltas() | st.datetimes(timezones=st.none() | st.builds(timezone, st.timedeltas(
        min_value=timedelta(hours=-23, minutes=-59), max_value=timedelta(hours=23, minutes=59)))),
    lambda inner: st.lists(inner, max_size=3).map(tuple) | st.frozensets(inner, max_size=3),
    max_leaves=6)
TYPED_VALUES = st.recursive(
    HASHABLE, lambda inner: st.lists(inner, max_size=3) | st.lists(inner, max_size=3).map(tuple)
    | st.sets(HASHABLE, max_size=3)
    | st.dictionaries(HASHABLE | st.sampled_from(["$t", "v"]), inner, max_size=3),
    max_leaves=12)


@FUZZ_JSON
@given(st.dictionaries(st.text(max_size=5), TYPED_VALUES, max_size=4),
       st.dictionaries(st.sampled_from(["a", "b", "$t"]), TYPED_VALUES, max_size=2))
def test_every_supported_value_comes_back_as_itself(meta: dict[str, Any],
                                                    cb_kwargs: dict[str, Any]) -> None:
    request = Request("http://a.test/", meta=meta, cb_kwargs=cb_kwargs)
    decoded = codec.decode_request(codec.encode_request(request))
    assert same(decoded.meta, meta), (decoded.meta, meta)
    assert same(decoded.cb_kwargs, cb_kwargs), (decoded.cb_kwargs, cb_kwargs)


def same(a: Any, b: Any) -> bool:
    """Equal and of the same types all the way down (set elements matched pairwise)."""
    if type(a) is not type(b):
        return False
    if type(a) in (list, tuple):
        return len(a) == len(b) and all(map(same, a, b))
    if type(a) is dict:
        return len(a) == len(b) and all(
            same(ka, kb) and same(va, vb)
            for (ka, va), (kb, vb) in zip(a.items(), b.items(), strict=True))
    if type(a) in (set, frozenset):
        return len(a) == len(b) and all(any(same(x, y) for y in b) for x in a)
    if type(a) is datetime:
        return a == b and a.utcoffset() == b.utcoffset()
    if type(a) is float:
        return a == b and math.copysign(1, a) == math.copysign(1, b)
    if type(a) is Decimal:
        return str(a) == str(b)
    return bool(a == b)


def test_the_coverage_guided_fuzzer_finds_no_crash(tmp_path: Path) -> None:
    seeded = [] if SEED == "random" else [f"-seed={int(SEED)}"]
    # libFuzzer's seed alone does not fix the inputs: coverage follows the order of sets,
    # which Python's hash seed picks at random in each process (hash seeds 0-3, the same
    # -seed=1: four different corpora). CI failed this test on 2026-12-07 where eight runs
    # here passed; a seeded run now fixes both seeds
    env = {**os.environ, **({} if SEED == "random" else {"PYTHONHASHSEED": SEED})}
    proc = subprocess.run([sys.executable, str(HARNESS), str(tmp_path / "corpus"),
                           f"-atheris_runs={RUNS}", "-max_len=4096", "-rss_limit_mb=2048",
                           *seeded],
                          capture_output=True, text=True, timeout=1800, env=env)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert f"Done {RUNS} in" in proc.stderr, proc.stderr[-2000:]
    if seeded:
        # the whole line: "Seed: 1" is also the start of a random seed such as 1402883615
        line = re.search(r"^INFO: Seed: \d+$", proc.stderr, re.M)
        seen = line.group() if line else proc.stderr[:2000]
        assert seen == f"INFO: Seed: {int(SEED)}", seen
