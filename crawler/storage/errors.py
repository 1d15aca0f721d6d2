"""Which MongoDB errors reject a document, and which ones stall the writes until they clear.

The rule (``docs/delivery.md``, "MongoDB errors"): only a per-document write error whose
code says the document itself can never be stored (:data:`DOCUMENT_CODES`) rejects it.
Every other error is retried with backoff for ever: a *transient* one (:func:`is_transient`:
network, failover, shutdown, timeouts) is an outage that is expected to end by itself; any
other one (``Unauthorized`` after a role change, ``AuthenticationFailed`` after a password
rotation, a quota or disk-full error, an unsatisfiable write concern, a code this module
does not know) *stalls* the writes until an operator fixes the cause. Nothing is dropped
for a condition of the server. Plain functions, no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pymongo.errors import ConnectionFailure, OperationFailure, PyMongoError, WriteConcernError

#: server error codes of an outage that ends by itself: not primary, shutting down, network,
#: timeouts (50 MaxTimeMSExpired, 64 WriteConcernFailed, 262 ExceededTimeLimit)
TRANSIENT_CODES = frozenset(
    {6, 7, 24, 50, 64, 89, 91, 112, 134, 189, 262, 9001, 10058, 10107, 11600, 11602, 13435,
     13436}
)

#: per-document write error codes that no retry can fix: the document is rejected
DOCUMENT_CODES = frozenset({
    2,  # BadValue: an operation the server refuses for this document
    9,  # FailedToParse
    14,  # TypeMismatch
    52,  # DollarPrefixedFieldName
    53,  # InvalidIdField
    55,  # InvalidDBRef
    56,  # EmptyFieldName
    57,  # DottedFieldName
    66,  # ImmutableField
    121,  # DocumentValidationFailure: the collection's validator refuses it
    10334,  # BSONObjectTooLarge
    11000,  # DuplicateKey on a unique index other than _id
    16755,  # a geo index cannot extract keys from it
    17280,  # KeyTooLong
    17419,  # the resulting document is larger than the limit
})

#: codes that need an operator, named in the stall line (``Unauthorized`` is 13)
OPERATOR_CODES = {13: "Unauthorized", 18: "AuthenticationFailed",
                  100: "UnsatisfiableWriteConcern", 8000: "AtlasError", 14031: "OutOfDiskSpace"}


def is_transient(exc: BaseException) -> bool:
    """Whether a failed write is an outage that ends by itself (otherwise it is a stall)."""
    if isinstance(exc, (ConnectionFailure, WriteConcernError)):
        return True  # includes AutoReconnect, NetworkTimeout, NotPrimary, server selection
    if isinstance(exc, OperationFailure):
        return exc.code in TRANSIENT_CODES or exc.has_error_label("RetryableWriteError")
    return isinstance(exc, PyMongoError) and exc.timeout


def is_id_race(error: Mapping[str, Any]) -> bool:
    """Two upserts of one ``_id`` raced (E11000 on ``_id``): the retry replaces."""
    return error.get("code") == 11000 and (
        error.get("keyPattern") == {"_id": 1} or "index: _id_ " in str(error.get("errmsg", "")))


def rejects_document(error: Mapping[str, Any]) -> bool:
    """Whether one ``writeErrors`` entry means its document can never be stored."""
    return error.get("code") in DOCUMENT_CODES and not is_id_race(error)


def describe(error: object) -> str:
    """*error* (an exception or a ``writeErrors`` entry) for a log line: message and code."""
    if isinstance(error, OperationFailure):
        error = {"code": error.code, **(error.details or {})}
    if not isinstance(error, Mapping):
        return f"{type(error).__name__}: {error}" if isinstance(error, Exception) else str(error)
    code = error.get("code")
    name = OPERATOR_CODES.get(code) if isinstance(code, int) else None
    name = name or error.get("codeName")
    return f"{error.get('errmsg')} (code {code}{' ' + name if name else ''})"
