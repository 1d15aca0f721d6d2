"""Apache Kafka serving TLS itself, with SASL logins and ACLs when asked, for the secured stack
and the tests.

One KRaft node (:mod:`crawler.localstack.kafka_broker`) with two listeners:

- ``SECURE`` on ``bootstrap``: TLS (``SSL``), with client certificates required when asked
  (``client_certs``), or ``SASL_SSL`` when users are given (``users``): SCRAM-SHA-512 for
  them (created when the node is formatted) and PLAIN with the same names and passwords.
  With users the broker authorizes (``StandardAuthorizer``): a user may do only what an ACL
  allows (:func:`allow_crawl`);
- ``INTERNAL``, plaintext on its own loopback port, for the controller and for the test that
  administers the broker (ACLs). It is the broker's super user: it is bound to 127.0.0.1 and
  is the local operator's door, as a production cluster's internal listener is.

The certificates come from :func:`crawler.localstack.certs.make_tls_files`.
"""

from __future__ import annotations

import contextlib
import subprocess
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from kafka import KafkaAdminClient
from kafka.admin import (
    ACL,
    ACLOperation,
    ACLPermissionType,
    ACLResourcePatternType,
    ResourcePattern,
    ResourceType,
)

from crawler.localstack import kafka_broker as kb
from crawler.localstack.certs import TlsFiles, make_tls_files
from crawler.localstack.services import HOST, SPECS, StackError, free_port, stop_process

SCRAM = "SCRAM-SHA-512"


@dataclass
class TlsKafka:
    """A running Apache Kafka node: ``bootstrap`` is its TLS (or SASL_SSL) address,
    ``internal`` its plaintext super-user address on loopback."""

    bootstrap: str
    internal: str
    pki: TlsFiles
    process: subprocess.Popen[bytes] | None = None
    users: dict[str, str] = field(default_factory=dict)

    def stop(self) -> None:
        """Stop the process this object started (by its own handle only)."""
        if self.process is not None:
            stop_process(self.process, 10)
            self.process = None

    @contextlib.contextmanager
    def admin(self) -> Iterator[KafkaAdminClient]:
        """An admin client on the super-user listener."""
        client = KafkaAdminClient(bootstrap_servers=self.internal, request_timeout_ms=10000)
        try:
            yield client
        finally:
            client.close()


def _secure_settings(pki: TlsFiles, data: Path, client_certs: bool,
                     users: Mapping[str, str]) -> dict[str, str]:
    keystore = data / "keystore.pem"  # Kafka's PEM keystore: PKCS#8 key and chain, one file
    keystore.write_bytes(pki.key_file.read_bytes() + pki.cert_file.read_bytes())
    keystore.chmod(0o600)
    settings = {
        "ssl.keystore.type": "PEM", "ssl.keystore.location": str(keystore),
        "ssl.truststore.type": "PEM", "ssl.truststore.location": str(pki.ca_file),
        # with the listener's prefix: on a SASL_SSL listener the bare setting is ignored (KIP-684)
        "listener.name.secure.ssl.client.auth": "required" if client_certs else "none",
        "ssl.endpoint.identification.algorithm": "",
    }
    if users:
        plain_users = " ".join(f'user_{name}="{pw}"' for name, pw in users.items())
        settings |= {
            "sasl.enabled.mechanisms": f"{SCRAM},PLAIN",
            "listener.name.secure.scram-sha-512.sasl.jaas.config":
                "org.apache.kafka.common.security.scram.ScramLoginModule required;",
            "listener.name.secure.plain.sasl.jaas.config":
                f"org.apache.kafka.common.security.plain.PlainLoginModule required {plain_users};",
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "super.users": "User:ANONYMOUS",  # the INTERNAL and CONTROLLER listeners
        }
    return settings


def start_tls_kafka(directory: Path, pki: TlsFiles | None = None, *, client_certs: bool = False,
                    users: Mapping[str, str] | None = None,
                    timeout: float = 60.0) -> TlsKafka:
    """Start one Apache Kafka node serving TLS on a free port (see the module's doc).

    *pki* defaults to new :func:`~crawler.localstack.certs.make_tls_files` in *directory*;
    *client_certs* makes it require a client certificate of that CA (mutual TLS); *users*
    (name -> password) makes the listener SASL_SSL with authorization on. Call
    :meth:`TlsKafka.stop`."""
    directory.mkdir(parents=True, exist_ok=True)
    pki = pki or make_tls_files(directory / "tls")
    users = dict(users or {})
    ports = [free_port()]
    while len(ports) < 3:
        ports.append(free_port(exclude=ports))
    secure, internal, controller = ports
    node = kb.NodeConfig(
        1, [kb.Listener("INTERNAL", internal),
            kb.Listener("SECURE", secure, "SASL_SSL" if users else "SSL")],
        controller, {1: controller}, directory / "node",
        extra=_secure_settings(pki, directory, client_certs, users))
    kb.write_config(node)
    kb.format_storage(node, kb.new_cluster_id(),
                      [f"{SCRAM}=[name={n},password={p}]" for n, p in users.items()])
    broker = TlsKafka(f"{HOST}:{secure}", f"{HOST}:{internal}", pki, users=users)
    log = directory / "kafka.log"
    with log.open("ab") as out:
        broker.process = subprocess.Popen(
            kb.broker_argv(node), stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True)  # outlives a local-stack command, not its ^C
    try:
        _wait_ready(broker, internal, log, time.monotonic() + timeout)
    except BaseException:
        broker.stop()
        raise
    return broker


def _wait_ready(broker: TlsKafka, internal_port: int, log: Path, deadline: float) -> None:
    """Wait until the plaintext listener answers the local stack's own Kafka probe."""
    error: Exception | None = None
    while time.monotonic() < deadline:
        if broker.process is None or broker.process.poll() is not None:
            raise StackError(f"kafka exited while starting: {log.read_text()[-800:]}")
        try:
            SPECS["kafka"].probe(internal_port)
            return
        except Exception as exc:
            error = exc
        time.sleep(0.2)
    raise StackError(f"kafka did not answer on {broker.internal} in time ({error!r}); "
                     f"{log} ends with:\n{log.read_text()[-800:]}")


def crawl_acls(user: str, prefix: str, *, write: bool = True) -> list[ACL]:
    """What a crawl's worker needs, and no more: every operation on the topics and groups
    whose names start with *prefix* (the crawl id), or every one for ``"*"``; with
    ``write=False``, read-only topics."""
    principal = f"User:{user}"
    topic_ops = [ACLOperation.ALL] if write else [ACLOperation.READ, ACLOperation.DESCRIBE,
                                                   ACLOperation.DESCRIBE_CONFIGS]
    patterns = [(ResourceType.TOPIC, op) for op in topic_ops] + [
        (ResourceType.GROUP, ACLOperation.ALL)]
    shape = ACLResourcePatternType.LITERAL if prefix == "*" else ACLResourcePatternType.PREFIXED
    return [ACL(principal, "*", op, ACLPermissionType.ALLOW, ResourcePattern(kind, prefix, shape))
            for kind, op in patterns]


def allow_crawl(broker: TlsKafka, user: str, prefix: str, *, write: bool = True) -> None:
    """Grant *user* what a crawl whose topics and groups start with *prefix* needs."""
    with broker.admin() as admin:
        result = admin.create_acls(crawl_acls(user, prefix, write=write))
    failed = result.get("failed") if isinstance(result, dict) else None
    if failed:
        raise StackError(f"ACLs for {user} were refused: {failed}")
