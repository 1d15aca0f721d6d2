"""Apache Kafka (KRaft) for the local stack: its jars, a node's configuration, its start command.

The broker is the Maven Central artifact ``org.apache.kafka:kafka_2.13`` at
:data:`KAFKA_VERSION`, run on the machine's Java (17 or later). Its jars, with the log4j2
binding that the published POM leaves out, are copied once per version into
:func:`jars_dir` by Maven (``python -m crawler.localstack.kafka_broker install``, which
``./run`` calls); the stack runs ``java -cp DIR/* kafka.Kafka server.properties``.

A node is formatted (``kafka.tools.StorageTool format``) once, on its first start; a later
start on the same ``log.dirs`` (after SIGTERM or ``kill -9``) keeps what it had written.
"""

from __future__ import annotations

import base64
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from crawler.localstack.services import (
    HOST,
    StackError,
    free_port,
    java_binary,
    port_taken,
)

logger = logging.getLogger(__name__)

KAFKA_VERSION = "4.3.1"
LOG4J_VERSION = "2.24.3"  # log4j-slf4j-impl: the slf4j binding the broker's POM leaves out
DEPENDENCY_PLUGIN = "org.apache.maven.plugins:maven-dependency-plugin:3.8.1"
# Small on 2 cores: one node of the local stack, or three beside a crawl in the tests. The
# client JIT alone (TieredStopAtLevel=1): a broker that lives minutes spent more CPU compiling
# than the compiled code saved (to ready: 4.5 CPU-s instead of 7.5; 60,000 records produced:
# 3.4 instead of 5.9).
JVM_OPTIONS = ("-Xms128m", "-Xmx512m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
               "-XX:+ExitOnOutOfMemoryError", "-XX:-UsePerfData", "-Djava.awt.headless=true")
# Threads for 2 cores. Group joins keep Kafka's defaults, as production: the first member of
# an empty group waits group.initial.rebalance.delay.ms (3 s) for the others, so workers
# started together are assigned once, not once each (with 0, the first took partitions that
# the next join revoked mid-fetch, and a request was fetched again by another worker).
# The active controller appends a no-op record to the metadata log every
# metadata.max.idle.interval.ms that the log is idle (500 by default, to show the quorum
# alive in its metrics): every 5 s, an idle node spent 0.9 CPU-s a minute instead of 1.6.
LOCAL_SETTINGS: Mapping[str, str] = {
    "num.network.threads": "2",
    "num.io.threads": "2",
    "background.threads": "2",
    "group.coordinator.threads": "1",
    "log.retention.check.interval.ms": "60000",
    "metadata.max.idle.interval.ms": "5000",
}
LOG4J2 = """\
status = warn
appender.out.type = Console
appender.out.name = OUT
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = WARN
rootLogger.appenderRef.out.ref = OUT
logger.server.name = kafka.server
logger.server.level = INFO
logger.group.name = org.apache.kafka.coordinator.group
logger.group.level = INFO
logger.controller.name = org.apache.kafka.controller
logger.controller.level = INFO
"""


def jars_dir(version: str = KAFKA_VERSION) -> Path:
    """Where the jars of *version* are kept: ``$XDG_CACHE_HOME/scrapy-fleet/kafka_2.13-V``."""
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "scrapy-fleet" / f"kafka_2.13-{version}"


def _pom(version: str) -> str:
    def dependency(group: str, artifact: str, ver: str) -> str:
        return (f"<dependency><groupId>{group}</groupId><artifactId>{artifact}</artifactId>"
                f"<version>{ver}</version></dependency>")
    return ("<project xmlns=\"http://maven.apache.org/POM/4.0.0\"><modelVersion>4.0.0"
            "</modelVersion><groupId>local</groupId><artifactId>kafka-broker</artifactId>"
            "<version>1</version><packaging>pom</packaging><dependencies>"
            + dependency("org.apache.kafka", "kafka_2.13", version)
            + dependency("org.apache.logging.log4j", "log4j-slf4j-impl", LOG4J_VERSION)
            + "</dependencies></project>")


