"""Throwaway TLS files for secured services: one CA, a server and a client certificate.

The one generator of the project (the secured local stack, the tests and ``deploy/``): an
EC P-256 CA, a server certificate it signs for *hosts* (subject alternative names: IP
addresses and DNS names, ``127.0.0.1`` and ``localhost`` by default) and a client certificate
for brokers and servers that demand one (mutual TLS). Valid for a few days; the keys are
written unencrypted, readable by their owner alone. For tests and local runs only::

    python -m crawler.localstack.certs DIR [--host kafka --host redis ...] [--days 7]
"""

from __future__ import annotations

import argparse
import ipaddress
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALID_DAYS = 7
DEFAULT_HOSTS = ("127.0.0.1", "localhost")
CLIENT_NAME = "crawler"


@dataclass(frozen=True)
class TlsFiles:
    """The files of one throwaway CA and the certificates it signed (PEM)."""

    ca_file: Path  # the CA certificate: what clients trust (tlsCAFile, ssl_ca_certs)
    cert_file: Path  # the server certificate
    key_file: Path  # its private key (unencrypted)
    pem_file: Path  # certificate then key in one file (mongod's --tlsCertificateKeyFile)
    client_cert_file: Path  # a client certificate (KAFKA_SSL_CERTFILE, ssl_certfile)
    client_key_file: Path  # its key (KAFKA_SSL_KEYFILE, ssl_keyfile)


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _write(path: Path, data: bytes, mode: int = 0o644) -> Path:
    path.write_bytes(data)
    os.chmod(path, mode)
    return path


def _builder(subject: str, issuer: str, key: ec.EllipticCurvePrivateKey,
             days: int) -> x509.CertificateBuilder:
    now = datetime.now(UTC)
    return (x509.CertificateBuilder().subject_name(_name(subject)).issuer_name(_name(issuer))
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - timedelta(hours=1))
            .not_valid_after(now + timedelta(days=days)))


def _alt_name(host: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        return x509.DNSName(host)


def _leaf(subject: str, ca_name: str, ca_key: ec.EllipticCurvePrivateKey, days: int,
          usage: list[x509.ObjectIdentifier], hosts: Sequence[str] = ()) -> tuple[bytes, bytes]:
    """A certificate (PEM) signed by the CA, and its key (PEM)."""
    key = ec.generate_private_key(ec.SECP256R1())
    builder = (_builder(subject, ca_name, key, days)
               .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
               .add_extension(x509.ExtendedKeyUsage(usage), critical=False))
    if hosts:
        builder = builder.add_extension(
            x509.SubjectAlternativeName([_alt_name(h) for h in hosts]), critical=False)
    cert = builder.sign(ca_key, hashes.SHA256())
    return cert.public_bytes(serialization.Encoding.PEM), _pem_key(key)


def make_tls_files(directory: Path, *, hosts: Sequence[str] = DEFAULT_HOSTS,
                   ca_name: str = "crawler local CA", days: int = VALID_DAYS) -> TlsFiles:
    """A new CA in *directory* (created if missing), a server certificate for *hosts* and a
    client certificate, all signed by it and valid for *days*."""
    directory.mkdir(parents=True, exist_ok=True)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (_builder(ca_name, ca_name, ca_key, days)
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False,
                                       False), critical=True)
          .sign(ca_key, hashes.SHA256()))
    # clientAuth too: a mongod replica-set member presents it when it connects to a member
    cert, key = _leaf(hosts[0], ca_name, ca_key, days, [ExtendedKeyUsageOID.SERVER_AUTH,
                                                  ExtendedKeyUsageOID.CLIENT_AUTH], hosts)
    client_cert, client_key = _leaf(CLIENT_NAME, ca_name, ca_key, days,
                                    [ExtendedKeyUsageOID.CLIENT_AUTH])
    return TlsFiles(
        ca_file=_write(directory / "ca.pem", ca.public_bytes(serialization.Encoding.PEM)),
        cert_file=_write(directory / "server.crt", cert),
        key_file=_write(directory / "server.key", key, 0o600),
        pem_file=_write(directory / "server.pem", cert + key, 0o600),
        client_cert_file=_write(directory / "client.crt", client_cert),
        client_key_file=_write(directory / "client.key", client_key, 0o600),
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m crawler.localstack.certs",
                                     description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("directory", type=Path)
    parser.add_argument("--host", action="append", dest="hosts",
                        help="a name or address of the server certificate (repeatable; "
                             f"default {' and '.join(DEFAULT_HOSTS)})")
    parser.add_argument("--days", type=int, default=VALID_DAYS,
                        help=f"validity (default {VALID_DAYS})")
    args = parser.parse_args(argv)
    files = make_tls_files(args.directory, hosts=args.hosts or DEFAULT_HOSTS, days=args.days)
    for name, path in vars(files).items():
        print(f"{name}: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
