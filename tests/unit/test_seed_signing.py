"""The seed records a worker publishes are signed, and only those are taken in full: on the
in-memory transport, a start request with a callback and any meta goes through, while the
same JSON from another client (unsigned, or signed with another key) is held to the seed
rule and dead-lettered with its reason."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from conftest import DEAD, REQUESTS, SEED_KEY, SEEDS, MakeWorker, Worker, settle
from scrapy import Request

from crawler.frontier import codec
from crawler.frontier.seedtrust import SIGNATURE_HEADER, SeedSigner, Verdict


def run(scenario: Callable[[], Awaitable[Any]]) -> Any:
    return asyncio.run(scenario())  # type: ignore[arg-type]


def test_a_signature_verifies_only_the_value_it_signed_with_the_key_it_used() -> None:
    signer = SeedSigner(b"k" * 32)
    headers = signer.headers(b"value")
    assert [name for name, _ in headers] == [SIGNATURE_HEADER]
    assert signer.verdict(b"value", headers) is Verdict.SIGNED
    assert signer.verdict(b"value", [("other", b"x"), *headers]) is Verdict.SIGNED
    assert signer.verdict(b"value!", headers) is Verdict.BAD
    assert SeedSigner(b"j" * 32).verdict(b"value", headers) is Verdict.BAD
    assert signer.verdict(b"value", [(SIGNATURE_HEADER, b"")]) is Verdict.BAD
    assert signer.verdict(b"value", []) is Verdict.UNSIGNED
    assert "k" * 16 not in repr(signer)
    with pytest.raises(ValueError):
        SeedSigner(b"short")


def _start_request(w: Worker) -> Request:
    return Request("https://a.test/start", callback=w.spider.parse, cb_kwargs={"page": 1},
                   meta={"is_start_request": True, "tag": {"source": ["x", 1]}})


def _seed_records(w: Worker) -> list[tuple[bytes, list[tuple[str, bytes]]]]:
    return [(value, w.log.headers.get((t, p, offset), []))
            for (t, p), values in sorted(w.log.records.items()) if t == SEEDS
            for offset, value in enumerate(values)]


def _dead_reasons(w: Worker) -> list[str]:
    w.producer.acknowledge()
    return [json.loads(v)["reason"] for v in w.records(DEAD)]


def test_a_start_request_published_by_one_worker_is_taken_whole_by_another(
        make_worker: MakeWorker) -> None:
    async def scenario() -> None:
        a = make_worker()
        b = make_worker(log=a.log)
        a.consumer.assign([])
        a.scheduler.enqueue_request(_start_request(a))
        assert a.producer.acknowledge() == 1
        [(value, headers)] = _seed_records(a)
        assert headers == a.scheduler.signer.headers(value)
        b.consumer.poll()
        await settle()
        assert b.stats.get_value("frontier/seeds_taken") == 1
        b.producer.acknowledge()
        [record] = b.records(REQUESTS)
        request = codec.decode_request(record, b.spider)
        assert request.callback == b.spider.parse and request.cb_kwargs == {"page": 1}
        assert request.meta["tag"] == {"source": ["x", 1]}
        assert not b.records(DEAD)

    run(scenario)


def test_the_same_record_from_another_client_is_dead_lettered_with_its_reason(
        make_worker: MakeWorker) -> None:
    async def scenario() -> None:
        w = make_worker()
        forged = codec.encode_request(_start_request(w), w.spider)  # "v": 1 and all
        w.log.append(SEEDS, b"a.test", forged)  # no signature
        w.log.append(SEEDS, b"a.test", json.dumps(
            {"url": "https://a.test/h", "headers": {"X-Admin": ["1"]}}).encode())
        w.log.append(SEEDS, b"a.test", json.dumps(
            {"url": "https://a.test/b", "method": "POST", "body": "a=1"}).encode())
        w.log.append(SEEDS, b"a.test", json.dumps(
            {"url": "https://a.test/m", "meta": {"proxy": "http://evil.test:3128"}}).encode())
        w.log.append(SEEDS, b"a.test", b'{"url": "https://a.test/ok", "meta": {"depth_limit": 1}}')
        w.consumer.poll()
        await settle()
        reasons = _dead_reasons(w)
        assert reasons == [
            "seed fields 'callback', 'cb_kwargs' not allowed from outside the crawl "
            "(SEED_REQUEST_FIELDS lists none)",
            "seed field 'headers' not allowed from outside the crawl "
            "(SEED_REQUEST_FIELDS lists none)",
            "seed fields 'method', 'body' not allowed from outside the crawl "
            "(SEED_REQUEST_FIELDS lists none)",
            "seed meta key 'proxy' not allowed from outside the crawl "
            "(SEED_META_KEYS lists depth_limit, recrawl_after)",
        ]
        assert w.stats.get_value("frontier/seeds_restricted") == 4
        assert w.stats.get_value("frontier/seeds_taken") == 1  # /ok
        w.producer.acknowledge()
        partition = next(p for (t, p), v in w.log.records.items() if t == SEEDS and v)
        assert w.committed(SEEDS, partition) == 5  # every lease ended: dead or taken

    run(scenario)


def test_a_record_signed_with_another_key_is_an_external_seed(
        make_worker: MakeWorker, caplog: pytest.LogCaptureFixture) -> None:
    async def scenario() -> None:
        w = make_worker()
        value = codec.encode_request(_start_request(w), w.spider)
        w.log.append(SEEDS, b"a.test", value, SeedSigner(b"another crawl's key").headers(value))
        w.log.append(SEEDS, b"a.test", value, [(SIGNATURE_HEADER, b"0" * 64)])
        w.consumer.poll()
        await settle()
        assert len(_dead_reasons(w)) == 2
        assert w.stats.get_value("frontier/seeds_bad_signature") == 2

    with caplog.at_level(logging.WARNING):
        run(scenario)
    said = [r.getMessage() for r in caplog.records if "cannot verify" in r.getMessage()]
    assert len(said) == 1, said  # the first one only


def test_the_allowing_setting_takes_a_seed_with_headers_and_a_body(
        make_worker: MakeWorker) -> None:
    async def scenario() -> None:
        w = make_worker(SEED_REQUEST_FIELDS=["method", "headers", "body"])
        w.log.append(SEEDS, b"a.test", json.dumps(
            {"url": "https://a.test/form", "method": "POST", "body": "a=1",
             "headers": {"Content-Type": "application/x-www-form-urlencoded"}}).encode())
        w.consumer.poll()
        await settle()
        assert w.stats.get_value("frontier/seeds_taken") == 1
        w.producer.acknowledge()
        [record] = w.records(REQUESTS)
        request = codec.decode_request(record, w.spider)
        assert (request.method, request.body) == ("POST", b"a=1")
        assert not w.records(DEAD)

    run(scenario)


def test_the_seed_key_is_in_no_log_line_nor_stat(
        make_worker: MakeWorker, caplog: pytest.LogCaptureFixture) -> None:
    async def scenario() -> Worker:
        w = make_worker()
        w.scheduler.enqueue_request(_start_request(w))
        w.producer.acknowledge()
        w.consumer.poll()
        await settle()
        return w

    with caplog.at_level(logging.DEBUG):
        w = run(scenario)
    assert SEED_KEY.decode() not in caplog.text
    assert SEED_KEY.decode() not in repr(w.stats.get_stats())
    assert SEED_KEY.decode() not in repr(w.scheduler.signer)