def install_jars(version: str = KAFKA_VERSION) -> Path:
    """The jars of *version* in :func:`jars_dir`, copied there by Maven if not yet."""
    target = jars_dir(version)
    if (target / ".complete").exists():
        return target
    mvn = shutil.which("mvn")
    if mvn is None:
        raise StackError(f"the Kafka {version} jars are not in {target} and mvn is not on "
                         "PATH: `apt-get install maven`, or run ./run once")
    with tempfile.TemporaryDirectory() as work:
        (Path(work) / "pom.xml").write_text(_pom(version))
        staging = Path(work) / "libs"
        done = subprocess.run(
            [mvn, "-B", "-q", f"{DEPENDENCY_PLUGIN}:copy-dependencies", "-DincludeScope=runtime",
             f"-DoutputDirectory={staging}"], cwd=work, capture_output=True, text=True)
        if done.returncode != 0:
            raise StackError(f"Maven could not fetch Kafka {version}: "
                             f"{(done.stdout + done.stderr).strip()[-600:]}")
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(target, ignore_errors=True)
        shutil.copytree(staging, target)
    (target / ".complete").write_text(version + "\n")
    logger.info("Kafka %s: %d jars in %s", version, len(list(target.glob("*.jar"))), target)
    return target


def new_cluster_id() -> str:
    """A KRaft cluster id: 16 random bytes, URL-safe base64 without padding (not '-' first)."""
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        if not text.startswith("-"):
            return text


@dataclass
class Listener:
    """One client listener of a node: its name, port and security protocol."""

    name: str
    port: int
    protocol: str = "PLAINTEXT"


@dataclass
class NodeConfig:
    """What makes one KRaft node (broker and controller in one process)."""

    node_id: int
    listeners: Sequence[Listener]
    controller_port: int
    voters: Mapping[int, int]  # node id -> controller port, the whole quorum
    data: Path
    replication: int = 1  # of the internal topics, and the default of new topics
    min_insync: int = 1
    extra: Mapping[str, str] = field(default_factory=dict)

    @property
    def log_dir(self) -> Path:
        return self.data / "log"

    def properties(self) -> dict[str, str]:
        names = [*(f"{lis.name}://{HOST}:{lis.port}" for lis in self.listeners)]
        protocols = {lis.name: lis.protocol for lis in self.listeners} | {
            "CONTROLLER": "PLAINTEXT"}
        rf, isr = str(self.replication), str(self.min_insync)
        return {
            "process.roles": "broker,controller",
            "node.id": str(self.node_id),
            "controller.quorum.voters": ",".join(
                f"{node}@{HOST}:{port}" for node, port in sorted(self.voters.items())),
            "listeners": ",".join([*names, f"CONTROLLER://{HOST}:{self.controller_port}"]),
            "advertised.listeners": ",".join(names),
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": self.listeners[0].name,
            "listener.security.protocol.map": ",".join(f"{k}:{v}" for k, v in protocols.items()),
            "log.dirs": str(self.log_dir),
            "default.replication.factor": rf,
            "min.insync.replicas": isr,
            "offsets.topic.replication.factor": rf,
            "transaction.state.log.replication.factor": rf,
            "transaction.state.log.min.isr": isr,
            "share.coordinator.state.topic.replication.factor": rf,
            "share.coordinator.state.topic.min.isr": isr,
            **LOCAL_SETTINGS,
            **self.extra,
        }


def write_config(node: NodeConfig) -> Path:
    """Write the node's ``server.properties`` and ``log4j2.properties`` into its data dir."""
    node.data.mkdir(parents=True, exist_ok=True)
    path = node.data / "server.properties"
    tmp = path.with_suffix(".tmp")
    tmp.write_text("".join(f"{key}={value}\n" for key, value in node.properties().items()))
    os.chmod(tmp, 0o600)  # a SASL listener's JAAS line holds passwords
    tmp.replace(path)
    (node.data / "log4j2.properties").write_text(LOG4J2)
    return path


