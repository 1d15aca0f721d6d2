"""A Kafka broker behind TLS, for tests: Tansu (plaintext, memory storage) with stunnel in front.

Tansu 0.6 cannot serve TLS itself: its ``--cert`` and ``--key`` options exclude each other
(``error: the argument '--cert <CERT>' cannot be used with '--key <KEY>'``), and with
``--cert`` alone it still answers in plaintext. So stunnel terminates TLS and forwards to
Tansu on a second loopback port; Tansu advertises the stunnel address
(``--advertised-listener-url``), so that clients reconnect through TLS after the metadata
request. Tansu's own port stays reachable in plaintext on the loopback interface.

Tansu's ``--authentication`` demands a SASL login before any other request, but no login
can succeed: it offers SCRAM-SHA-512, SCRAM-SHA-256 and OAUTHBEARER (not PLAIN); a SCRAM
user must be created with ``tansu user create`` (AlterUserScramCredentials), which an
authenticating broker refuses (NotAuthenticated) and which the only storage of this build
(memory://, s3://) does not keep across a restart; an OAUTHBEARER token is refused with
SASL_AUTHENTICATION_FAILED. So it serves to test the refusal only.

:func:`throwaway_ca` makes a CA and a server certificate for 127.0.0.1 and localhost with
python ``cryptography``. Self-contained: only the binaries and free ports of
:mod:`crawler.localstack.services`.
"""

from __future__ import annotations

import datetime
import ipaddress
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from crawler.localstack.services import HOST, StackError, free_port, stop_process, tansu_binary


@dataclass(frozen=True)
class Pki:
    """PEM files: the CA's certificate, the server's certificate and key, and a client's."""

    ca_file: Path
    cert_file: Path
    key_file: Path
    client_cert_file: Path
    client_key_file: Path


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _certificate(subject: str, key: ec.EllipticCurvePrivateKey, issuer: x509.Name | None,
                 issuer_key: ec.EllipticCurvePrivateKey, *, ca: bool) -> x509.Certificate:
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)])
    now = datetime.datetime.now(datetime.UTC)
    builder = (x509.CertificateBuilder().subject_name(name).issuer_name(issuer or name)
               .public_key(key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(now - datetime.timedelta(minutes=5))
               .not_valid_after(now + datetime.timedelta(days=2))
               .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
    if not ca:
        builder = builder.add_extension(x509.SubjectAlternativeName(
            [x509.IPAddress(ipaddress.ip_address(HOST)), x509.DNSName("localhost")]),
            critical=False)
    return builder.sign(issuer_key, hashes.SHA256())


def throwaway_ca(directory: Path, name: str = "crawler-test-ca") -> Pki:
    """A new CA in *directory*, a server certificate it signed for 127.0.0.1/localhost and
    a client certificate (for brokers that ask clients for one)."""
    directory.mkdir(parents=True, exist_ok=True)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_cert = _certificate(name, ca_key, None, ca_key, ca=True)
    pki = Pki(directory / f"{name}.pem", directory / "server.pem", directory / "server.key",
              directory / "client.pem", directory / "client.key")
    pki.ca_file.write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    for subject, cert_file, key_file in ((HOST, pki.cert_file, pki.key_file),
                                         ("crawler-client", pki.client_cert_file,
                                          pki.client_key_file)):
        key = ec.generate_private_key(ec.SECP256R1())
        cert = _certificate(subject, key, ca_cert.subject, ca_key, ca=False)
        cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        key_file.write_bytes(_key_pem(key))
        key_file.chmod(0o600)
    return pki


def stunnel_binary() -> str:
    path = shutil.which("stunnel4") or shutil.which("stunnel")
    if path is None:
        raise StackError("stunnel is not on PATH: `apt-get install -y stunnel4`")
    return path


@dataclass
class TlsKafka:
    """A running Tansu behind stunnel: ``bootstrap`` is the TLS address."""

    bootstrap: str
    plain_port: int
    pki: Pki
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def stop(self) -> None:
        """Stop the processes this object started (by their own handles only)."""
        for process in reversed(self.processes):
            stop_process(process, 5)
        self.processes.clear()


def _wait_port(port: int, process: subprocess.Popen[bytes], what: str, log: Path,
               deadline: float) -> None:
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise StackError(f"{what} exited ({process.returncode}): {log.read_text()[-800:]}")
        with socket.socket() as sock:
            sock.settimeout(0.5)
            if sock.connect_ex((HOST, port)) == 0:
                return
        time.sleep(0.05)
    raise StackError(f"{what} did not listen on {HOST}:{port} in time")


def _stunnel_config(directory: Path, pki: Pki, tls_port: int, plain_port: int, *,
                    client_certs: bool) -> Path:
    path = directory / "stunnel.conf"
    verify = ["verifyChain = yes", f"CAfile = {pki.ca_file}"] if client_certs else []
    path.write_text("\n".join([
        "foreground = yes", "pid =", "debug = 3", "[kafka]",
        f"accept = {HOST}:{tls_port}", f"connect = {HOST}:{plain_port}",
        f"cert = {pki.cert_file}", f"key = {pki.key_file}", *verify, ""]))
    return path


def start_tls_kafka(directory: Path, pki: Pki | None = None, *, client_certs: bool = False,
                    authentication: bool = False, timeout: float = 20.0) -> TlsKafka:
    """Start Tansu (memory storage) on a free port and stunnel in front of it on another.

    *pki* defaults to a :func:`throwaway_ca` in *directory*; with *client_certs*, stunnel
    accepts only clients with a certificate of its CA (mutual TLS); with *authentication*,
    Tansu demands a SASL login (which no client can pass: see the module's doc). Call
    :meth:`TlsKafka.stop`."""
    directory.mkdir(parents=True, exist_ok=True)
    pki = pki or throwaway_ca(directory)
    plain_port = free_port()
    tls_port = free_port(exclude=[plain_port])
    broker = TlsKafka(f"{HOST}:{tls_port}", plain_port, pki)
    deadline = time.monotonic() + timeout
    try:
        for what, args, port in (
            ("tansu", [tansu_binary(), "broker", "--listener-url", f"tcp://{HOST}:{plain_port}",
                       "--advertised-listener-url", f"tcp://{HOST}:{tls_port}",
                       "--storage-engine", "memory://tansu/",
                       *(["--authentication"] if authentication else [])], plain_port),
            ("stunnel", [stunnel_binary(),
                         str(_stunnel_config(directory, pki, tls_port, plain_port,
                                              client_certs=client_certs))], tls_port),
        ):
            log = directory / f"{what}.log"
            with log.open("wb") as out:
                broker.processes.append(subprocess.Popen(
                    args, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL))
            _wait_port(port, broker.processes[-1], what, log, deadline)
    except BaseException:
        broker.stop()
        raise
    return broker
