"""A three-broker Apache Kafka cluster on loopback, configured as production runs one: every
topic replicated 3 times with ``min.insync.replicas`` 2, the internal topics too, so that an
``acks=all`` write survives the loss of any one broker.

Each node is broker and controller (KRaft, a static quorum of all three); each has its own
log directory and log file under the cluster's directory. :meth:`KafkaCluster.kill` ends one
with SIGKILL (a crash); :meth:`KafkaCluster.start_node` starts it again on its own log
directories, as an operator restarts a broker::

    cluster = KafkaCluster(Path("kafka3"))
    bootstrap = cluster.start()
    victim = cluster.leader_of_most(["crawl.requests", "crawl.seeds"])
    cluster.kill(victim)
    ...
    cluster.start_node(victim)
    cluster.stop()
"""

from __future__ import annotations

import contextlib
import logging
import signal
import subprocess
import time
from collections import Counter
from collections.abc import Iterable, Iterator
from pathlib import Path

from kafka import KafkaAdminClient

from crawler.localstack import kafka_broker as kb
from crawler.localstack.services import HOST, StackError, free_port, stop_process

logger = logging.getLogger(__name__)

class KafkaCluster:
    """*nodes* Kafka nodes in *directory*, replication factor *nodes*, min ISR 2."""

    def __init__(self, directory: Path, nodes: int = 3, *, start_timeout: float = 90.0) -> None:
        self.directory = Path(directory).absolute()
        self.start_timeout = start_timeout
        ports: list[int] = []
        while len(ports) < 2 * nodes:
            ports.append(free_port(exclude=ports))
        voters = {n + 1: ports[2 * n + 1] for n in range(nodes)}
        self.nodes = {
            node_id: kb.NodeConfig(
                node_id, [kb.Listener("PLAINTEXT", ports[2 * (node_id - 1)])], controller,
                voters, self.directory / f"node{node_id}", replication=nodes,
                min_insync=min(2, nodes))
            for node_id, controller in voters.items()}
        self._procs: dict[int, subprocess.Popen[bytes]] = {}

    @property
    def bootstrap(self) -> str:
        return ",".join(f"{HOST}:{node.listeners[0].port}" for node in self.nodes.values())

    def start(self) -> str:
        """Format (once) and start every node; returns the bootstrap servers once all answer."""
        cluster_id = kb.new_cluster_id()
        for node in self.nodes.values():
            kb.write_config(node)
            kb.format_storage(node, cluster_id)
        for node_id in self.nodes:
            self._launch(node_id)
        self.wait_brokers(len(self.nodes))
        return self.bootstrap

    def start_node(self, node_id: int) -> None:
        """Start a stopped node again on its own log directories."""
        self._launch(node_id)
        self.wait_brokers(len(self.nodes))

    def kill(self, node_id: int) -> None:
        """``kill -9`` one node."""
        proc = self._procs.pop(node_id)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        logger.info("kafka node %d killed (pid %d)", node_id, proc.pid)

    def stop(self) -> None:
        """Stop every node this object started (SIGTERM, then SIGKILL)."""
        for proc in self._procs.values():
            with contextlib.suppress(ProcessLookupError):
                proc.terminate()
        for proc in self._procs.values():
            stop_process(proc, 20)
        self._procs.clear()

    def running(self) -> list[int]:
        return [n for n, proc in self._procs.items() if proc.poll() is None]

    def log(self, node_id: int) -> Path:
        return self.directory / f"node{node_id}.log"

    @contextlib.contextmanager
    def admin(self) -> Iterator[KafkaAdminClient]:
        live = ",".join(f"{HOST}:{self.nodes[n].listeners[0].port}" for n in self.running())
        client = KafkaAdminClient(bootstrap_servers=live, request_timeout_ms=10000)
        try:
            yield client
        finally:
            client.close()

    def wait_brokers(self, count: int) -> None:
        """Wait until *count* brokers are registered, unfenced, and answer. Failure
        detection is Kafka's default: a silent broker is fenced after
        ``broker.session.timeout.ms`` (9 s)."""
        deadline, error = time.monotonic() + self.start_timeout, None
        while time.monotonic() < deadline:
            for node_id, proc in self._procs.items():
                if proc.poll() is not None:
                    raise StackError(f"kafka node {node_id} exited: "
                                     f"{self.log(node_id).read_text()[-800:]}")
            try:
                with self.admin() as admin:
                    brokers = admin.describe_cluster()["brokers"]
                    if sum(not b.get("is_fenced") for b in brokers) >= count:
                        return
            except Exception as exc:
                error = exc
            time.sleep(0.3)
        raise StackError(f"{count} Kafka brokers did not answer in time ({error!r})")

    def leaders(self, topics: Iterable[str]) -> Counter[int]:
        """How many partitions of *topics* each node leads."""
        with self.admin() as admin:
            described = admin.describe_topics(list(topics))
        return Counter(p["leader_id"] for topic in described for p in topic["partitions"])

    def leader_of_most(self, topics: Iterable[str]) -> int:
        return self.leaders(topics).most_common(1)[0][0]

    def coordinator(self, group: str) -> int:
        """The node that coordinates *group* (leads its ``__consumer_offsets`` partition)."""
        with self.admin() as admin:
            return int(admin._manager.run(admin._find_coordinator_id, group))

    def _launch(self, node_id: int) -> None:
        node = self.nodes[node_id]
        with self.log(node_id).open("ab") as out:
            self._procs[node_id] = subprocess.Popen(
                kb.broker_argv(node), stdin=subprocess.DEVNULL, stdout=out,
                stderr=subprocess.STDOUT, start_new_session=True)
        logger.info("kafka node %d starting (pid %d)", node_id, self._procs[node_id].pid)
