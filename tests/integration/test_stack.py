"""The local service stack: start, idempotence, one-service outages, stop."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis
from kafka import KafkaAdminClient
from pymongo import MongoClient
from pymongo.errors import OperationFailure
from scrapy.settings import Settings

from crawler.connections.clients import (
    ServiceUnavailable,
    check_kafka,
    quiet_client_logs,
    redis_sync_client,
)
from crawler.connections.options import KafkaOptions
from crawler.localstack import kafka_broker
from crawler.localstack.secured import SecuredStack
from crawler.localstack.stack import SERVICES, Stack, StackError


def _gone(pid: int) -> bool:
    """Whether *pid* no longer runs (exited; a zombie waiting for its reaper counts as gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] in ("Z", "X")


def _check_all_answer(env: dict[str, str]) -> None:
    with redis.Redis.from_url(env["REDIS_URL"]) as client:
        assert client.ping()
    admin = KafkaAdminClient(bootstrap_servers=env["KAFKA_BOOTSTRAP_SERVERS"],
                             request_timeout_ms=3000)
    try:
        assert isinstance(admin.list_topics(), list)
    finally:
        admin.close()
    with MongoClient(env["MONGO_URI"], serverSelectionTimeoutMS=3000) as client:
        assert client.admin.command("ping")["ok"] == 1


def test_start_restart_stop(own_stack: Stack) -> None:
    env = own_stack.start()
    assert set(env) == {"KAFKA_BOOTSTRAP_SERVERS", "REDIS_URL", "MONGO_URI"}
    assert env == own_stack.env()
    _check_all_answer(env)
    status = own_stack.status()
    assert set(status) == set(SERVICES)
    assert all(s["alive"] and s["answering"] for s in status.values())
    pids = {name: s["pid"] for name, s in status.items()}
    ports = {name: s["port"] for name, s in status.items()}
    assert len(set(ports.values())) == 3

    assert own_stack.start() == env  # idempotent: nothing restarted
    assert {name: s["pid"] for name, s in own_stack.status().items()} == pids
    # another Stack object (another process, in real life) sees the same services
    assert Stack(own_stack.directory).env() == env

    own_stack.stop()
    assert all(_gone(pid) for pid in pids.values())
    assert own_stack.status() == {}
    assert own_stack.env() == {}
    own_stack.stop()  # idempotent


@pytest.mark.parametrize("kill", [False, True], ids=["term", "kill"])
def test_service_outage_and_restart(own_stack: Stack, kill: bool) -> None:
    env = own_stack.start()
    with MongoClient(env["MONGO_URI"], w=1, journal=True) as client:
        client.test.things.insert_one({"_id": "kept"})
    before = own_stack.status()
    for name in SERVICES:
        own_stack.stop_service(name, kill=kill)
        status = own_stack.status()[name]
        assert not status["alive"] and not status["answering"]
        assert _gone(before[name]["pid"])
        own_stack.start_service(name)
        status = own_stack.status()[name]
        assert status["alive"] and status["answering"]
        assert status["port"] == before[name]["port"]
        assert status["pid"] != before[name]["pid"]
    assert own_stack.env() == env
    _check_all_answer(env)
    with MongoClient(env["MONGO_URI"]) as client:  # same data dir: journaled data survives
        assert client.test.things.find_one({"_id": "kept"}) is not None


def test_dead_service_is_restarted_by_start(own_stack: Stack) -> None:
    own_stack.start(["redis"])
    port = own_stack.status()["redis"]["port"]
    own_stack.stop_service("redis", kill=True)
    assert own_stack.start(["redis"]) == {"REDIS_URL": f"redis://127.0.0.1:{port}/0"}
    assert own_stack.status()["redis"]["answering"]


def test_failed_start_reports_the_log(own_stack: Stack) -> None:
    own_stack.start(["redis"])
    port = own_stack.status()["redis"]["port"]
    own_stack.stop_service("redis")
    blocker = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1",
                                "--save", "", "--daemonize", "no"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_for_redis(port)
        with pytest.raises(StackError, match=f"port {port} is taken"):
            own_stack.start_service("redis")
    finally:
        blocker.terminate()
        blocker.wait(10)


