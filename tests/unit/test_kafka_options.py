"""The Kafka security settings: read once into :class:`KafkaOptions` (settings or
environment), checked with the setting's name in the error, and translated to kafka-python's
keyword arguments in one place (:func:`crawler.connections.clients.kafka_security`)."""

from __future__ import annotations

import io
import logging
import time
from pathlib import Path
from typing import Any

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer
from kafka.net.sasl.oauth import AbstractTokenProvider
from scrapy.settings import Settings

from crawler.config.readers import SettingError
from crawler.connections import clients as connection
from crawler.connections.options import KafkaOptions

SECRET = "pa55-w0rd-never-shown"


class TokenProvider(AbstractTokenProvider):
    def token(self) -> str:
        return "a-bearer-token"


class NoToken:
    def token(self) -> str:  # duck-typed: kafka-python wants an AbstractTokenProvider
        return "t"


def options(**values: Any) -> KafkaOptions:
    return KafkaOptions.from_settings(Settings({"KAFKA_BOOTSTRAP_SERVERS": "b1:9093", **values}))


@pytest.fixture
def pem(tmp_path: Path) -> dict[str, str]:
    files = {}
    for name in ("ca", "cert", "key"):
        path = tmp_path / f"{name}.pem"
        path.write_text("-----BEGIN CERTIFICATE-----\n")
        files[name] = str(path)
    return files


def test_plaintext_by_default() -> None:
    opts = options()
    assert opts.security_protocol == "PLAINTEXT"
    assert connection.kafka_security(opts) == {"security_protocol": "PLAINTEXT"}
    assert connection.kafka_common(opts, 5)["bootstrap_servers"] == ["b1:9093"]
    assert connection.kafka_common("b1:9093", 5) == connection.kafka_common(opts, 5)


def test_ssl_with_a_ca_and_a_client_certificate(pem: dict[str, str]) -> None:
    opts = options(KAFKA_SECURITY_PROTOCOL="ssl", KAFKA_SSL_CAFILE=pem["ca"],
                   KAFKA_SSL_CERTFILE=pem["cert"], KAFKA_SSL_KEYFILE=pem["key"],
                   KAFKA_SSL_CHECK_HOSTNAME="false")
    assert connection.kafka_security(opts) == {
        "security_protocol": "SSL", "ssl_cafile": pem["ca"], "ssl_certfile": pem["cert"],
        "ssl_keyfile": pem["key"], "ssl_check_hostname": False}


def test_ssl_with_the_system_cas_checks_the_hostname() -> None:
    assert connection.kafka_security(options(KAFKA_SECURITY_PROTOCOL="SSL")) == {
        "security_protocol": "SSL", "ssl_check_hostname": True}


@pytest.mark.parametrize("protocol", ["SASL_SSL", "SASL_PLAINTEXT"])
@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "scram-sha-512"])
def test_sasl_with_a_password(protocol: str, mechanism: str) -> None:
    opts = options(KAFKA_SECURITY_PROTOCOL=protocol, KAFKA_SASL_MECHANISM=mechanism,
                   KAFKA_SASL_USERNAME="crawler", KAFKA_SASL_PASSWORD=SECRET)
    expected = {"security_protocol": protocol, "sasl_mechanism": mechanism.upper(),
                "sasl_plain_username": "crawler", "sasl_plain_password": SECRET}
    if protocol == "SASL_SSL":
        expected["ssl_check_hostname"] = True
    assert connection.kafka_security(opts) == expected
    assert SECRET not in repr(opts)


def test_oauthbearer_gets_one_provider_instance() -> None:
    opts = options(KAFKA_SECURITY_PROTOCOL="SASL_SSL", KAFKA_SASL_MECHANISM="OAUTHBEARER",
                   KAFKA_SASL_OAUTH_TOKEN_PROVIDER=f"{__name__}.TokenProvider")
    config = connection.kafka_security(opts)
    assert config["sasl_mechanism"] == "OAUTHBEARER"
    assert isinstance(config["sasl_oauth_token_provider"], TokenProvider)
    assert "sasl_plain_password" not in config
    assert connection.kafka_security(opts)["sasl_oauth_token_provider"] is opts.oauth_token_provider


