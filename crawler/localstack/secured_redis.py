"""A secured redis-server for tests and the secured local stack: an ACL user and TLS only.

:class:`SecuredRedis` runs Debian's ``redis-server`` with no plaintext port, a TLS port with
certificates of a throwaway CA (:mod:`crawler.localstack.certs`), one ACL user with every
right and the ``default`` user off, so that no unauthenticated client gets in.
"""

from __future__ import annotations

import json
import secrets
import subprocess
import time
from pathlib import Path

from crawler.localstack.certs import TlsFiles, make_tls_files
from crawler.localstack.services import HOST, StackError, free_port, redis_binary, stop_process

SECURED_USER = "crawler"


def secured_redis_args(port: int, pki: TlsFiles, data: Path, *, user: str, password: str,
                       client_certs: str = "optional") -> list[str]:
    """redis-server's arguments: TLS on *port* and no plaintext port, one ACL user with every
    right, the default user off (no unauthenticated client), no persistence.

    *client_certs* is ``--tls-auth-clients``: ``yes`` demands a client certificate signed
    by the CA, ``optional`` checks one if the client offers it, ``no`` ignores it."""
    return [
        "--port", "0", "--tls-port", str(port), "--bind", HOST,
        "--tls-cert-file", str(pki.cert_file), "--tls-key-file", str(pki.key_file),
        "--tls-ca-cert-file", str(pki.ca_file), "--tls-auth-clients", client_certs,
        "--user", user, "on", f">{password}", "~*", "&*", "+@all", "--user", "default", "off",
        "--save", "", "--appendonly", "no", "--dir", str(data), "--daemonize", "no",
    ]


def secured_redis_params(pki: TlsFiles, *, client_cert: bool = True) -> dict[str, str]:
    """``REDIS_PARAMS`` of a client of :func:`secured_redis_args`: the CA, the client cert."""
    params = {"ssl_ca_certs": str(pki.ca_file), "ssl_cert_reqs": "required"}
    if client_cert:
        params.update(ssl_certfile=str(pki.client_cert_file),
                      ssl_keyfile=str(pki.client_key_file))
    return params


class SecuredRedis:
    """A redis-server of :func:`secured_redis_args` in *directory*; a context manager.

    :attr:`url` (``rediss://user:password@HOST:port/0``) and :attr:`params` are the
    ``REDIS_URL`` and ``REDIS_PARAMS`` of a client that may in; :meth:`env` gives both.
    The password is new for every instance unless given; *pki* defaults to a new CA.
    """

    def __init__(self, directory: Path, *, client_certs: str = "optional",
                 user: str = SECURED_USER, password: str | None = None,
                 pki: TlsFiles | None = None) -> None:
        self.directory = Path(directory).absolute()
        self.client_certs, self.user = client_certs, user
        self.password = password or secrets.token_urlsafe(18)
        self.pki = pki or make_tls_files(self.directory / "pki")
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

    def start(self, timeout: float = 30.0, port: int | None = None) -> SecuredRedis:
        data = self.directory / "data"
        data.mkdir(parents=True, exist_ok=True)
        self.port = port or free_port()
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
