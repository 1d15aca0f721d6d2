"""MongoDB secured as in production: ``--auth`` with a keyfile, TLS required, a replica set.

One real ``mongod`` (:func:`crawler.localstack.secured_mongo.start_secured_mongod`) reached
through a multi-host URI whose first host is down. The server refuses a client without
credentials and a plaintext one, so the stored items prove that the crawler went through
authentication and TLS; a wrong password and a CA that did not sign the server's certificate
each fail within ``CONNECT_TIMEOUT`` with one line naming ``MONGO_URI`` and the masked address.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest
from pymongo import MongoClient, monitoring
from pymongo.errors import OperationFailure, ServerSelectionTimeoutError
from support.mongo import make_pipeline

from crawler.commands import preflight
from crawler.config.readers import mask_url
from crawler.connections.clients import ServiceUnavailable
from crawler.connections.options import MongoOptions
from crawler.localstack.certs import make_tls_files
from crawler.localstack.secured_mongo import SecuredMongo
from crawler.localstack.services import HOST, free_port

CONNECT_TIMEOUT = 3.0


@pytest.fixture
def secured(secured_mongo: SecuredMongo) -> SecuredMongo:
    return secured_mongo


@pytest.fixture
def down() -> str:
    """A member of the URI that is down: a loopback port nothing listens on."""
    return f"{HOST}:{free_port()}"


#: (appname, writeConcern) of every write command the clients sent
WRITES: list[tuple[str, dict[str, Any]]] = []


class Writes(monitoring.CommandListener):
    """Records the write concern of each write command (Scrapy deep-copies the settings, so
    the listener of ``MONGO_PARAMS`` is a copy: it records into :data:`WRITES`)."""

    def __init__(self, name: str) -> None:
        self.name = name

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        if event.command_name in {"insert", "update", "delete"}:
            WRITES.append((self.name, dict(event.command.get("writeConcern", {}))))

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        pass

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass


def store(uri: str, crawl_id: str, items: list[dict[str, Any]], **settings: Any) -> None:
    pipeline = make_pipeline(uri, crawl_id, CONNECT_TIMEOUT=CONNECT_TIMEOUT, **settings)

    async def main() -> None:
        await pipeline.open_spider()
        try:
            await asyncio.gather(*(pipeline.process_item(item) for item in items))
        finally:
            await pipeline.close_spider()

    asyncio.run(main())


@pytest.mark.parametrize("tls_in", ["uri", "MONGO_PARAMS"])
def test_items_are_stored_with_w_majority(secured: SecuredMongo, down: str, tls_in: str,
                                          crawl_id: str) -> None:
    uri = secured.uri(hosts=[down], tls_in_uri=tls_in == "uri")
    params: dict[str, Any] = {"event_listeners": [Writes(crawl_id)], "appname": "secured-test"}
    if tls_in == "MONGO_PARAMS":
        params.update(secured.tls_params())
    items = [{"url": f"http://secured.test/{i}", "n": i} for i in range(25)]
    store(uri, crawl_id, items, MONGO_PARAMS=params, MONGO_BATCH_SIZE=10)
    concerns = [concern for name, concern in WRITES if name == crawl_id]
    assert concerns and all(c.get("w") == "majority" and c.get("j") is True
                            for c in concerns), concerns
    with secured.admin_client(readConcernLevel="majority") as admin:
        docs = list(admin[secured.database][crawl_id].find({}, {"n": 1}))
    assert sorted(d["n"] for d in docs) == list(range(25))


def test_the_server_refuses_a_client_without_credentials(secured: SecuredMongo) -> None:
    uri = (f"mongodb://{HOST}:{secured.port}/?replicaSet=rs0&tls=true"
           f"&tlsCAFile={secured.tls.ca_file}")
    with MongoClient(uri, serverSelectionTimeoutMS=5000) as client:
        client.admin.command("ping")  # allowed without authentication: the server is up
        with pytest.raises(OperationFailure) as caught:
            client[secured.database].probe.insert_one({"x": 1})
    assert caught.value.code == 13  # Unauthorized: requires authentication


def test_the_server_refuses_a_plaintext_client(secured: SecuredMongo) -> None:
    uri = secured.uri().split("&tls=")[0]  # the right password, no TLS
    with MongoClient(uri, serverSelectionTimeoutMS=2000) as client, \
            pytest.raises(ServerSelectionTimeoutError):
        client.admin.command("ping")


def test_the_wrong_user_has_no_other_database(secured: SecuredMongo) -> None:
    with MongoClient(secured.uri(), serverSelectionTimeoutMS=5000) as client, \
            pytest.raises(OperationFailure) as caught:
        client.elsewhere.probe.insert_one({"x": 1})
    assert caught.value.code == 13


def refused(uri: str, secret: str) -> tuple[str, float]:
    """The one line ``scrapy crawl``'s preflight and the pipeline give for *uri*."""
    started = time.monotonic()
    mongo = MongoOptions(uri=uri, connect_timeout=CONNECT_TIMEOUT)
    with pytest.raises(ServiceUnavailable) as caught:
        asyncio.run(preflight._reach_mongo(mongo))
    elapsed = time.monotonic() - started
    line = preflight.one_line(caught.value)
    with pytest.raises(ServiceUnavailable) as opened:
        store(uri, "refused", [])
    for text in (line, str(opened.value)):
        assert "MONGO_URI" in text and mask_url(uri) in text, text
        assert secret not in text and "\n" not in text, text
    return line, elapsed


def test_a_wrong_password_is_one_line(secured: SecuredMongo, down: str) -> None:
    uri = secured.uri(hosts=[down], password="not-the-password")
    line, elapsed = refused(uri, "not-the-password")
    assert "Authentication failed" in line and "code 18" in line, line
    assert "check the user, password and authSource of MONGO_URI" in line
    assert elapsed < CONNECT_TIMEOUT + 2


def test_a_tls_failure_is_one_line(secured: SecuredMongo, down: str, tmp_path: Path) -> None:
    other = make_tls_files(tmp_path / "other-ca", ca_name="another CA")
    uri = secured.uri(hosts=[down], ca_file=other.ca_file)
    line, elapsed = refused(uri, secured.password)
    assert "CERTIFICATE_VERIFY_FAILED" in line and "check the TLS options" in line, line
    assert elapsed < CONNECT_TIMEOUT + 2
