"""Throwaway TLS files for the local stack's secured services: a CA and a server certificate.

Made with ``cryptography`` (a dependency of Scrapy): an EC P-256 CA and a server certificate
that it signs for the loopback address (subject alternative names ``127.0.0.1`` and
``localhost``), valid for a few days. For tests and local runs only: the keys are written
unencrypted, readable by their owner alone.
"""

from __future__ import annotations

import ipaddress
import os
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALID_DAYS = 7


@dataclass(frozen=True)
class TlsFiles:
    """The files of one throwaway CA and the server certificate it signed."""

    ca_file: Path  # the CA certificate (PEM): what clients trust (tlsCAFile, ssl_ca_certs)
    cert_file: Path  # the server certificate (PEM)
    key_file: Path  # its private key (PEM, unencrypted)
    pem_file: Path  # certificate then key in one file (mongod's --tlsCertificateKeyFile)


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _write(path: Path, data: bytes, mode: int = 0o644) -> Path:
    path.write_bytes(data)
    os.chmod(path, mode)
    return path


def _builder(subject: str, issuer: str, key: ec.EllipticCurvePrivateKey) -> x509.CertificateBuilder:
    now = datetime.now(UTC)
    return (x509.CertificateBuilder().subject_name(_name(subject)).issuer_name(_name(issuer))
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - timedelta(hours=1))
            .not_valid_after(now + timedelta(days=VALID_DAYS)))


def make_tls_files(directory: Path, *, host: str = "127.0.0.1",
                   ca_name: str = "crawler local CA") -> TlsFiles:
    """A new CA and a server certificate for *host* in *directory* (created if missing)."""
    directory.mkdir(parents=True, exist_ok=True)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (_builder(ca_name, ca_name, ca_key)
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False,
                                       False), critical=True)
          .sign(ca_key, hashes.SHA256()))
    key = ec.generate_private_key(ec.SECP256R1())
    names: list[x509.GeneralName] = [x509.DNSName("localhost")]
    names.append(x509.IPAddress(ipaddress.ip_address(host)))
    cert = (_builder(host, ca_name, key)
            .add_extension(x509.SubjectAlternativeName(names), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH,
                                                  ExtendedKeyUsageOID.CLIENT_AUTH]),
                           critical=False)
            .sign(ca_key, hashes.SHA256()))
    cert_pem = cert.public_bytes(serialization.Encoding.PEM)
    return TlsFiles(
        ca_file=_write(directory / "ca.pem", ca.public_bytes(serialization.Encoding.PEM)),
        cert_file=_write(directory / "server.crt", cert_pem),
        key_file=_write(directory / "server.key", _pem_key(key), 0o600),
        pem_file=_write(directory / "server.pem", cert_pem + _pem_key(key), 0o600),
    )
