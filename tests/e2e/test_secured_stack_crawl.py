"""A three-worker crawl through the secured local stack, and no password anywhere it writes.

The stack (:class:`crawler.localstack.secured.SecuredStack`, what ``python -m
crawler.localstack.stack start --secured`` starts): Redis with TLS only, client certificates
and an ACL user; mongod with ``--auth``, ``--keyFile``, TLS required and a replica set; Apache
Kafka serving TLS with client certificates, SCRAM-SHA-512 logins and ACLs. The workers,
``scrapy seed``, ``scrapy cluster status`` and ``scrapy cluster dashboard`` get only its
settings (the environment it prints). Afterwards every log, stats dump, heartbeat and other
Redis value of the crawl, metrics page, dashboard answer, Kafka record and MongoDB document is
searched for the passwords and the client key. A wrong password (or certificate) for each
service ends ``scrapy crawl`` in one line; so does a Kafka user the ACLs allow only to read.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any
from urllib.parse import quote_plus

import pytest
from helpers import tracebacks_outside_kafka, wait_until
from kafka import KafkaConsumer, TopicPartition
from pymongo import MongoClient
from scrapy.settings import Settings
from test_startup_errors import START, crawl, the_one_error

from crawler.connections.clients import kafka_config, redis_sync_client
from crawler.connections.options import KafkaOptions
from crawler.localstack.demo import running, stored_pages, wait_all, worker_command, worker_logs
from crawler.localstack.secure_kafka import allow_crawl, start_tls_kafka
from crawler.localstack.secured import SecuredStack

pytestmark = pytest.mark.e2e
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def secured(secured_stack: SecuredStack) -> SecuredStack:
    return secured_stack


def secrets_of(stack: SecuredStack) -> list[str]:
    """The passwords and the body of the client's private key."""
    key = Path(stack.env()["KAFKA_SSL_KEYFILE"]).read_text().splitlines()
    return [*stack.passwords(), *(line for line in key if "-----" not in line)]


def scrapy_env(stack: SecuredStack, crawl_id: str) -> dict[str, str]:
    service_vars = re.compile(r"^(KAFKA|REDIS|MONGO)_")  # only what the stack printed
    clean = {k: v for k, v in os.environ.items() if not service_vars.match(k)}
    return {**clean, **stack.env(), "CRAWL_ID": crawl_id,
            "SCRAPY_SETTINGS_MODULE": "crawler.settings"}


