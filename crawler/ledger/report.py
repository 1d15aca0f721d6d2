"""The reconciliation of a crawl: every record of its topics is accounted for, or pending.

Kafka says how many records the crawl's topics hold (their end offsets) and how many the
group committed; the ledger says what became of each record it counted (once per record:
:mod:`crawler.ledger.recorder`). A record is committed only after its outcome is in the
ledger, so

- ``pending`` = records written - records with an outcome (still in Kafka, in a buffer,
  in flight);
- ``unaccounted`` = records committed - records with an outcome: a committed record no
  counter explains. It is 0 at every moment of a correct crawl, and exact once the crawl has
  finished (everything is committed then).

After Redis lost the crawl's state (:mod:`crawler.recovery`) the counters start again from
zero: the ledger holds when (``reset/at``) and how many records had been committed then
(``reset/committed``), and the balance is of the records since. It is approximate by the
records in flight at the loss (their outcomes counted in the lost hash or in the new one),
and the report says the ledger was reset rather than show a false zero.

Pure: :mod:`crawler.ledger.sources` reads Redis, Kafka and MongoDB.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from crawler.ledger import outcomes as o


@dataclass(frozen=True)
class Offsets:
    """Records of a group of topics: ever written (end offsets) and committed by the group."""

    written: int
    committed: int


RESET_AT, RESET_COMMITTED = "reset/at", "reset/committed"  # the ledger's reset (recovery)


def _by(counters: Mapping[str, int], prefix: str) -> dict[str, int]:
    return {k[len(prefix):]: v for k, v in sorted(counters.items())
            if k.startswith(prefix) and v}


def reconcile(counters: Mapping[str, int], *, crawl_id: str, requests: Offsets,
              seeds: Offsets, stored: int | None, rejected: int | None, finished: bool,
              workers: int) -> dict[str, Any]:
    """The report of ``scrapy cluster report --json`` (see the module docstring)."""
    c = {k: int(v) for k, v in counters.items()}
    reset_at, before = c.pop(RESET_AT, None), c.pop(RESET_COMMITTED, 0)
    fetched, failed = _by(c, o.FETCHED), _by(c, o.FAILED)
    dropped, seeds_by = _by(c, o.DROPPED), _by(c, o.SEEDS)
    dead, requeued = c.get(o.DEAD, 0), c.get(o.REQUEUED, 0)
    seed_done = sum(v for k, v in seeds_by.items() if k != "published")
    request_done = sum(fetched.values()) + sum(failed.values()) + sum(dropped.values()) \
        + dead + requeued
    done = seed_done + request_done
    written, committed = requests.written + seeds.written, requests.committed + seeds.committed
    written, committed = written - before, committed - before  # counted since a reset
    gap = committed - done
    again = sum(v for k, v in c.items() if k.startswith(o.AGAIN) and not k.startswith(
        o.AGAIN + "items/"))
    return {
        "crawl_id": crawl_id, "finished": finished, "workers": workers,
        "ledger_reset": None if reset_at is None else {"at": reset_at,
                                                       "committed_before": before},
        "pending": max(0, written - done), "unaccounted": max(0, gap),
        "overcounted": max(0, -gap) if finished and reset_at is None else 0,
        "stored": stored, "rejected": rejected,
        "fetched": sum(fetched.values()), "failed": sum(failed.values()),
        "dropped": dropped, "dead": dead + seeds_by.get("invalid", 0),
        "redelivered": again, "lag": written - committed,
        "seeds": {"received": seeds.written, **seeds_by,
                  "pending": max(0, seeds.written - seed_done),
                  "submitted": _by(c, "submitted/")},
        "requests": {"entered": requests.written, "fetched": fetched, "failed": failed,
                     "dropped": dropped, "dead": dead, "requeued": requeued,
                     "pending": max(0, requests.written - request_done)},
        "items": {"scraped": sum(c.get(k, 0) for k in (o.ITEMS_STORED, o.ITEMS_DROPPED,
                                                        o.ITEMS_ERROR)),
                  **_by(c, "items/")},
        "discarded": _by(c, "discarded/"),
        "work": {k: c.get(k, 0) for k in ("records/consumed", "requests/produced",
                                          "requests/filtered", "retries", "dead_lettered")},
    }


def lines(report: Mapping[str, Any]) -> list[str]:
    """The report as text, one fact a line."""
    r, s, q = report, report["seeds"], report["requests"]
    state = "finished" if r["finished"] else f"running ({r['workers']} workers)"
    out = [
        f"crawl {r['crawl_id']}: {state}",
        f"seeds     received {s['received']}: " + _kv({k: v for k, v in s.items()
                                                       if k not in ("received", "submitted")})
        + f"; scrapy seed: {_kv(s['submitted']) or 'none'}",
        f"requests  entered {q['entered']}: fetched {r['fetched']} ({_kv(q['fetched'])}), "
        f"failed {r['failed']}{_paren(q['failed'])}, dropped {sum(r['dropped'].values())}"
        f"{_paren(r['dropped'])}, dead {q['dead']}, requeued {q['requeued']}, "
        f"pending {q['pending']}",
        f"balance   pending {r['pending']}, unaccounted {r['unaccounted']}, "
        f"redelivered {r['redelivered']}, Kafka lag {r['lag']}",
        f"items     {_kv(r['items'])}; in MongoDB: stored {_none(r['stored'])}, "
        f"rejected {_none(r['rejected'])}",
        f"never entered the frontier: {_kv(r['discarded']) or 'none'}; "
        f"{_kv(r['work'])}",
    ]
    if r.get("ledger_reset"):
        reset = r["ledger_reset"]
        when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(reset["at"]))
        out.insert(1, f"ledger    reset on {when}: Redis lost the crawl's state; the counts "
                      f"are those since, {reset['committed_before']} records were committed "
                      "before it")
    if r.get("overcounted"):
        out.append(f"overcounted {r['overcounted']}: more outcomes than records (a bug)")
    return out


def _kv(values: Mapping[str, Any]) -> str:
    return ", ".join(f"{k} {v}" for k, v in values.items())


def _paren(values: Mapping[str, Any]) -> str:
    return f" ({_kv(values)})" if values else ""


def _none(value: int | None) -> str:
    return "?" if value is None else str(value)
