"""What the status index records of a URL: its events, its state, and the update of its
document.

A URL's document (``_id``: the URL in canonical form) holds its last
:data:`MAX_EVENTS` events, the first event of a link to it (``first``, discovered or
filtered, with the linking page in ``from``: kept when older events go),
its ``state`` and the ``reason`` of that state, and ``at`` (the last write, for the TTL).
The state is that of the highest-ranked event seen, so events that reach MongoDB out of
order (two workers, two batches) still leave the right one: a page fetched by one worker
and stored by it is ``stored`` even if its ``queued`` event is written after.
"""

from __future__ import annotations

import time
from typing import Any

DISCOVERED, FILTERED, QUEUED, REQUEUED = "discovered", "filtered", "queued", "requeued"
FETCHED, STORED, FAILED, DEAD = "fetched", "stored", "failed", "dead-lettered"
UNKNOWN = "unknown"  # a URL the index does not know
STATES = (DISCOVERED, FILTERED, QUEUED, FETCHED, STORED, FAILED, DEAD)
RANK = {DISCOVERED: 1, QUEUED: 2, REQUEUED: 2, FILTERED: 3, FAILED: 4, DEAD: 4,
        FETCHED: 5, STORED: 6}
MAX_EVENTS = 50  # a URL's events kept (a recrawled URL gains some at each visit)

Event = dict[str, Any]


def event(name: str, worker: str | None, **fields: Any) -> Event:
    """An event *name* now, by *worker*; fields that are None or empty are left out."""
    found: Event = {"event": name, "at": time.time()}
    if worker:
        found["worker"] = worker
    found.update((k, v) for k, v in fields.items() if v not in (None, ""))
    return found


def strongest(events: list[Event]) -> Event:
    """The event that sets the state: the highest rank, the latest among equals."""
    return max(events, key=lambda e: (RANK.get(e["event"], 0), e["at"]))


def update(events: list[Event], now: float) -> list[dict[str, Any]]:
    """The pipeline update (MongoDB 4.2+) adding *events* to a URL's document."""
    top = strongest(events)
    rank, state, reason = RANK.get(top["event"], 0), _state(top["event"]), top.get("reason")
    wins = {"$gte": [rank, {"$ifNull": ["$rank", 0]}]}
    first = next((e for e in events if e.get("from")), None)  # a link: discovered, filtered
    kept = {"$concatArrays": [{"$ifNull": ["$events", []]}, {"$literal": events}]}
    return [{"$set": {
        "events": {"$slice": [kept, -MAX_EVENTS]},
        "state": {"$cond": [wins, {"$literal": state}, "$state"]},
        "reason": {"$cond": [wins, {"$literal": reason}, "$reason"]},
        "rank": {"$max": [{"$ifNull": ["$rank", 0]}, rank]},
        "first": {"$ifNull": ["$first", {"$literal": first}]},
        "at": now,
    }}]


def _state(name: str) -> str:
    return QUEUED if name == REQUEUED else name


def trace(url: str, doc: dict[str, Any] | None) -> dict[str, Any]:
    """What ``scrapy cluster trace --json`` prints for *url* (its document, or None)."""
    if doc is None:
        return {"url": url, "state": UNKNOWN, "events": []}
    events = sorted(doc.get("events") or [], key=lambda e: e.get("at", 0))
    first = doc.get("first")
    if first and all(e != first for e in events):
        events.insert(0, first)  # the first link, older than the events kept
    found = {"url": url, "state": doc.get("state") or UNKNOWN, "events": events}
    if doc.get("reason"):
        found["reason"] = doc["reason"]
    if first and first.get("from"):
        found["linked_from"] = first["from"]
    return found
