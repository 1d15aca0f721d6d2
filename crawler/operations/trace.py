"""``scrapy cluster trace CRAWL_ID URL [--json]``: what happened to one URL of a crawl.

It reads the URL's document in the crawl's status index (``<CRAWL_ID>.urls`` in
``MONGO_DATABASE``, :mod:`crawler.statusindex`), during the crawl or after it. The URL is
looked up in the crawl's canonical form (``CANONICAL_*``), so ``/page?utm_source=x`` answers
for ``/page``. A URL the crawl never saw is ``unknown`` (exit code 0).
"""

from __future__ import annotations

import json
import time
from typing import Any

from scrapy.settings import BaseSettings

from crawler.connections.clients import mongo_client_from
from crawler.connections.options import MongoOptions
from crawler.frontier.canonical import CanonicalRules
from crawler.statusindex import collection_of
from crawler.statusindex.events import trace
from crawler.storage.settings import StorageConfig

SHOWN = ("worker", "from", "reason", "status", "attempts", "proxy", "topic", "partition",
         "offset", "collection", "id")


async def lookup(settings: BaseSettings, crawl: str, url: str) -> dict[str, Any]:
    """The trace of *url* in crawl *crawl* (:func:`crawler.statusindex.events.trace`)."""
    storage = StorageConfig.from_settings(settings, crawl)
    if storage is None:
        raise LookupError("MONGO_URI is not set (setting or environment): "
                          "cannot read the status index")
    canonical = CanonicalRules.from_settings(settings).url(url)
    client = mongo_client_from(MongoOptions.from_settings(settings))
    try:
        urls = client[storage.database][collection_of(crawl)]
        doc = await urls.find_one({"_id": canonical})
        if doc is None and canonical != url:
            doc = await urls.find_one({"_id": url})
    finally:
        await client.close()
    return trace(canonical if doc is None or doc["_id"] == canonical else url, doc)


def as_text(found: dict[str, Any]) -> str:
    lines = [f"{found['url']}: {found['state']}"
             + (f" ({found['reason']})" if found.get("reason") else "")]
    if found.get("linked_from"):
        lines.append(f"first linked from {found['linked_from']}")
    if found["state"] == "unknown":
        lines.append("the crawl's status index has no record of this URL")
    for event in found["events"]:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(event.get("at", 0)))
        fields = "  ".join(f"{k}={event[k]}" for k in SHOWN if k in event)
        lines.append(f"  {when}  {event['event']:<13} {fields}")
    return "\n".join(lines)


def as_json(found: dict[str, Any]) -> str:
    return json.dumps(found, sort_keys=True, default=str)
