"""``MONGO_PARAMS`` and any MongoDB URI: read once, passed to pymongo by the one builder."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from scrapy.settings import Settings

from crawler.commands import preflight
from crawler.config.readers import SettingError, register_defaults
from crawler.connections import clients
from crawler.connections.options import MongoOptions
from crawler.storage.settings import StorageConfig

URI = "mongodb://127.0.0.1:1"
SRV = ("mongodb+srv://crawler:s3cret@cluster0.abcde.mongodb.net/crawler"
       "?retryWrites=true&authSource=admin&appName=crawler")


def options(**settings: Any) -> MongoOptions:
    return MongoOptions.from_settings(Settings({"MONGO_URI": URI, **settings}))


def test_default_is_empty() -> None:
    settings = Settings({"MONGO_URI": URI})
    register_defaults(settings)
    assert MongoOptions.from_settings(settings).params == {}


def test_a_dict_or_json_setting() -> None:
    assert options(MONGO_PARAMS={"tls": True, "authSource": "admin"}).params == {
        "tls": True, "authSource": "admin"}
    assert options(MONGO_PARAMS='{"tlsCAFile": "/ca.pem"}').params == {"tlsCAFile": "/ca.pem"}


def test_the_environment_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MONGO_PARAMS", '{"authSource": "admin", "maxPoolSize": 7}')
    settings = Settings({"MONGO_URI": URI})
    register_defaults(settings)  # the registered default {} gives way to the variable
    assert MongoOptions.from_settings(settings).params == {"authSource": "admin",
                                                           "maxPoolSize": 7}
    cfg = StorageConfig.from_settings(settings, "spider")
    assert cfg is not None and cfg.params == {"authSource": "admin", "maxPoolSize": 7}


def test_malformed_json_is_named_without_showing_it() -> None:
    with pytest.raises(SettingError) as caught:
        options(MONGO_PARAMS='{"password": "s3cret",}')
    assert caught.value.setting == "MONGO_PARAMS" and "s3cret" not in str(caught.value)
    with pytest.raises(SettingError, match="MONGO_PARAMS: expected a dict"):
        options(MONGO_PARAMS="[1, 2]")


@pytest.mark.parametrize(("key", "own"), [
    ("w", "MONGO_WRITE_CONCERN"), ("W", "MONGO_WRITE_CONCERN"), ("journal", "MONGO_JOURNAL"),
    ("wTimeoutMS", "MONGO_WRITE_TIMEOUT"), ("socketTimeoutMS", "MONGO_TIMEOUT"),
    ("serverSelectionTimeoutMS", "CONNECT_TIMEOUT"), ("host", "MONGO_URI"),
])
def test_an_option_with_a_setting_of_its_own_is_refused(key: str, own: str) -> None:
    with pytest.raises(SettingError, match=f"Setting MONGO_PARAMS: '{key}' comes from {own}"):
        options(MONGO_PARAMS={key: 1})


def test_the_builder_passes_uri_and_params_untouched(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[tuple[Any, ...], dict[str, Any]]] = []
    monkeypatch.setattr(clients, "AsyncMongoClient", lambda *a, **kw: calls.append((a, kw)))
    clients.mongo_client(SRV, params={"tlsCAFile": "/ca.pem", "authSource": "admin"},
                         connect_timeout=2.0, write_concern="majority", write_timeout=3.0)
    (args, kwargs), = calls
    assert args == (SRV,)
    assert kwargs == {"tlsCAFile": "/ca.pem", "authSource": "admin", "wtimeoutMS": 3000,
                      "serverSelectionTimeoutMS": 2000, "connectTimeoutMS": 2000,
                      "w": "majority", "journal": True, "connect": False}


@pytest.mark.parametrize("uri", [
    SRV,
    "mongodb://crawler:pw@h1:27017,h2:27017,h3:27017/?replicaSet=rs0&authSource=admin",
    "mongodb://crawler:pw@127.0.0.1:1/?tls=true&tlsAllowInvalidHostnames=false",
])
def test_any_uri_builds_without_the_network(uri: str) -> None:
    """A ``mongodb+srv://`` URI is resolved on the first operation, not by the builder (the
    SRV lookup itself cannot be tested here: no DNS)."""
    async def build() -> dict[str, Any]:
        client = clients.mongo_client(uri, params={"appname": "crawler"}, connect_timeout=1)
        try:
            return {"w": client.write_concern.document, "host": client._host}
        finally:
            await client.close()

    built = asyncio.run(build())
    assert built["w"] == {"w": "majority", "j": True}
    assert built["host"] == [uri]


@pytest.mark.parametrize(("uri", "params", "setting"), [
    ("mongodb://u:p:w@127.0.0.1:1/", {}, "MONGO_URI"),
    ("mongodb://127.0.0.1:1/?tls=true&tlsCAFile=/nonexistent/ca.pem", {}, "MONGO_URI"),
    (URI, {"tls": True, "tlsCAFile": "/nonexistent/ca.pem"}, "MONGO_PARAMS"),
    ("mongodb://h1:27017,h2:x/", {}, "MONGO_URI"),
    (URI, {"noSuchOption": 1}, "MONGO_PARAMS"),
    (URI, {"tlsCAFile": 1}, "MONGO_PARAMS"),
])
def test_preflight_names_the_setting_pymongo_refuses(uri: str, params: dict[str, Any],
                                                      setting: str) -> None:
    mongo = MongoOptions(uri=uri, params=params)
    with pytest.raises(SettingError) as caught:
        asyncio.run(preflight._mongo_client(mongo))
    assert caught.value.setting == setting, caught.value


def test_the_write_concern_settings_win_over_the_uri() -> None:
    async def concern() -> dict[str, Any]:
        client = clients.mongo_client("mongodb://h1:1,h2:2/?replicaSet=rs0&w=1&journal=false",
                                      write_concern="majority", journal=True)
        try:
            return client.write_concern.document
        finally:
            await client.close()

    assert asyncio.run(concern()) == {"w": "majority", "j": True}


def test_the_start_up_ping_has_the_socket_timeout_of_every_other_call() -> None:
    """The preflight's client waits ``MONGO_TIMEOUT`` for an answer, as the pipeline's does:
    a server that accepts the connection and never answers ends the start-up (issue 33)."""
    async def timeouts() -> tuple[float | None, float | None]:
        mongo = options(MONGO_TIMEOUT=7, MONGO_WRITE_TIMEOUT=3)
        client = await preflight._mongo_client(mongo)
        shared = clients.mongo_client_from(mongo)
        try:
            return (client.options.pool_options.socket_timeout,
                    shared.options.pool_options.socket_timeout)
        finally:
            await client.close()
            await shared.close()

    assert asyncio.run(timeouts()) == (7.0, 7.0)
