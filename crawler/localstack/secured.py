"""The secured local stack: the three services as production secures them, one throwaway CA.

``python -m crawler.localstack.stack start --secured`` starts, on free loopback ports:

- Redis with TLS only (no plaintext port), client certificates required, one ACL user with a
  new password and the ``default`` user off (:mod:`crawler.localstack.secured_redis`);
- mongod with ``--auth`` and ``--keyFile``, TLS required, a single-node replica set and a
  ``crawler`` user with ``readWrite`` on its database (:mod:`crawler.localstack.secured_mongo`);
- Apache Kafka serving TLS itself (client certificates required) with SASL SCRAM-SHA-512
  logins and ACLs: one ``crawler`` user with a new password, allowed the crawl's topics and
  groups (:mod:`crawler.localstack.secure_kafka`).

It prints the settings, secrets included, as ``export`` lines for the user's shell; they are
kept (mode 600) in ``<dir>/secured/secured.json`` with the PIDs, so that ``env --secured``
prints them again and ``stop`` ends the processes (by PID, after checking what each runs).
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import subprocess
from pathlib import Path
from typing import Any

from crawler.localstack.certs import TlsFiles, make_tls_files
from crawler.localstack.secure_kafka import SCRAM, TlsKafka, allow_crawl, start_tls_kafka
from crawler.localstack.secured_mongo import SecuredMongo, start_secured_mongod
from crawler.localstack.secured_redis import SecuredRedis
from crawler.localstack.services import end_processes, runs_binary

logger = logging.getLogger(__name__)

RECORD = "secured.json"
# the settings whose values hold a password
SECRET_KEYS = ("REDIS_URL", "MONGO_URI", "KAFKA_SASL_PASSWORD")
KAFKA_USER = "crawler"


def secured_env(redis: SecuredRedis, mongo: SecuredMongo, kafka: TlsKafka,
                tls: TlsFiles) -> dict[str, str]:
    """The settings (environment variables) of a client of the three secured services."""
    return {
        "KAFKA_BOOTSTRAP_SERVERS": kafka.bootstrap,
        "KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
        "KAFKA_SASL_MECHANISM": SCRAM,
        "KAFKA_SASL_USERNAME": KAFKA_USER,
        "KAFKA_SASL_PASSWORD": kafka.users[KAFKA_USER],
        "KAFKA_SSL_CAFILE": str(tls.ca_file),
        "KAFKA_SSL_CERTFILE": str(tls.client_cert_file),
        "KAFKA_SSL_KEYFILE": str(tls.client_key_file),
        **redis.env(),
        "MONGO_URI": mongo.uri(),
    }


class SecuredStack:
    """The secured services of one directory; :meth:`start` and :meth:`stop` may repeat."""

    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory).absolute()
        self._running: list[Any] = []  # what this process started: stopped by handle
        self.secrets: dict[str, str] = {}

    @property
    def _record_path(self) -> Path:
        return self.directory / RECORD

    def _load(self) -> dict[str, Any]:
        try:
            record: dict[str, Any] = json.loads(self._record_path.read_text())
        except FileNotFoundError:
            return {}
        return record

    def start(self) -> dict[str, str]:
        """Start the three services (or keep the running ones); returns their settings."""
        if self._load() and all(s["alive"] for s in self.status().values()):
            return self.env()
        self.stop()
        self.directory.mkdir(parents=True, exist_ok=True)
        tls = make_tls_files(self.directory / "tls")
        try:
            redis = SecuredRedis(self.directory / "redis", client_certs="yes", pki=tls)
            self._running.append(redis.start())
            mongo = start_secured_mongod(self.directory / "mongo", tls=tls)
            self._running.append(mongo)
            kafka = start_tls_kafka(self.directory / "kafka", tls, client_certs=True,
                                    users={KAFKA_USER: secrets.token_urlsafe(18)})
            self._running.append(kafka)
            allow_crawl(kafka, KAFKA_USER, "*")
        except BaseException:
            self.stop()
            raise
        processes = {"redis": redis.process, "mongo": mongo.proc, "kafka": kafka.process}
        env = secured_env(redis, mongo, kafka, tls)
        self.secrets = {"redis": redis.password, "mongo": mongo.password,
                        "mongo-admin": mongo.admin_password, "kafka": kafka.users[KAFKA_USER]}
        self._save({"env": env, "secrets": self.secrets,
                    "processes": {name: _entry(proc) for name, proc in processes.items()}})
        return env

    def env(self) -> dict[str, str]:
        """The settings of the running secured services (empty if none were started)."""
        env: dict[str, str] = self._load().get("env", {})
        return env

    def passwords(self) -> list[str]:
        """Every password of the stack: what no log, stat or record may show."""
        return list(self._load().get("secrets", {}).values())

    def status(self) -> dict[str, dict[str, Any]]:
        """Per process: pid and whether it still runs its binary."""
        return {name: {"pid": e["pid"], "alive": runs_binary(e["pid"], e["binary"])}
                for name, e in self._load().get("processes", {}).items()}

    def stop(self) -> None:
        """Stop what this object started (by handle), then any recorded process still running
        its binary (SIGTERM, then SIGKILL), and forget the record."""
        for service in reversed(self._running):
            service.stop()
        self._running.clear()
        entries = list(self._load().get("processes", {}).values())
        end_processes(entries, lambda e: runs_binary(e["pid"], e["binary"]))
        self._record_path.unlink(missing_ok=True)

    def _save(self, record: dict[str, Any]) -> None:
        tmp = self._record_path.with_suffix(".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)  # it holds secrets
        with os.fdopen(fd, "w") as out:
            json.dump(record, out, indent=2)
        tmp.replace(self._record_path)


def _entry(proc: subprocess.Popen[bytes] | None) -> dict[str, Any]:
    if proc is None:
        raise RuntimeError("a secured service has no process")
    return {"pid": proc.pid, "binary": str(proc.args[0])}  # type: ignore[index]


def run_secured(stack: SecuredStack, command: str) -> dict[str, str]:
    """The local-stack command's verbs for the secured stack; returns what to export."""
    if command == "start":
        env = stack.start()
        logger.info("secured stack up: the settings below hold its passwords; keep them to "
                    "this shell (also in %s)", stack.directory / RECORD)
        return env
    if command == "env":
        return stack.env()
    if command == "stop":
        stack.stop()
    elif command == "status":
        for name, info in stack.status().items():
            print(f"secured {name:8} {info['pid']:>8}  {'yes' if info['alive'] else 'no'}")
    return {}
