"""The broker's class-data-sharing archive: the classes a started broker loaded, written once
per Kafka version and JVM (``java -XX:ArchiveClassesAtExit``), then mapped by every broker
and storage format of the local stack (``-XX:SharedArchiveFile``, :func:`kafka_broker.jvm_options`).

A node of the stack starts on about half the CPU time with it (measured on 2 cores, the
archive alone: 3.8 CPU-seconds to ready instead of 7.5, the storage format 1.6 instead of 2.6;
with the client JIT of :data:`kafka_broker.JVM_OPTIONS` too: 2.7 and 1.1), which counts in a
test suite that starts dozens of brokers. Nothing about the broker changes: the same classes,
from a memory-mapped file instead of the jars. A JVM that cannot use the archive (another
build) ignores it with a warning in the broker's log.

``python -m crawler.localstack.kafka_broker install`` builds it (``./run`` calls that): one
node is started in a scratch directory, asked for its topics once it answers, and stopped;
the archive is written under a temporary name and renamed, so a broker started meanwhile
never maps half a file.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import tempfile
from pathlib import Path

from crawler.localstack import kafka_broker as kb
from crawler.localstack.services import free_port, wait_answering

logger = logging.getLogger(__name__)

READY_TIMEOUT = 120.0  # seconds: the first start reads every jar


def build_class_archive() -> Path | None:
    """Write :func:`kafka_broker.class_archive` if it is missing; its path, or None when the
    JVM wrote none (a JVM without dynamic archives: the brokers then start without one)."""
    archive = kb.class_archive()
    if archive.exists():
        return archive
    with tempfile.TemporaryDirectory(prefix="kafka-classes-") as work:
        partial = archive.with_name(f"{archive.name}.{os.getpid()}.tmp")
        _run_once(Path(work), partial)
        if not partial.exists():
            logger.warning("the JVM wrote no class archive; brokers start without one")
            return None
        os.replace(partial, archive)
    logger.info("class archive: %s", archive)
    return archive


def _run_once(work: Path, dump_to: Path) -> None:
    """Start a node in *work*, wait until it answers, stop it (SIGTERM: the JVM exits through
    its shutdown hooks and writes *dump_to*)."""
    port = free_port()
    controller = free_port(exclude=[port])
    node = kb.NodeConfig(1, [kb.Listener("PLAINTEXT", port)], controller, {1: controller}, work)
    kb.write_config(node)
    kb.format_storage(node, kb.new_cluster_id())
    with (work / "broker.log").open("wb") as log:
        proc = subprocess.Popen(kb.broker_argv(node, dump_to=dump_to), stdin=subprocess.DEVNULL,
                                stdout=log, stderr=subprocess.STDOUT, cwd=work)
    try:
        wait_answering("kafka", port, lambda: proc.poll() is None, work / "broker.log",
                       READY_TIMEOUT, pid=proc.pid, poll=0.5)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            dump_to.unlink(missing_ok=True)  # cut short: never kept
