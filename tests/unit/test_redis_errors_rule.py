"""Which Redis errors are retried (transient) and which are reported (deterministic): the rule
on redis-py's exceptions (errors a real Redis returns: tests/integration/test_redis_errors.py)."""

from __future__ import annotations

import pytest
from redis import exceptions as rex

from crawler.connections.redis_errors import describe, is_transient, kind
from crawler.dedup.dupefilter import BloomMissing


@pytest.mark.parametrize("exc", [
    rex.ConnectionError("Error 111 connecting"), rex.TimeoutError("Timeout reading"),
    rex.BusyLoadingError("Redis is loading the dataset in memory"),
    rex.ReadOnlyError("You can't write against a read only replica."),
    rex.TryAgainError("Multiple keys request during rehashing"),
    rex.ClusterDownError("The cluster is down"), rex.MasterDownError("Link with MASTER is down"),
    rex.MovedError("3999 127.0.0.1:6381"), rex.ResponseError("BUSY Redis is busy running a script"),
    rex.ResponseError("NOREPLICAS Not enough good replicas to write."),
    ConnectionResetError(), TimeoutError(), BloomMissing("gone"),
])
def test_transient_errors(exc: BaseException) -> None:
    assert is_transient(exc) and kind(exc) == "transient"


@pytest.mark.parametrize("exc", [
    rex.OutOfMemoryError("command not allowed when used memory > 'maxmemory'."),
    rex.NoPermissionError("this user has no permissions to run the 'evalsha' command"),
    rex.AuthenticationError("invalid username-password pair"),
    rex.AuthorizationError("NOAUTH"),
    rex.ResponseError("Error running script (call to f_1234): @user_script:1: oops"),
    rex.ResponseError("WRONGTYPE Operation against a key holding the wrong kind of value"),
    rex.DataError("Invalid input of type: 'dict'"), rex.ExecAbortError("Transaction discarded"),
    ValueError("a bug"),
])
def test_deterministic_errors(exc: BaseException) -> None:
    assert not is_transient(exc) and kind(exc) == "deterministic"


def test_describe_is_one_line() -> None:
    assert describe(rex.ResponseError("ERR a\nb   c")) == "ResponseError: ERR a b c"
