"""Kafka over TLS and SASL through the project's builders: Apache Kafka serving TLS itself
(:mod:`crawler.localstack.secure_kafka`) with a throwaway CA.

A producer and a consumer built from ``KAFKA_SECURITY_PROTOCOL=SSL`` settings round-trip a
record; a plaintext client to the TLS port fails; a wrong CA fails the start-up check with
one line naming ``KAFKA_BOOTSTRAP_SERVERS`` within ``CONNECT_TIMEOUT``; a broker that asks
for client certificates takes ``KAFKA_SSL_CERTFILE``/``KAFKA_SSL_KEYFILE``; a SASL login
that the broker refuses fails the check in one line, with no secret logged even at DEBUG; a
SCRAM-SHA-512 and a PLAIN login succeed, within the ACLs of the user."""

from __future__ import annotations

import logging
import secrets
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kafka import TopicPartition
from kafka.net.sasl.oauth import AbstractTokenProvider
from scrapy.settings import Settings

from crawler.commands.preflight import one_line
from crawler.connections import clients as connection
from crawler.connections.options import KafkaOptions
from crawler.localstack.certs import make_tls_files
from crawler.localstack.secure_kafka import TlsKafka, allow_crawl, start_tls_kafka

CONNECT_TIMEOUT = 3.0
PASSWORD = "pw-that-must-not-show"
READER_PASSWORD = "reader-pw-that-must-not-show"
TOKEN = "bearer-that-must-not-show"


@pytest.fixture(scope="module")
def tls_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsKafka]:
    broker = start_tls_kafka(tmp_path_factory.mktemp("tls-kafka"))
    try:
        yield broker
    finally:
        broker.stop()


def ssl_options(bootstrap: str, ca_file: Path, **values: Any) -> KafkaOptions:
    return KafkaOptions.from_settings(Settings({
        "KAFKA_BOOTSTRAP_SERVERS": bootstrap, "KAFKA_SECURITY_PROTOCOL": "SSL",
        "KAFKA_SSL_CAFILE": str(ca_file), **values}))


def _create_and_send(kafka: KafkaOptions, topic: str, value: bytes) -> None:
    """Create *topic* and send *value* to it with the crawler's own builders."""
    connection.ensure_topics(kafka, {topic: 1}, connect_timeout=CONNECT_TIMEOUT)
    producer = connection.kafka_producer(kafka, connect_timeout=CONNECT_TIMEOUT, linger_ms=5,
                                         client_id="test-producer")
    try:
        producer.send(topic, key=b"k", value=value).get(timeout=20)
    finally:
        producer.close()


def test_a_record_round_trips_over_tls(tls_broker: TlsKafka) -> None:
    kafka = ssl_options(tls_broker.bootstrap, tls_broker.pki.ca_file)
    topic = f"tls-{secrets.token_hex(4)}"
    _create_and_send(kafka, topic, b"over tls")
    consumer = connection.kafka_consumer(
        kafka, group_id=f"{topic}.g", connect_timeout=CONNECT_TIMEOUT, client_id="tls-consumer",
        session_timeout_ms=6000, heartbeat_interval_ms=1000, max_poll_interval_ms=60000)
    try:
        consumer.assign([TopicPartition(topic, 0)])
        values: list[bytes] = []
        deadline = time.monotonic() + 20
        while not values and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=500).values():
                values.extend(r.value for r in records)
    finally:
        consumer.close()
    assert values == [b"over tls"]


def test_a_plaintext_client_to_the_tls_port_fails(tls_broker: TlsKafka) -> None:
    start = time.monotonic()
    with connection.quiet_client_logs(), pytest.raises(connection.ServiceUnavailable) as caught:
        connection.check_kafka(tls_broker.bootstrap, connect_timeout=CONNECT_TIMEOUT)
    assert time.monotonic() - start < CONNECT_TIMEOUT + 3
    assert caught.value.setting == "KAFKA_BOOTSTRAP_SERVERS"


def test_a_wrong_ca_fails_the_start_up_check_in_one_line(tls_broker: TlsKafka,
                                                         tmp_path: Path) -> None:
    other = make_tls_files(tmp_path / "other-ca", ca_name="some-other-ca")
    kafka = ssl_options(tls_broker.bootstrap, other.ca_file)
    start = time.monotonic()
    with connection.quiet_client_logs(), pytest.raises(connection.ServiceUnavailable) as caught:
        connection.check_kafka(kafka, connect_timeout=CONNECT_TIMEOUT)
    assert time.monotonic() - start < CONNECT_TIMEOUT + 3
    line = one_line(caught.value)
    assert "\n" not in line and "Traceback" not in line
    assert "KAFKA_BOOTSTRAP_SERVERS" in line and tls_broker.bootstrap in line
    assert "KAFKA_SSL_*" in line  # kafka-python says only "Unable to bootstrap"


