"""The status index on a real MongoDB: events written out of order leave the right state, a
URL's events stay bounded, the TTL index exists, and a lease that ended while a batch was
open is released only once that batch is written."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from pymongo import AsyncMongoClient

from crawler.frontier.leases import AckBarrier
from crawler.statusindex import events as ev
from crawler.statusindex.writer import StatusIndex

URL = "http://a.test/page"


def _index(mongo_uri: str, crawl_id: str, barrier: AckBarrier) -> tuple[Any, StatusIndex]:
    client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(mongo_uri)
    collection = client["crawler"][f"{crawl_id}.urls"]
    return client, StatusIndex(collection, barrier, ttl=3600, interval=0.05)


def test_events_out_of_order_leave_the_strongest_state(mongo_uri: str, crawl_id: str) -> None:
    async def scenario() -> tuple[dict[str, Any], dict[str, Any]]:
        client, index = _index(mongo_uri, crawl_id, AckBarrier(lambda _item: None))
        await index.open()
        stored = ev.event(ev.STORED, "w1", collection="crawler.c", id="k")
        index.add(URL, stored)
        await index.flush()
        index.add(URL, ev.event(ev.DISCOVERED, "w2", **{"from": "http://a.test/"}))
        index.add(URL, ev.event(ev.QUEUED, "w2", topic="t", partition=1, offset=7))
        await index.flush()  # the link's events, written after the store: state kept
        for n in range(ev.MAX_EVENTS + 5):
            index.add(URL, ev.event(ev.REQUEUED, "w3", offset=n))
        await index.close(5)
        doc = await index.collection.find_one({"_id": URL})
        ttl = await index.collection.index_information()
        await client.close()
        return doc, ttl

    doc, indexes = asyncio.run(scenario())
    assert doc["state"] == ev.STORED
    assert len(doc["events"]) == ev.MAX_EVENTS  # the oldest went...
    assert doc["first"]["from"] == "http://a.test/"  # ...the first link stays
    found = ev.trace(URL, doc)
    assert found["linked_from"] == "http://a.test/" and found["events"][0]["event"] == "discovered"
    assert [i.get("expireAfterSeconds") for i in indexes.values()
            if i["key"] == [("at", 1)]] == [3600]


def test_a_lease_waits_for_the_batch_its_events_are_in(mongo_uri: str, crawl_id: str) -> None:
    released: list[str] = []

    async def scenario() -> tuple[list[str], list[str], float]:
        barrier = AckBarrier(released.append)
        client, index = _index(mongo_uri, crawl_id, barrier)
        index.interval = 0.5
        await index.open()
        index.add(URL, ev.event(ev.FETCHED, "w1", status=200))  # the lease's event...
        barrier.finish("lease")  # ...then its end
        early = list(released)
        start = time.monotonic()
        while not released:
            await asyncio.sleep(0.01)
        waited = time.monotonic() - start
        doc = await index.collection.find_one({"_id": URL})
        await index.close(5)
        await client.close()
        assert doc is not None and doc["state"] == ev.FETCHED
        return early, list(released), waited

    early, late, waited = asyncio.run(scenario())
    assert early == [] and late == ["lease"]
    assert waited > 0.2  # released by the batch's write, not at once


def test_an_operation_handed_over_ends_with_the_batch(mongo_uri: str, crawl_id: str) -> None:
    async def scenario() -> list[str]:
        released: list[str] = []
        barrier = AckBarrier(released.append)
        client, index = _index(mongo_uri, crawl_id, barrier)
        await index.open()
        send = barrier.begin()  # a follow-up request's send, begun before its parent ended
        barrier.finish("parent")
        index.add(URL, ev.event(ev.QUEUED, "w1", offset=3), send)  # the broker has it
        assert released == []
        await index.flush()
        await index.close(5)
        await client.close()
        return released

    assert asyncio.run(scenario()) == ["parent"]
