"""The write of one document: a plain replace, or, for a page that carries a content hash,
an update that keeps track of changes between fetches (``docs/recrawl.md``).

A document with ``content_hash`` and ``fetched_at`` (the ``site`` spider's items) is written
by one update pipeline, atomic on the server, which

- keeps the stored document if it is from the same fetch or a later one (its ``fetched_at``
  is the same or later): a write delivered twice, or a late write of an older fetch,
  changes nothing;
- otherwise replaces it with the new one plus ``previous_hash`` (the stored
  ``content_hash``, null on a first fetch), ``changed`` (the hashes differ; false on a
  first fetch) and ``changed_at`` (the ``fetched_at`` of the fetch that first stored the
  current content: moved only when the content hash differs).

Only hashes are compared, never counts, so a duplicate fetch of the same content (a request
delivered again after a crash) leaves ``changed_at`` where it was.
"""

from __future__ import annotations

from typing import Any

from bson.raw_bson import RawBSONDocument
from pymongo import ReplaceOne, UpdateOne

HASH, FETCHED = "content_hash", "fetched_at"

Upsert = ReplaceOne[Any] | UpdateOne


def upsert(key: str, doc: RawBSONDocument) -> Upsert:
    """The upsert of *doc* under ``_id`` *key*."""
    if HASH not in doc or FETCHED not in doc:
        return ReplaceOne({"_id": key}, doc, upsert=True)
    return UpdateOne({"_id": key}, pipeline(dict(doc)), upsert=True)


def pipeline(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """The update pipeline that writes *doc* (see the module docstring)."""
    new_hash, fetched = {"$literal": doc[HASH]}, {"$literal": doc[FETCHED]}
    stored_hash = {"$ifNull": ["$" + HASH, None]}
    same = {"$eq": [stored_hash, new_hash]}
    fresh = {"$mergeObjects": [{"$literal": doc}, {
        "previous_hash": stored_hash,
        "changed": {"$and": [{"$ne": [stored_hash, None]}, {"$not": [same]}]},
        "changed_at": {"$cond": [same, {"$ifNull": ["$changed_at", fetched]}, fetched]},
    }]}
    newer = {"$gte": [{"$ifNull": ["$" + FETCHED, ""]}, fetched]}
    return [{"$replaceWith": {"$cond": [newer, "$$ROOT", fresh]}}]
