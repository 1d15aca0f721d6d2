"""REDIS_URL with an ACL user and rediss://, REDIS_PARAMS with certificates: read from the
settings or the environment (JSON), checked at start-up naming the setting, and handed to
every Redis client the builder makes. No server: nothing here connects."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import redis
import redis.asyncio as aioredis
from scrapy.settings import Settings

from crawler.config.readers import SettingError
from crawler.connections.clients import (
    ServiceUnavailable,
    redis_client,
    redis_from,
    redis_sync_client,
)
from crawler.connections.options import RedisOptions

URL = "rediss://crawler:pw-s3cret@127.0.0.1:6390/0"


@pytest.fixture
def certs(tmp_path: Path) -> dict[str, str]:
    for name in ("ca.crt", "client.crt", "client.key"):
        (tmp_path / name).write_text("not read: nothing connects\n")
    return {"ssl_ca_certs": str(tmp_path / "ca.crt"), "ssl_certfile": str(tmp_path / "client.crt"),
            "ssl_keyfile": str(tmp_path / "client.key"), "ssl_cert_reqs": "required"}


@pytest.fixture(autouse=True)
def _no_redis_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("REDIS_URL", "REDIS_PARAMS"):
        monkeypatch.delenv(name, raising=False)


def test_redis_params_come_from_the_environment_as_json(
        monkeypatch: pytest.MonkeyPatch, certs: dict[str, str]) -> None:
    monkeypatch.setenv("REDIS_URL", URL)
    monkeypatch.setenv("REDIS_PARAMS", json.dumps(certs))
    options = RedisOptions.from_settings(Settings())
    assert (options.url, options.params) == (URL, certs)


def test_a_redis_params_setting_wins_over_the_environment(
        monkeypatch: pytest.MonkeyPatch, certs: dict[str, str]) -> None:
    monkeypatch.setenv("REDIS_PARAMS", json.dumps({"client_name": "from-env"}))
    options = RedisOptions.from_settings(Settings({"REDIS_URL": URL, "REDIS_PARAMS": certs}))
    assert options.params == certs


def test_redis_params_in_the_environment_must_be_a_json_object(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REDIS_PARAMS", "ssl_ca_certs=/etc/ca.crt")
    with pytest.raises(SettingError, match="Setting REDIS_PARAMS: expected a JSON object"):
        RedisOptions.from_settings(Settings({"REDIS_URL": URL}))


def test_tls_options_need_a_rediss_url(certs: dict[str, str]) -> None:
    settings = Settings({"REDIS_URL": "redis://crawler:pw@127.0.0.1:6390/0",
                         "REDIS_PARAMS": certs})
    with pytest.raises(SettingError, match="REDIS_URL must start with rediss://") as caught:
        RedisOptions.from_settings(settings)
    assert caught.value.setting == "REDIS_PARAMS"


def test_a_missing_certificate_file_is_named(certs: dict[str, str], tmp_path: Path) -> None:
    missing = str(tmp_path / "nope" / "ca.crt")
    settings = Settings({"REDIS_URL": URL, "REDIS_PARAMS": {**certs, "ssl_ca_certs": missing}})
    with pytest.raises(SettingError, match=f"ssl_ca_certs: no such file '{missing}'"):
        RedisOptions.from_settings(settings)


@pytest.mark.parametrize("params, word", [
    ({"ssl_ca_cert": "/x"}, "ssl_ca_cert"),  # misspelt: redis-py's name is ssl_ca_certs
    ({"ssl_cert_reqs": "require"}, "require"),
])
def test_an_option_redis_py_cannot_use_is_a_setting_error(params: dict[str, str],
                                                          word: str) -> None:
    for build in (redis_client, redis_sync_client):
        with pytest.raises(SettingError, match=word) as caught:
            build(URL, params)
        assert caught.value.setting == "REDIS_PARAMS"
        assert "pw-s3cret" not in str(caught.value)


def test_an_unusable_url_is_a_setting_error_without_the_password() -> None:
    with pytest.raises(SettingError) as caught:
        redis_client("rediss://crawler:pw-s3cret@127.0.0.1:port/0")
    assert caught.value.setting == "REDIS_URL" and "pw-s3cret" not in str(caught.value)


def test_the_builders_hand_the_user_password_and_certificates_to_tls_connections(
        certs: dict[str, str]) -> None:
    options = RedisOptions.from_settings(Settings({"REDIS_URL": URL, "REDIS_PARAMS": certs,
                                                   "CONNECT_TIMEOUT": 2}))
    for client, ssl_class in ((redis_from(options), aioredis.SSLConnection),
                              (redis_sync_client(URL, certs), redis.SSLConnection)):
        pool = client.connection_pool
        kwargs = pool.connection_kwargs
        assert pool.connection_class is ssl_class
        assert (kwargs["username"], kwargs["password"]) == ("crawler", "pw-s3cret")
        assert {k: kwargs[k] for k in certs} == certs


def test_from_env_reads_what_a_stack_hands_its_workers(certs: dict[str, str]) -> None:
    options = RedisOptions.from_env({"REDIS_URL": URL, "REDIS_PARAMS": json.dumps(certs),
                                     "MONGO_URI": "mongodb://127.0.0.1:1/"})
    assert (options.url, options.params, options.connect_timeout) == (URL, certs, 5.0)
    assert RedisOptions.from_env({"REDIS_URL": "redis://127.0.0.1:1/0"}).params == {}


def test_service_unavailable_is_one_line_masked_and_never_quotes_the_password() -> None:
    error = ServiceUnavailable("REDIS_URL", URL, "AUTH pw-s3cret\nrefused:\tinvalid pair")
    assert str(error) == ("Cannot reach the service of REDIS_URL at "
                          "rediss://crawler:***@127.0.0.1:6390/0: AUTH *** refused: invalid pair")
    encoded = "rediss://crawler:p%40ss@127.0.0.1:6390/0"  # the password is p@ss
    assert "p@ss" not in str(ServiceUnavailable("REDIS_URL", encoded, "AUTH p@ss failed"))
