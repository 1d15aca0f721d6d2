"""Property-based fuzzing of every decoder of data from Kafka, Redis and seed files
(tests/fuzz/targets.py): no input makes one raise what its callers do not catch.

Inputs are raw bytes and, to get past ``json.loads``, JSON documents built from the fields
each reader looks for with values of every JSON type. Then atheris mutates valid records
of every kind, guided by coverage of ``crawler`` (tests/fuzz/atheris_decoders.py). In CI:
500 byte strings and 133 JSON documents per target (5,697) and 100,000 atheris inputs;
``FUZZ_EXAMPLES`` and ``FUZZ_RUNS`` make it longer (docs/fuzzing.md).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from fuzz.targets import TARGETS, Target, check
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "500"))  # byte strings; JSON: a quarter+
RUNS = int(os.environ.get("FUZZ_RUNS", "100000"))
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
                suppress_health_check=list(HealthCheck))
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


def test_the_coverage_guided_fuzzer_finds_no_crash(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, str(HARNESS), str(tmp_path / "corpus"),
                           f"-atheris_runs={RUNS}", "-max_len=4096", "-rss_limit_mb=2048"],
                          capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert f"Done {RUNS} in" in proc.stderr, proc.stderr[-2000:]