def test_client_certificates_when_the_broker_asks_for_one(tmp_path: Path) -> None:
    """Mutual TLS (the broker verifies the client's chain): with KAFKA_SSL_CERTFILE and
    KAFKA_SSL_KEYFILE the check passes, without them it fails in one line."""
    broker = start_tls_kafka(tmp_path, client_certs=True)
    try:
        pki = broker.pki
        connection.check_kafka(ssl_options(
            broker.bootstrap, pki.ca_file, KAFKA_SSL_CERTFILE=str(pki.client_cert_file),
            KAFKA_SSL_KEYFILE=str(pki.client_key_file)), connect_timeout=CONNECT_TIMEOUT)
        with connection.quiet_client_logs(), pytest.raises(connection.ServiceUnavailable):
            connection.check_kafka(ssl_options(broker.bootstrap, pki.ca_file),
                                   connect_timeout=CONNECT_TIMEOUT)
    finally:
        broker.stop()


class Token(AbstractTokenProvider):
    def token(self) -> str:
        return TOKEN


@pytest.fixture(scope="module")
def sasl_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsKafka]:
    """SASL_SSL with authorization: the user ``crawler`` may use the topics and groups of
    crawls whose ids start with ``sasl-``, the user ``reader`` may only read them."""
    broker = start_tls_kafka(tmp_path_factory.mktemp("sasl-kafka"),
                             users={"crawler": PASSWORD, "reader": READER_PASSWORD})
    try:
        allow_crawl(broker, "crawler", "sasl-")
        allow_crawl(broker, "reader", "sasl-", write=False)
        yield broker
    finally:
        broker.stop()


def sasl_options(broker: TlsKafka, mechanism: str, user: str, password: str) -> KafkaOptions:
    return ssl_options(broker.bootstrap, broker.pki.ca_file, KAFKA_SECURITY_PROTOCOL="SASL_SSL",
                       KAFKA_SASL_MECHANISM=mechanism, KAFKA_SASL_USERNAME=user,
                       KAFKA_SASL_PASSWORD=password)


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-512", "PLAIN"])
def test_a_sasl_login_over_tls_succeeds_within_the_users_acls(
        sasl_broker: TlsKafka, mechanism: str, caplog: pytest.LogCaptureFixture) -> None:
    """A real login (SCRAM-SHA-512, then PLAIN) to Apache Kafka: the crawl's topics are
    created and written; a topic outside the crawl's prefix is refused by the ACLs."""
    kafka = sasl_options(sasl_broker, mechanism, "crawler", PASSWORD)
    caplog.set_level(logging.DEBUG)
    _create_and_send(kafka, f"sasl-{secrets.token_hex(4)}.requests", b"logged in")
    with pytest.raises(connection.ServiceUnavailable) as caught:
        connection.ensure_topics(kafka, {"other-crawl.requests": 1},
                                 connect_timeout=CONNECT_TIMEOUT)
    assert "TopicAuthorizationFailed" in str(caught.value)
    assert PASSWORD not in caplog.text


@pytest.mark.parametrize("sasl", [
    {"KAFKA_SASL_MECHANISM": "SCRAM-SHA-512", "KAFKA_SASL_USERNAME": "crawler",
     "KAFKA_SASL_PASSWORD": "not-the-password"},
    {"KAFKA_SASL_MECHANISM": "PLAIN", "KAFKA_SASL_USERNAME": "crawler",
     "KAFKA_SASL_PASSWORD": "not-the-password"},
    {"KAFKA_SASL_MECHANISM": "OAUTHBEARER",
     "KAFKA_SASL_OAUTH_TOKEN_PROVIDER": f"{__name__}.Token"},
], ids=["scram", "plain", "oauthbearer-not-enabled"])
def test_a_refused_sasl_login_fails_in_one_line_and_logs_no_secret(
        sasl_broker: TlsKafka, sasl: dict[str, str], caplog: pytest.LogCaptureFixture) -> None:
    """A wrong password (or a mechanism the broker does not enable) is refused by the
    broker; the start-up check says so in one line, with no secret logged even at DEBUG."""
    kafka = ssl_options(sasl_broker.bootstrap, sasl_broker.pki.ca_file,
                        KAFKA_SECURITY_PROTOCOL="SASL_SSL", **sasl)
    caplog.set_level(logging.DEBUG)
    start = time.monotonic()
    with pytest.raises(connection.ServiceUnavailable) as caught:
        connection.check_kafka(kafka, connect_timeout=CONNECT_TIMEOUT)
    assert time.monotonic() - start < CONNECT_TIMEOUT + 3
    line = one_line(caught.value)
    assert "\n" not in line and "KAFKA_SASL_*" in line
    assert "SaslAuthenticate" in caplog.text or "SaslHandshake" in caplog.text
    for secret in ("not-the-password", PASSWORD, TOKEN):
        assert secret not in caplog.text and secret not in line
