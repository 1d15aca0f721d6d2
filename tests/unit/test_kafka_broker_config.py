"""The Apache Kafka node configuration the local stack writes (no broker runs here: the
brokers themselves are in tests/integration/test_durable_topics.py and the e2e tests)."""

from __future__ import annotations

from pathlib import Path

import pytest

from crawler.localstack import kafka_broker as kb


def test_a_node_of_three_replicates_everything_three_times_with_two_in_sync(
        tmp_path: Path) -> None:
    node = kb.NodeConfig(2, [kb.Listener("PLAINTEXT", 9002)], 9102, {1: 9101, 2: 9102, 3: 9103},
                         tmp_path / "node2", replication=3, min_insync=2)
    props = node.properties()
    assert props["controller.quorum.voters"] == (
        "1@127.0.0.1:9101,2@127.0.0.1:9102,3@127.0.0.1:9103")
    assert props["listeners"] == "PLAINTEXT://127.0.0.1:9002,CONTROLLER://127.0.0.1:9102"
    assert props["advertised.listeners"] == "PLAINTEXT://127.0.0.1:9002"
    for key in ("default.replication.factor", "offsets.topic.replication.factor",
                "transaction.state.log.replication.factor",
                "share.coordinator.state.topic.replication.factor"):
        assert props[key] == "3", key
    for key in ("min.insync.replicas", "transaction.state.log.min.isr",
                "share.coordinator.state.topic.min.isr"):
        assert props[key] == "2", key
    assert props["log.dirs"] == str(tmp_path / "node2" / "log")
    assert "group.initial.rebalance.delay.ms" not in props  # Kafka's default, as production


def test_the_first_listener_carries_the_brokers_own_traffic_and_extra_settings_win(
        tmp_path: Path) -> None:
    node = kb.NodeConfig(1, [kb.Listener("INTERNAL", 1), kb.Listener("SECURE", 2, "SASL_SSL")],
                         3, {1: 3}, tmp_path, extra={"num.io.threads": "4"})
    props = node.properties()
    assert props["inter.broker.listener.name"] == "INTERNAL"
    assert props["listener.security.protocol.map"] == (
        "INTERNAL:PLAINTEXT,SECURE:SASL_SSL,CONTROLLER:PLAINTEXT")
    assert props["num.io.threads"] == "4"
    path = kb.write_config(node)
    assert "SECURE://127.0.0.1:2" in path.read_text()
    assert path.stat().st_mode & 0o077 == 0  # it may hold a JAAS line with passwords


def test_a_cluster_id_is_16_bytes_of_url_safe_base64() -> None:
    ids = {kb.new_cluster_id() for _ in range(50)}
    assert len(ids) == 50
    assert all(len(i) == 22 and not i.startswith("-") for i in ids)


def test_a_broker_maps_the_class_archive_only_once_it_exists(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    archive = kb.class_archive()
    assert archive.parent == kb.jars_dir() and archive.suffix == ".jsa"
    assert not any(opt.startswith("-XX:SharedArchiveFile") for opt in kb.jvm_options())
    archive.parent.mkdir(parents=True)
    archive.write_bytes(b"")
    assert kb.jvm_options()[-1] == f"-XX:SharedArchiveFile={archive}"
    dump = tmp_path / "dump.jsa"  # recording: no archive is read while one is written
    assert kb.jvm_options(dump)[-1] == f"-XX:ArchiveClassesAtExit={dump}"
    assert not any(opt.startswith("-XX:SharedArchiveFile") for opt in kb.jvm_options(dump))
