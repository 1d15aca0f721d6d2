"""Which Redis errors are worth retrying: one rule for every caller.

An error is *transient* when the same call may succeed later without anyone changing
anything: the connection broke or timed out, the server is loading its data set
(``LOADING``), runs a long script (``BUSY``), is a replica after a failover (``READONLY``),
or the cluster is resharding or electing (``TRYAGAIN``, ``CLUSTERDOWN``, ``MASTERDOWN``,
``MOVED``, ``ASK``). Callers retry those with a backoff for ever and say once that they
stall.

Every other error is *deterministic*: the same call fails the same way until an operator
acts. That covers ``OOM`` (``maxmemory`` reached, with ``noeviction``), ``NOPERM`` (an ACL
forbids the command or the key), ``WRONGPASS``/``NOAUTH``, a script error (``ERR Error
running script``, ``WRONGTYPE``), and errors that are not Redis errors at all (a bug in
the caller). Retrying them fills the log and never ends; callers report them with one
clear line (:func:`describe`) and stop or dead-letter.

An exception raised by this project (not by redis-py) that means "wait, the state will
come back" derives from :class:`TransientError` and is transient too.
"""

from __future__ import annotations

import asyncio

from redis import exceptions as rex

# Error-reply prefixes redis-py reports as a plain ResponseError, though they pass.
TRANSIENT_PREFIXES = ("BUSY ", "LOADING ", "READONLY ", "TRYAGAIN ", "CLUSTERDOWN ",
                      "MASTERDOWN ", "NOREPLICAS ", "MOVED ", "ASK ")

_DETERMINISTIC = (
    rex.AuthenticationError,  # WRONGPASS, NOAUTH: a subclass of ConnectionError
    rex.AuthorizationError,  # the same, for the AUTH command
    rex.ExternalAuthProviderError,
    rex.OutOfMemoryError,
    rex.NoPermissionError,
    rex.DataError,  # a value redis-py cannot send
)
_TRANSIENT = (
    rex.ConnectionError,  # refused, reset, closed; BusyLoadingError (LOADING) is one
    rex.TimeoutError,
    rex.ReadOnlyError,  # a replica after a failover
    rex.TryAgainError,
    rex.ClusterDownError,  # MasterDownError is one
    rex.AskError,  # MovedError is one
    rex.InvalidResponse,  # a connection that broke mid-reply
    ConnectionError,  # OSError subclasses a transport may raise unwrapped
    asyncio.TimeoutError,
    TimeoutError,
)


class TransientError(Exception):
    """An error of this project's that retrying can cure (see the module docstring)."""


def is_transient(exc: BaseException) -> bool:
    """Whether the call that raised *exc* may succeed if simply retried later."""
    if isinstance(exc, TransientError):
        return True
    if isinstance(exc, _DETERMINISTIC):
        return False
    if isinstance(exc, _TRANSIENT):
        return True
    if isinstance(exc, rex.ResponseError):
        return str(exc).startswith(TRANSIENT_PREFIXES)
    return False


def kind(exc: BaseException) -> str:
    """``"transient"`` or ``"deterministic"``, for logs and stats keys."""
    return "transient" if is_transient(exc) else "deterministic"


def describe(exc: BaseException) -> str:
    """One line naming the error's class and the server's message (no URL or password:
    redis-py's messages carry neither)."""
    text = " ".join(str(exc).split()) or "(no message)"
    return f"{type(exc).__name__}: {text[:300]}"