def class_archive(version: str = KAFKA_VERSION) -> Path:
    """The class-data-sharing archive of *version*'s broker for this machine's JVM (its
    ``libjvm.so`` in the name: another JVM would not take it), built by
    :mod:`crawler.localstack.kafka_classes` at install."""
    java = Path(java_binary()).resolve()
    libjvm = next(iter(java.parent.parent.glob("lib/*/libjvm.so")), java)
    stat = libjvm.stat()
    return jars_dir(version) / f".classes-{stat.st_size}-{stat.st_mtime_ns}.jsa"


def jvm_options(dump_to: Path | None = None) -> list[str]:
    """:data:`JVM_OPTIONS` and the class archive: loaded when there is one (a broker starts in
    about a third of the CPU time), or written to *dump_to* when the JVM exits."""
    if dump_to is not None:
        return [*JVM_OPTIONS, f"-XX:ArchiveClassesAtExit={dump_to}"]
    archive = class_archive()
    return [*JVM_OPTIONS, *([f"-XX:SharedArchiveFile={archive}"] if archive.exists() else [])]


def _java(node_data: Path, main: str, *args: str, dump_to: Path | None = None) -> list[str]:
    return [java_binary(), *jvm_options(dump_to),
            f"-Dlog4j2.configurationFile={node_data / 'log4j2.properties'}",
            "-cp", f"{install_jars()}/*", main, *args]


def format_storage(node: NodeConfig, cluster_id: str, scram: Sequence[str] = ()) -> None:
    """Format the node's log dir for *cluster_id*, once; *scram*: ``--add-scram`` values."""
    if (node.log_dir / "meta.properties").exists():
        return
    extra = [arg for value in scram for arg in ("--add-scram", value)]
    done = subprocess.run(
        _java(node.data, "kafka.tools.StorageTool", "format", "-t", cluster_id,
              "-c", str(node.data / "server.properties"), *extra),
        capture_output=True, text=True, stdin=subprocess.DEVNULL)
    if done.returncode != 0:
        raise StackError(f"kafka storage format failed: {(done.stdout + done.stderr)[-600:]}")


def broker_argv(node: NodeConfig, dump_to: Path | None = None) -> list[str]:
    """The command that runs *node* (configured by :func:`write_config`); with *dump_to*, the
    JVM writes the classes it loaded there at exit (:func:`jvm_options`)."""
    return _java(node.data, "kafka.Kafka", str(node.data / "server.properties"),
                 dump_to=dump_to)


def single_node_command(data: Path, port: int) -> list[str]:
    """The local stack's broker: one node listening on *port*, its files under *data*.

    The configuration is written anew at each start (the client port may be new); the
    controller port stays the one the node was formatted with, when it is still free."""
    controller = _recorded_controller_port(data)
    if controller is None or controller == port or port_taken(controller):
        controller = free_port(exclude=[port])
    node = NodeConfig(1, [Listener("PLAINTEXT", port)], controller, {1: controller}, data)
    write_config(node)
    format_storage(node, new_cluster_id())
    return broker_argv(node)


def _recorded_controller_port(data: Path) -> int | None:
    try:
        text = (data / "server.properties").read_text()
    except FileNotFoundError:
        return None
    for line in text.splitlines():
        if line.startswith("controller.quorum.voters="):
            return int(line.rsplit(":", 1)[1])
    return None


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args != ["install"]:
        print("usage: python -m crawler.localstack.kafka_broker install", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.INFO, format="kafka: %(message)s", stream=sys.stderr)
    logging.getLogger("kafka").setLevel(logging.CRITICAL)  # the probe's retries while it starts
    from crawler.localstack.kafka_classes import build_class_archive

    try:
        print(install_jars())
        build_class_archive()
    except StackError as exc:
        print(f"kafka: error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