def _wait_for_redis(port: int) -> None:
    deadline = time.monotonic() + 10
    while True:
        try:
            with redis.Redis(port=port) as client:
                client.ping()
            return
        except redis.ConnectionError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def test_cli(tmp_path: Path) -> None:
    root = Path(__file__).resolve().parents[2]
    directory = str(tmp_path / "st")

    def cli(*args: str) -> str:
        argv = [sys.executable, "-m", "crawler.localstack.stack", *args, "--dir", directory]
        return subprocess.run(argv, check=True, cwd=root, capture_output=True, text=True,
                              timeout=60).stdout

    try:
        out = cli("start", "--services", "redis")
        assert out.startswith("export REDIS_URL=redis://127.0.0.1:")
        assert cli("env") == out
        status = cli("status")
        assert "redis" in status and "yes" in status
    finally:
        cli("stop")
    assert Stack(Path(directory)).status() == {}


def _exports(out: str) -> dict[str, str]:
    env: dict[str, str] = {}
    for line in out.splitlines():
        name, _, value = line.removeprefix("export ").partition("=")
        env[name] = shlex.split(value)[0]
    return env


def test_cli_secured(tmp_path: Path) -> None:
    """``start --secured``: the printed settings reach each service; a client without them
    is refused; ``env --secured`` prints them again; ``stop`` ends every process by PID."""
    root = Path(__file__).resolve().parents[2]
    directory = tmp_path / "st"

    def cli(*args: str) -> str:
        argv = [sys.executable, "-m", "crawler.localstack.stack", *args, "--dir", str(directory)]
        return subprocess.run(argv, check=True, cwd=root, capture_output=True, text=True,
                              timeout=180).stdout

    try:
        out = cli("start", "--secured")
        env = _exports(out)
        assert cli("env", "--secured") == out
        assert (directory / "secured" / "secured.json").stat().st_mode & 0o077 == 0
        pids = [info["pid"] for info in SecuredStack(directory / "secured").status().values()]
        assert len(pids) == 3 and "secured redis" in cli("status")
        settings = Settings(env)
        with redis_sync_client(env["REDIS_URL"], json.loads(env["REDIS_PARAMS"])) as client:
            assert client.ping()
        check_kafka(KafkaOptions.from_settings(settings), connect_timeout=5)
        with MongoClient(env["MONGO_URI"], serverSelectionTimeoutMS=10000) as client:
            client.crawler.probe.insert_one({"ok": 1})  # the crawler user may write
        with pytest.raises(redis.ConnectionError):  # no plaintext, no anonymous user
            redis.Redis(port=int(env["REDIS_URL"].rsplit(":", 1)[1].split("/")[0]),
                        socket_timeout=3).ping()
        with quiet_client_logs(), pytest.raises(ServiceUnavailable):  # plaintext to TLS
            check_kafka(env["KAFKA_BOOTSTRAP_SERVERS"], connect_timeout=3)
        anonymous = re.sub(r"//[^@]+@", "//", env["MONGO_URI"])
        with MongoClient(anonymous, serverSelectionTimeoutMS=10000) as client, \
                pytest.raises(OperationFailure):
            client.crawler.probe.find_one()
    finally:
        cli("stop")
    assert all(_gone(pid) for pid in pids)
    assert SecuredStack(directory / "secured").env() == {}


def test_the_broker_runs_on_the_class_archive_built_at_install(stack: Stack) -> None:
    """``./run`` builds the archive (``kafka_broker install``); a broker that had silently
    dropped it (another JVM, a changed class path) would start on three times the CPU."""
    archive = kafka_broker.class_archive()
    assert archive.exists(), "python -m crawler.localstack.kafka_broker install builds it"
    pid = stack.status()["kafka"]["pid"]
    assert str(archive) in Path(f"/proc/{pid}/maps").read_text()
