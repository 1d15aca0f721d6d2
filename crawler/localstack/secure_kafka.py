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

The certificates come from :func:`crawler.localstack.certs.make_tls_files`; the binaries and
free ports from :mod:`crawler.localstack.services`.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from crawler.localstack.certs import TlsFiles, make_tls_files
from crawler.localstack.services import HOST, StackError, free_port, stop_process, tansu_binary


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
    pki: TlsFiles
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


def _stunnel_config(directory: Path, pki: TlsFiles, tls_port: int, plain_port: int, *,
                    client_certs: bool) -> Path:
    path = directory / "stunnel.conf"
    verify = ["verifyChain = yes", f"CAfile = {pki.ca_file}"] if client_certs else []
    path.write_text("\n".join([
        "foreground = yes", "pid =", "debug = 3", "[kafka]",
        f"accept = {HOST}:{tls_port}", f"connect = {HOST}:{plain_port}",
        f"cert = {pki.cert_file}", f"key = {pki.key_file}", *verify, ""]))
    return path


def start_tls_kafka(directory: Path, pki: TlsFiles | None = None, *, client_certs: bool = False,
                    authentication: bool = False, timeout: float = 20.0) -> TlsKafka:
    """Start Tansu (memory storage) on a free port and stunnel in front of it on another.

    *pki* defaults to new :func:`~crawler.localstack.certs.make_tls_files` in *directory*;
    with *client_certs*, stunnel accepts only clients with a certificate of its CA (mutual
    TLS); with *authentication*, Tansu demands a SASL login (which no client can pass: see
    the module's doc). Call
    :meth:`TlsKafka.stop`."""
    directory.mkdir(parents=True, exist_ok=True)
    pki = pki or make_tls_files(directory / "tls")
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
                    args, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                    start_new_session=True))  # outlives a local-stack command, not its ^C
            _wait_port(port, broker.processes[-1], what, log, deadline)
    except BaseException:
        broker.stop()
        raise
    return broker