def scrapy(env: dict[str, str], *args: str) -> tuple[str, str]:
    """(stdout, stderr) of a ``scrapy`` command that must succeed."""
    proc = subprocess.run([sys.executable, "-m", "scrapy", *args], env=env, cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout, proc.stderr


def heartbeats(env: dict[str, str], crawl_id: str) -> list[dict[str, Any]]:
    with redis_sync_client(env["REDIS_URL"], json.loads(env["REDIS_PARAMS"])) as client:
        return [json.loads(v) for v in client.hgetall(f"{{{crawl_id}}}:workers").values()]


def redis_values(env: dict[str, str], crawl_id: str) -> bytes:
    """Every key of the crawl and its value, whatever the type, as one blob."""
    out: list[bytes] = []
    with redis_sync_client(env["REDIS_URL"], json.loads(env["REDIS_PARAMS"])) as client:
        for key in client.scan_iter(match=f"{{{crawl_id}}}:*"):
            kind = client.type(key).decode()
            value: Any = {"string": client.get, "hash": client.hgetall,
                          "set": client.smembers, "list": lambda k: client.lrange(k, 0, -1),
                          "zset": lambda k: client.zrange(k, 0, -1, withscores=True),
                          }.get(kind, lambda k: b"")(key)
            out += [key, repr(value).encode()]
    return b"\n".join(out)


def kafka_records(env: dict[str, str], crawl_id: str) -> bytes:
    """Every record (key and value) of the crawl's topics, read over TLS."""
    kafka = KafkaOptions.from_settings(Settings(env))
    consumer = KafkaConsumer(**kafka_config(KafkaConsumer, kafka, 10.0,
                                            enable_auto_commit=False))
    try:
        topics = [t for t in consumer.topics() if t.startswith(f"{crawl_id}.")]
        parts = [TopicPartition(t, p) for t in topics
                 for p in consumer.partitions_for_topic(t) or ()]
        consumer.assign(parts)
        consumer.seek_to_beginning()
        ends = consumer.end_offsets(parts)
        out: list[bytes] = []
        deadline = time.monotonic() + 60
        while any(consumer.position(p) < ends[p] for p in parts):
            assert time.monotonic() < deadline, "the crawl's topics did not read to their end"
            for records in consumer.poll(500).values():
                out += [r.key or b"" for r in records] + [r.value or b"" for r in records]
    finally:
        consumer.close()
    assert topics and out, topics
    return b"\n".join(out)


def mongo_documents(env: dict[str, str]) -> bytes:
    with MongoClient(env["MONGO_URI"], serverSelectionTimeoutMS=10000) as client:
        database = client["crawler"]
        return json.dumps([doc for name in database.list_collection_names()
                           for doc in database[name].find({}, {"_id": 0})],
                          default=str).encode()


def get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as response:
        body: bytes = response.read()
    return body.decode()


def dashboard_answers(env: dict[str, str], crawl_id: str) -> str:
    """``/api/status`` of ``scrapy cluster dashboard``, once it shows a worker."""
    dash = subprocess.Popen([sys.executable, "-m", "scrapy", "cluster", "dashboard", crawl_id,
                             "--port", "0"], env=env, cwd=REPO, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        assert dash.stdout is not None
        lines: list[str] = []
        for line in dash.stdout:  # the URL is its first line of output
            lines.append(line)
            if match := re.match(r"Dashboard: (http://127\.0\.0\.1:\d+/)$", line.strip()):
                break
        else:
            raise AssertionError("".join(lines))
        answers = [get(match.group(1)), get(match.group(1) + "api/status")]
        wait_until(lambda: bool(json.loads(answers.append(get(match.group(1) + "api/status"))
                                           or answers[-1])["nodes"]), 30, "a node")
        return "\n".join([*lines, *answers])
    finally:
        dash.terminate()  # by PID
        dash.wait(10)


def test_three_workers_crawl_through_the_secured_stack_and_no_secret_leaks(
        secured: SecuredStack, demo_site: str, demo_site_pages: int, crawl_id: str,
        tmp_path: Path) -> None:
    env = scrapy_env(secured, crawl_id)
    # METRICS_ENABLED: the exporter is off by default (it opens a port); its pages are
    # scanned here.
    # CRAWL_IDLE_TIMEOUT: the workers must outlive the five commands below, each a Python
    # start of 3-10 s under CI's load; with the default 30 s after the drain, CI saw every
    # worker gone before the dashboard ran. What a worker does at the end is the same.
    cmd = worker_command(demo_site + "/", {"METRICS_ENABLED": True, "CRAWL_IDLE_TIMEOUT": 120})
    seen: list[str] = []
    with running(3, cmd, env, tmp_path / "logs") as workers:
        wait_until(lambda: len(beats := heartbeats(env, crawl_id)) == 3
                   and sum(b["info"]["acked"] for b in beats) > 0, 120, "acked pages")
        # the exporters first, while all three workers are sure to be up: in a run on a
        # slow machine two had drained and left by the time the commands below were done
        metrics = [get(f"http://127.0.0.1:{beat['info']['metrics_port']}/metrics")
                   for beat in heartbeats(env, crawl_id)]
        assert len(metrics) == 3 and all("crawler_" in page for page in metrics)
        seen += metrics
        seen.append(json.dumps(heartbeats(env, crawl_id)))
        out, err = scrapy(env, "seed", "site", demo_site + "/?from=seed")
        assert "1 seeds published" in out, out + err
        seen += [out, err]
        out, err = scrapy(env, "cluster", "status", crawl_id, "--json")
        status = json.loads(out)
        assert len(status["nodes"]) == 3 and status["dedup"]["items"] > 0, out
        seen += [out, err, "\n".join(scrapy(env, "cluster", "status", crawl_id))]
        seen.append(dashboard_answers(env, crawl_id))
        codes = wait_all(workers, timeout=300)
        log = worker_logs(workers)
    assert codes == [0, 0, 0], log[-3000:]
    assert log.count("'finish_reason': 'finished'") == 3, log[-3000:]
    assert not tracebacks_outside_kafka(log), log[-3000:]
    assert stored_pages(env["MONGO_URI"], "crawler", crawl_id) == (demo_site_pages + 1,) * 2
    blobs = {"worker logs": log.encode(), "commands, dashboard, metrics": "\n".join(seen).encode(),
             "redis": redis_values(env, crawl_id), "kafka": kafka_records(env, crawl_id),
             "mongo": mongo_documents(env)}
    for secret in secrets_of(secured):
        for variant in {secret, quote_plus(secret)}:
            leaks = [where for where, blob in blobs.items() if variant.encode() in blob]
            assert not leaks, f"a secret is in the {leaks}"


def wrong(env: dict[str, str], service: str, tmp_path: Path) -> tuple[dict[str, str], str]:
    """*env* with one service's credentials wrong; the setting the error must name."""
    if service == "redis":
        return {**env, "REDIS_URL": re.sub(r":[^:@]+@", ":not-the-password@",
                                           env["REDIS_URL"])}, "REDIS_URL"
    if service == "mongo":
        return {**env, "MONGO_URI": re.sub(r":[^:@/]+@", ":not-the-password@",
                                           env["MONGO_URI"])}, "MONGO_URI"
    if service == "kafka-certificate":  # the broker demands a client certificate
        return {k: v for k, v in env.items()
                if k not in ("KAFKA_SSL_CERTFILE", "KAFKA_SSL_KEYFILE")}, "KAFKA_BOOTSTRAP_SERVERS"
    if service == "kafka-password":  # the SCRAM-SHA-512 login is refused
        return {**env, "KAFKA_SASL_PASSWORD": "not-the-password"}, "KAFKA_BOOTSTRAP_SERVERS"
    raise AssertionError(service)


@pytest.mark.parametrize("service", ["redis", "mongo", "kafka-certificate", "kafka-password"])
def test_a_wrong_credential_ends_the_worker_in_one_line(
        secured: SecuredStack, service: str, crawl_id: str, tmp_path: Path) -> None:
    env, setting = wrong(secured.env(), service, tmp_path)
    code, out, elapsed = crawl({**env, "CRAWL_ID": crawl_id}, *START, "-s", "CONNECT_TIMEOUT=3")
    line = the_one_error(code, out)
    assert f"Cannot reach the service of {setting} at " in line, line
    assert elapsed < 30, elapsed
    for secret in [*secrets_of(secured), "not-the-password"]:
        assert secret not in out


def test_a_kafka_user_without_write_acls_ends_the_worker_in_one_line(
        secured: SecuredStack, crawl_id: str, tmp_path: Path) -> None:
    """A user that logs in (SCRAM-SHA-512 over TLS) but whose ACLs allow it only to read the
    crawl's topics: the broker refuses to create them, and the worker says so in one line
    naming the user and the ACLs it needs."""
    password = "a-reader-password"
    broker = start_tls_kafka(tmp_path / "sasl-kafka", users={"reader": password})
    env = {**secured.env(), "KAFKA_BOOTSTRAP_SERVERS": broker.bootstrap,
           "KAFKA_SSL_CAFILE": str(broker.pki.ca_file), "KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
           "KAFKA_SASL_MECHANISM": "SCRAM-SHA-512", "KAFKA_SASL_USERNAME": "reader",
           "KAFKA_SASL_PASSWORD": password, "CRAWL_ID": crawl_id}
    try:
        allow_crawl(broker, "reader", crawl_id, write=False)
        code, out, elapsed = crawl(env, *START, "-s", "CONNECT_TIMEOUT=3")
    finally:
        broker.stop()
    line = the_one_error(code, out)
    assert "refused the crawl: TopicAuthorizationFailedError for user reader" in line, line
    assert "ACLs" in line and password not in out and elapsed < 30, (elapsed, out[-2000:])
