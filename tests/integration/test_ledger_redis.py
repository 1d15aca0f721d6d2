"""The ledger's batches on a real Redis: a record's ack waits for its batch, a record
counted again (a redelivery) lands under ``again/``, committed offsets are forgotten, and a
Redis that does not answer stalls the acks instead of losing a count."""

from __future__ import annotations

import asyncio

from crawler.config.keys import CrawlKeys
from crawler.connections.clients import redis_client
from crawler.frontier.leases import AckBarrier, Partition
from crawler.ledger.recorder import LedgerRecorder

TP: Partition = ("c.requests", 3)


def test_outcomes_are_counted_once_per_record_before_the_ack(own_redis: str) -> None:
    async def main() -> None:
        client = redis_client(own_redis)
        keys = CrawlKeys("c")
        released: list[str] = []
        barrier = AckBarrier(released.append)
        committed: dict[Partition, int] = {}
        recorder = LedgerRecorder(client, "c", barrier, committed=committed.get)
        for offset in (1, 2):
            recorder.record(TP, offset, {"fetched/2xx": 1, "items/stored": 2})
            barrier.finish(f"lease {offset}")
        recorder.count("retries", 4)
        assert released == []  # the batch is not in Redis yet
        await recorder.flush()
        assert released == ["lease 1", "lease 2"]
        committed[TP] = 2  # offset 1 is committed: never delivered again
        recorder.record(TP, 2, {"fetched/2xx": 1, "items/stored": 2})  # a redelivery
        recorder.record(TP, 3, {"dropped/robots": 1})
        await recorder.flush()
        counters = {k.decode(): int(v) for k, v in (await client.hgetall(keys.ledger)).items()}
        assert counters == {"fetched/2xx": 2, "items/stored": 4, "retries": 4,
                            "again/fetched/2xx": 1, "again/items/stored": 2,
                            "dropped/robots": 1}
        seen = await client.zrange(keys.ledger_seen(*TP), 0, -1)
        assert seen == [b"2", b"3"]
        await client.aclose()

    asyncio.run(main())


def test_a_silent_redis_stalls_the_acks_and_loses_no_count(own_redis: str) -> None:
    async def main() -> None:
        client, admin = redis_client(own_redis), redis_client(own_redis)
        released: list[str] = []
        barrier = AckBarrier(released.append)
        recorder = LedgerRecorder(client, "c", barrier, committed=lambda tp: None,
                                  interval=0.05)
        recorder.start()
        await admin.execute_command("CLIENT", "PAUSE", 1500, "WRITE")
        recorder.record(TP, 9, {"fetched/2xx": 1})
        barrier.finish("lease 9")
        await asyncio.sleep(1.0)
        assert released == []  # Redis takes no write: the ack waits
        await asyncio.sleep(1.5)
        assert released == ["lease 9"]
        assert await client.hget(CrawlKeys("c").ledger, "fetched/2xx") == b"1"
        await recorder.close(timeout=5)
        await client.aclose()
        await admin.aclose()

    asyncio.run(main())