def test_the_environment_is_read(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", "env:9093")
    monkeypatch.setenv("KAFKA_SECURITY_PROTOCOL", "SASL_SSL")
    monkeypatch.setenv("KAFKA_SASL_MECHANISM", "SCRAM-SHA-512")
    monkeypatch.setenv("KAFKA_SASL_USERNAME", "u")
    monkeypatch.setenv("KAFKA_SASL_PASSWORD", SECRET)
    monkeypatch.setenv("KAFKA_CLIENT_PARAMS", '{"client_rack": "r1"}')
    opts = KafkaOptions.from_settings(Settings())
    assert (opts.bootstrap, opts.sasl_password, opts.client_params) == (
        "env:9093", SECRET, {"client_rack": "r1"})


def test_client_params_come_last_and_only_where_known() -> None:
    opts = options(KAFKA_CLIENT_PARAMS={"acks": 1, "request_timeout_ms": 42,
                                        "security_protocol": "SSL"})
    producer = connection.kafka_config(KafkaProducer, opts, 5, acks="all")
    admin = connection.kafka_config(KafkaAdminClient, opts, 5)
    consumer = connection.kafka_config(KafkaConsumer, opts, 5)
    assert (producer["acks"], producer["request_timeout_ms"]) == (1, 42)
    assert "acks" not in admin and "acks" not in consumer
    assert admin["request_timeout_ms"] == consumer["request_timeout_ms"] == 42
    assert admin["security_protocol"] == "SSL"


@pytest.mark.parametrize(("values", "setting"), [
    ({"KAFKA_SECURITY_PROTOCOL": "TLS"}, "KAFKA_SECURITY_PROTOCOL"),
    ({"KAFKA_SECURITY_PROTOCOL": "SASL_SSL"}, "KAFKA_SASL_MECHANISM"),
    ({"KAFKA_SECURITY_PROTOCOL": "SASL_SSL", "KAFKA_SASL_MECHANISM": "GSSAPI"},
     "KAFKA_SASL_MECHANISM"),
    ({"KAFKA_SASL_MECHANISM": "PLAIN"}, "KAFKA_SASL_MECHANISM"),
    ({"KAFKA_SECURITY_PROTOCOL": "SASL_PLAINTEXT", "KAFKA_SASL_MECHANISM": "PLAIN",
      "KAFKA_SASL_PASSWORD": SECRET}, "KAFKA_SASL_USERNAME"),
    ({"KAFKA_SECURITY_PROTOCOL": "SASL_SSL", "KAFKA_SASL_MECHANISM": "SCRAM-SHA-256",
      "KAFKA_SASL_USERNAME": "u"}, "KAFKA_SASL_PASSWORD"),
    ({"KAFKA_SECURITY_PROTOCOL": "SASL_SSL", "KAFKA_SASL_MECHANISM": "OAUTHBEARER"},
     "KAFKA_SASL_OAUTH_TOKEN_PROVIDER"),
    ({"KAFKA_SECURITY_PROTOCOL": "SASL_SSL", "KAFKA_SASL_MECHANISM": "OAUTHBEARER",
      "KAFKA_SASL_OAUTH_TOKEN_PROVIDER": f"{__name__}.NoToken"},
     "KAFKA_SASL_OAUTH_TOKEN_PROVIDER"),
    ({"KAFKA_SECURITY_PROTOCOL": "SASL_SSL", "KAFKA_SASL_MECHANISM": "OAUTHBEARER",
      "KAFKA_SASL_OAUTH_TOKEN_PROVIDER": "no.such.Provider"},
     "KAFKA_SASL_OAUTH_TOKEN_PROVIDER"),
    ({"KAFKA_SECURITY_PROTOCOL": "SASL_SSL", "KAFKA_SASL_MECHANISM": "PLAIN",
      "KAFKA_SASL_USERNAME": "u", "KAFKA_SASL_PASSWORD": SECRET,
      "KAFKA_SASL_OAUTH_TOKEN_PROVIDER": f"{__name__}.TokenProvider"},
     "KAFKA_SASL_OAUTH_TOKEN_PROVIDER"),
    ({"KAFKA_SECURITY_PROTOCOL": "SSL", "KAFKA_SSL_CAFILE": "/no/such/ca.pem"},
     "KAFKA_SSL_CAFILE"),
    ({"KAFKA_SECURITY_PROTOCOL": "SSL", "KAFKA_SSL_CERTFILE": "/no/such/c.pem"},
     "KAFKA_SSL_CERTFILE"),
    ({"KAFKA_SSL_CHECK_HOSTNAME": "maybe"}, "KAFKA_SSL_CHECK_HOSTNAME"),
    ({"KAFKA_CLIENT_PARAMS": "[1]"}, "KAFKA_CLIENT_PARAMS"),
])
def test_bad_values_name_the_setting_and_no_secret(values: dict[str, Any], setting: str) -> None:
    with pytest.raises(SettingError) as caught:
        options(**values)
    assert caught.value.setting == setting
    assert SECRET not in str(caught.value)


def test_a_tls_file_without_tls_or_a_key_without_certificate(pem: dict[str, str]) -> None:
    with pytest.raises(SettingError, match=r"KAFKA_SSL_CAFILE.*PLAINTEXT"):
        options(KAFKA_SSL_CAFILE=pem["ca"])
    with pytest.raises(SettingError) as caught:
        options(KAFKA_SECURITY_PROTOCOL="SSL", KAFKA_SSL_KEYFILE=pem["key"])
    assert caught.value.setting == "KAFKA_SSL_KEYFILE"


def test_an_unreachable_broker_names_the_setting_and_no_secret(monkeypatch: pytest.MonkeyPatch
                                                               ) -> None:
    class Refused:
        DEFAULT_CONFIG = KafkaAdminClient.DEFAULT_CONFIG

        def __init__(self, **config: Any) -> None:
            raise OSError("connection refused")

    monkeypatch.setattr("kafka.KafkaAdminClient", Refused)
    opts = options(KAFKA_SECURITY_PROTOCOL="SASL_SSL", KAFKA_SASL_MECHANISM="PLAIN",
                   KAFKA_SASL_USERNAME="u", KAFKA_SASL_PASSWORD=SECRET)
    with pytest.raises(connection.ServiceUnavailable) as caught:
        connection.check_kafka(opts, connect_timeout=1)
    assert caught.value.setting == "KAFKA_BOOTSTRAP_SERVERS"
    assert "b1:9093" in str(caught.value) and SECRET not in str(caught.value)


def test_kafka_python_s_debug_lines_lose_the_sasl_secrets(caplog: pytest.LogCaptureFixture
                                                          ) -> None:
    opts = options(KAFKA_SECURITY_PROTOCOL="SASL_SSL", KAFKA_SASL_MECHANISM="PLAIN",
                   KAFKA_SASL_USERNAME="u", KAFKA_SASL_PASSWORD=SECRET)
    connection.kafka_config(KafkaAdminClient, opts, 5)
    caplog.set_level(logging.DEBUG)
    conn, parser = logging.getLogger("kafka.net.connection"), logging.getLogger(
        "kafka.protocol.parser")
    conn.debug("%s Request 3: %s", "<conn>",
               f"SaslAuthenticateRequest(version=2, auth_bytes=b'\\x00u\\x00{SECRET}')")
    parser.debug("Send: %r", bytearray(b"\x00$\x00\x02n,,\x01auth=Bearer tok-123\x01"))
    parser.debug("Recv: %r", b"\x00\x00\x00-")
    conn.debug("a stray %s", SECRET)
    logging.getLogger("kafka.admin.client").debug(
        "Starting KafkaAdminClient with configuration: %s",
        {"sasl_plain_username": "u", "sasl_plain_password": "it's \\ odd"})
    assert SECRET not in caplog.text and "tok-123" not in caplog.text
    assert "odd" not in caplog.text and "'sasl_plain_password': '***'" in caplog.text
    assert "auth_bytes=***" in caplog.text and "Send: ***" in caplog.text
    assert caplog.text.count("***") == 5


def test_a_key_password_in_the_client_params_is_not_logged(caplog: pytest.LogCaptureFixture
                                                           ) -> None:
    opts = options(KAFKA_CLIENT_PARAMS={"ssl_password": "key-pass-xyz"})
    config = connection.kafka_config(KafkaAdminClient, opts, 5)
    assert config["ssl_password"] == "key-pass-xyz"
    assert "key-pass-xyz" not in repr(opts)
    caplog.set_level(logging.DEBUG)
    logging.getLogger("kafka.admin.client").debug("configuration: %s", config)
    assert "key-pass-xyz" not in caplog.text and "'ssl_password': '***'" in caplog.text


class _Costly:
    """A log argument that counts how often it is formatted."""

    formatted = 0

    def __repr__(self) -> str:
        _Costly.formatted += 1
        return "ProduceRequest(" + "x" * 1000 + ")"


def test_a_debug_line_no_handler_prints_is_never_formatted() -> None:
    """Scrapy's root logger passes DEBUG on and its handler, at INFO, drops it: the filter
    must drop it too, before kafka-python's repr of a whole produce request is built."""
    connection.kafka_config(KafkaAdminClient, options(), 5)  # installs the filter
    root, handler = logging.getLogger(), logging.StreamHandler(io.StringIO())
    handler.setLevel(logging.INFO)
    saved = root.level, root.handlers[:]
    root.handlers[:] = [handler]
    root.setLevel(logging.NOTSET)
    try:
        _Costly.formatted = 0
        logging.getLogger("kafka.net.connection").debug("Request 7: %r", _Costly())
        assert _Costly.formatted == 0
        handler.setLevel(logging.DEBUG)
        logging.getLogger("kafka.net.connection").debug("Request 8: %r", _Costly())
        assert _Costly.formatted >= 1 and "Request 8: ProduceRequest" in handler.stream.getvalue()
    finally:
        root.handlers[:] = saved[1]
        root.setLevel(saved[0])


def test_where_nothing_prints_debug_kafka_python_makes_no_debug_record() -> None:
    """Under Scrapy at INFO, kafka-python's logger is raised to INFO: its DEBUG lines (one
    or more per record sent or fetched) are not even built; a level set by the project,
    or a handler that prints DEBUG, keeps them."""
    from crawler.connections.kafka_logs import skip_unprinted

    root, kafka = logging.getLogger(), logging.getLogger("kafka")
    handler = logging.StreamHandler(io.StringIO())
    saved = root.level, root.handlers[:], kafka.level
    root.handlers[:] = [handler]
    root.setLevel(logging.NOTSET)
    try:
        for level, project, expected in [(logging.INFO, logging.NOTSET, logging.INFO),
                                         (logging.DEBUG, logging.NOTSET, logging.NOTSET),
                                         (logging.INFO, logging.DEBUG, logging.DEBUG)]:
            handler.setLevel(level)
            kafka.setLevel(project)
            skip_unprinted()
            assert kafka.level == expected, (level, project)
        kafka.setLevel(logging.NOTSET)
        handler.setLevel(logging.INFO)
        skip_unprinted()
        assert not logging.getLogger("kafka.producer.kafka").isEnabledFor(logging.DEBUG)
    finally:
        root.handlers[:] = saved[1]
        root.setLevel(saved[0])
        kafka.setLevel(saved[2])


def test_kafka_python_s_slow_step_warning_is_a_debug_line(caplog: pytest.LogCaptureFixture
                                                          ) -> None:
    """kafka-python's own I/O thread, one step of which sleeps 0.15 s: its "ran for ...
    threshold" warning (6 to 10 a minute in a busy worker, whose I/O thread shares the GIL
    with the reactor) arrives as DEBUG; its other warnings stay warnings."""
    from kafka.net.selector import NetworkSelector

    async def slow_step() -> int:
        time.sleep(0.15)
        return 1

    connection.kafka_config(KafkaAdminClient, options(), 5)  # installs the filter
    net = NetworkSelector()
    try:
        caplog.set_level(logging.DEBUG, logger="kafka.net.selector")
        assert net.run(slow_step) == 1
        logging.getLogger("kafka.net.selector").warning("Task %s left RUNNING", "t")
    finally:
        net.close()
    slow = [r for r in caplog.records if "threshold" in r.getMessage()]
    assert [r.levelname for r in slow] == ["DEBUG"], caplog.text
    assert "ran for 0.1" in slow[0].getMessage()
    kept = [r for r in caplog.records if "left RUNNING" in r.getMessage()]
    assert [r.levelname for r in kept] == ["WARNING"]
